"""Images through the wheel: `Engine.load_mmproj` and `Session.append_image` (bytes or a path),
then `generate` continues after the image, as `cera run --mmproj --image --raw` does; bad
images and a projector of the wrong width raise `cera.CeraError` naming what is wrong.

Needs CERA_MMPROJ (a random-weight mmproj as wide as SmolLM2: examples/make_mmproj) and
CERA_TEST_DATA (llama.cpp's test data: tools/mtmd/test-1.jpeg), as scripts/test.sh sets them.
"""

import os
import subprocess

import pytest

import cera

MODEL = "smollm2-135m-instruct-q4_1"
PROMPT = "Describe the image."


def env_path(var: str) -> str:
    v = os.environ.get(var)
    if not v or not os.path.exists(v):
        raise RuntimeError(f"{var} must name an existing path (scripts/test.sh sets it), got {v!r}")
    return v


@pytest.fixture(scope="module")
def engine():
    return cera.Engine(MODEL, n_threads=2)


@pytest.fixture(scope="module")
def image_path() -> str:
    return os.path.join(env_path("CERA_TEST_DATA"), "tools", "mtmd", "test-1.jpeg")


def test_append_image_then_generate_equals_the_cli(engine, image_path):
    mm = engine.load_mmproj(env_path("CERA_MMPROJ"))
    out = subprocess.run(
        [os.environ["CERA_BIN"], "run", "-m", MODEL, "--mmproj", env_path("CERA_MMPROJ"), "--image",
         image_path, "--raw", "-p", "<__media__>" + PROMPT, "--temp", "0", "-n", "12", "-t", "2"],
        check=True, capture_output=True)
    want = out.stdout.decode()
    s = engine.session(n_ctx=1024)
    n = s.append_image(mm, image_path)
    assert n > 234  # the image's rows (576 x 416: 234 tokens) and its marker text
    assert len(s.tokens) == n
    got = s.generate(PROMPT, max_tokens=12, temperature=0)
    assert got == want.rstrip("\n") or got == want
    # the bytes of the file are the same image
    s2 = engine.session(n_ctx=1024)
    with open(image_path, "rb") as f:
        assert s2.append_image(mm, f.read()) == n
    assert s2.tokens == s.tokens[:n]


def test_bad_images_raise_by_name(engine, image_path):
    mm = engine.load_mmproj(env_path("CERA_MMPROJ"))
    s = engine.session(n_ctx=1024)
    with open(image_path, "rb") as f:
        data = f.read()
    with pytest.raises(cera.CeraError, match="truncated"):
        s.append_image(mm, data[: len(data) // 2])
    with pytest.raises(cera.CeraError, match="not an image"):
        s.append_image(mm, b"hello")
    with pytest.raises(TypeError):
        s.append_image(mm, 42)
    with pytest.raises(OSError):
        s.append_image(mm, "/nonexistent/cat.png")
    assert s.tokens == []
    with pytest.raises(cera.CeraError, match="clip"):
        engine.load_mmproj(engine.path)  # a language model is not an mmproj
