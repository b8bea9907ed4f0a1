"""Images and audio through `cera serve --mmproj`: the `openai` client's `image_url` content part
(a data URL) and `input_audio` part (base64 WAV), Ollama's `images` on /api/chat and
/api/generate, each the same reply as `cera run` with the same media; and requests the server
must refuse by name. The mmproj is a random-weight one with both halves, as wide as SmolLM2's
embeddings (CERA_MMPROJ, made by `examples/make_mmproj ... tiny+audio` in scripts/test.sh); the
image is llama.cpp's tools/mtmd/test-1.jpeg (CERA_TEST_DATA: the fetched test data), the clip a
WAV drawn here."""
import base64
import io
import math
import os
import subprocess
import wave

import pytest
import requests

from conftest import BIN, Server

PROMPT = "Describe the image."
N = 12


def need(var: str) -> str:
    v = os.environ.get(var)
    if not v or not os.path.exists(v):
        raise RuntimeError(f"{var} must name an existing file or folder (scripts/test.sh sets it), got {v!r}")
    return v


@pytest.fixture(scope="module")
def mmproj() -> str:
    return need("CERA_MMPROJ")


@pytest.fixture(scope="module")
def image() -> bytes:
    with open(os.path.join(need("CERA_TEST_DATA"), "tools", "mtmd", "test-1.jpeg"), "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def vserver(mmproj):
    s = Server("--mmproj", mmproj, "-np", "2", "-c", "4096")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def cli_reply(mmproj, image, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("img") / "test-1.jpeg"
    path.write_bytes(image)
    out = subprocess.run(
        [BIN, "run", "-m", "smollm2", "--mmproj", mmproj, "--image", str(path), "-p", PROMPT,
         "-n", str(N), "--temp", "0", "-t", "2"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip(), out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def clip() -> bytes:
    """0.9 s of a two-tone chord at 16 kHz, 16-bit mono WAV."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"".join(
            int(9000 * math.sin(2 * math.pi * 440 * i / 16000) + 5000 * math.sin(2 * math.pi * 1320 * i / 16000))
            .to_bytes(2, "little", signed=True) for i in range(14400)))
    return buf.getvalue()


def data_url(image: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(image).decode()


def test_openai_image_url_equals_cera_run(vserver, image, cli_reply):
    import openai
    client = openai.OpenAI(base_url=vserver.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(image)}},
            {"type": "text", "text": PROMPT},
        ]}],
        max_tokens=N, temperature=0)
    assert r.choices[0].message.content == cli_reply
    # the image's positions count as prompt tokens (234 image rows and the markers' text)
    assert r.usage.prompt_tokens > 234
    # the same image again: its encoding and prefix come from the cache, the reply is the same
    again = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(image)}},
            {"type": "text", "text": PROMPT},
        ]}],
        max_tokens=N, temperature=0)
    assert again.choices[0].message.content == cli_reply


def test_openai_image_and_audio_equal_cera_run(vserver, mmproj, image, clip, tmp_path):
    """One request with an image and an audio clip, as `cera run --image --audio` with the
    same media at the same markers."""
    import openai
    (tmp_path / "test-1.jpeg").write_bytes(image)
    (tmp_path / "chord.wav").write_bytes(clip)
    out = subprocess.run(
        [BIN, "run", "-m", "smollm2", "--mmproj", mmproj, "--image", str(tmp_path / "test-1.jpeg"),
         "--audio", str(tmp_path / "chord.wav"), "-p", "<__media__><__media__>" + PROMPT,
         "-n", str(N), "--temp", "0", "-t", "2"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    client = openai.OpenAI(base_url=vserver.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(image)}},
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}},
            {"type": "text", "text": PROMPT},
        ]}],
        max_tokens=N, temperature=0)
    assert r.choices[0].message.content == out.stdout
    # audio alone: 0.9 s is 91 frames of 10 ms, 12 positions after the encoder's 8x
    r1 = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}},
            {"type": "text", "text": PROMPT}]}],
        max_tokens=2, temperature=0)
    r0 = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=2, temperature=0)
    assert r1.usage.prompt_tokens == r0.usage.prompt_tokens + 12


def test_ollama_images_equal_cera_run(vserver, image, cli_reply):
    import ollama
    c = ollama.Client(host=vserver.url, timeout=300)
    model = c.list().models[0].model
    # the client base64-encodes the image's bytes into the message's `images`
    r = c.chat(model=model, messages=[{"role": "user", "content": PROMPT, "images": [image]}],
               options={"temperature": 0, "num_predict": N})
    assert r["message"]["content"] == cli_reply
    r = requests.post(vserver.url + "/api/generate", json={
        "model": model, "stream": False, "prompt": PROMPT, "images": [base64.b64encode(image).decode()],
        "options": {"temperature": 0, "num_predict": N}}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["response"] == cli_reply


def test_bad_images_are_refused_by_name(vserver, image):
    def chat(part):
        return requests.post(vserver.url + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}],
            "max_tokens": 2}, timeout=60)

    for part, needle in [
        ({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}, "only data: URLs"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!"}}, "not base64"),
        ({"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,"
                                             + base64.b64encode(image[:len(image) // 2]).decode()}}, "truncated"),
        ({"type": "image_url", "image_url": {"url": "data:text/plain;base64,aGVsbG8="}}, "not an image"),
        ({"type": "image_url"}, "no url"),
        ({"type": "input_video", "x": 1}, "not supported"),
        ({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}, "audio"),
        ({"type": "input_audio", "input_audio": {"data": "aGVsbG8=", "format": "aiff"}}, "not one of wav"),
        ({"type": "input_audio", "input_audio": {"format": "wav"}}, "no data"),
    ]:
        r = chat(part)
        assert r.status_code == 400, (part, r.text)
        msg = r.json()["error"]["message"]
        assert needle in msg and "messages[0].content[1]" in msg or needle == "not supported", msg
    model = requests.get(vserver.url + "/api/tags", timeout=5).json()["models"][0]["model"]
    r = requests.post(vserver.url + "/api/chat", json={
        "model": model, "stream": False,
        "messages": [{"role": "user", "content": "hi", "images": [123]}]}, timeout=60)
    assert r.status_code == 400 and "messages[0].images[0]" in r.json()["error"]["message"], r.text
    # the server still answers
    assert requests.get(vserver.url + "/health", timeout=5).status_code == 200


def test_a_server_without_mmproj_names_the_flag(server, image):
    r = requests.post(server.url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(image)}}]}],
        "max_tokens": 2}, timeout=60)
    assert r.status_code == 400
    assert "--mmproj" in r.json()["error"]["message"]
