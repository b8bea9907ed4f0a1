"""Images and audio through the wheel: `Engine.load_mmproj`, `Session.append_image` (bytes or a
path) and `Session.append_audio` (bytes, a path or 16 kHz samples), then `generate` continues
after the media, as `cera run --mmproj --image/--audio --raw` does; bad media and a projector
of the wrong width raise `cera.CeraError` naming what is wrong.

Needs CERA_MMPROJ (a random-weight mmproj with both halves, as wide as SmolLM2:
examples/make_mmproj ... tiny+audio) and
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


@pytest.fixture(scope="module")
def wav_path(tmp_path_factory) -> str:
    """0.7 s of a 16 kHz chord, 16-bit mono WAV."""
    import math
    import struct
    import wave
    p = str(tmp_path_factory.mktemp("audio") / "chord.wav")
    with wave.open(p, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"".join(struct.pack("<h", int(7000 * math.sin(2 * math.pi * 392 * i / 16000)
                                                      + 4000 * math.sin(2 * math.pi * 1175 * i / 16000)))
                               for i in range(11200)))
    return p


def test_append_audio_then_generate_equals_the_cli(engine, wav_path):
    """The same mmproj's audio half (CERA_MMPROJ has both): a path, the bytes and the samples
    themselves are the same clip, and the reply is `cera run --audio`'s."""
    import wave
    mm = engine.load_mmproj(env_path("CERA_MMPROJ"))
    out = subprocess.run(
        [os.environ["CERA_BIN"], "run", "-m", MODEL, "--mmproj", env_path("CERA_MMPROJ"), "--audio",
         wav_path, "--raw", "-p", "<__media__>Transcribe.", "--temp", "0", "-n", "12", "-t", "2"],
        check=True, capture_output=True)
    want = out.stdout.decode()
    s = engine.session(n_ctx=1024)
    n = s.append_audio(mm, wav_path)
    assert n == 9  # 0.7 s: 71 frames of 10 ms, 9 positions after the encoder's 8x
    got = s.generate("Transcribe.", max_tokens=12, temperature=0)
    assert got == want.rstrip("\n") or got == want
    with open(wav_path, "rb") as f:
        data = f.read()
    s2 = engine.session(n_ctx=1024)
    assert s2.append_audio(mm, data) == n
    with wave.open(wav_path) as w:
        raw = w.readframes(w.getnframes())
    samples = [int.from_bytes(raw[i:i + 2], "little", signed=True) / 32768 for i in range(0, len(raw), 2)]
    s3 = engine.session(n_ctx=1024)
    assert s3.append_audio(mm, samples) == n
    assert s2.tokens == s.tokens[:n] and s3.tokens == s2.tokens
    with pytest.raises(cera.CeraError, match="audio"):
        s3.append_audio(mm, data[:30])
    with pytest.raises(cera.CeraError, match="under two"):
        s3.append_audio(mm, [0.0] * 100)
    with pytest.raises(TypeError):
        s3.append_audio(mm, 42)
