"""Speech to text through `cera serve`: the `openai` client's `audio.transcriptions.create`
against a server of the catalog's whisper-tiny.en alone (`-m whisper-tiny.en`), which answers
what `cera transcribe` prints for the same file, in every `response_format`; the same endpoint
on a language-model server started with `--whisper`; and the requests it must refuse by name.
The clip is whisper.cpp's jfk.wav (crates/cera/tests/fixtures/whisper/)."""
import json
import os
import subprocess

import openai
import pytest
import requests

from conftest import BIN, ROOT, Server

JFK = os.path.join(ROOT, "crates", "cera", "tests", "fixtures", "whisper", "jfk.wav")
MODEL = "whisper-tiny.en"


@pytest.fixture(scope="module")
def speech():
    s = Server(model=MODEL)
    yield s
    s.stop()


def cli(*args) -> str:
    return subprocess.run([BIN, "transcribe", "-m", MODEL, "-t", "2", *args, JFK], check=True,
                          capture_output=True, text=True).stdout


def test_openai_client_gets_cera_transcribe_text(speech):
    c = openai.OpenAI(base_url=speech.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    with open(JFK, "rb") as f:
        r = c.audio.transcriptions.create(model="whisper-1", file=f)
    want = cli().strip()
    assert r.text == want
    assert "ask not what your country can do for you" in want.lower()
    # verbose_json: the segments with their times, as data
    with open(JFK, "rb") as f:
        v = c.audio.transcriptions.create(model=MODEL, file=f, response_format="verbose_json",
                                          timestamp_granularities=["segment"])
    assert v.language == "en" and abs(v.duration - 11.0) < 0.1
    segs = v.segments
    assert len(segs) >= 2 and segs[0].start == 0.0
    assert all(a.end <= b.start + 1e-6 for a, b in zip(segs, segs[1:]))
    assert "".join(s.text for s in segs).strip() == want
    assert json.loads(cli("-o", "json"))["segments"][0]["text"] == segs[0].text


@pytest.mark.parametrize("fmt", ["srt", "vtt", "text"])
def test_subtitle_formats_are_the_cli_s(speech, fmt):
    with open(JFK, "rb") as f:
        r = requests.post(speech.url + "/v1/audio/transcriptions", files={"file": ("jfk.wav", f)},
                          data={"response_format": fmt}, timeout=120)
    assert r.status_code == 200, r.text
    want = cli("-o", "txt" if fmt == "text" else fmt)
    assert r.text == want
    if fmt == "vtt":
        assert r.headers["content-type"].startswith("text/vtt")
        assert want.startswith("WEBVTT\n\n00:00:00.000 --> ")
    if fmt == "srt":
        assert want.startswith("1\n00:00:00,000 --> ")


def bad(url, files=None, data=None, status=400):
    r = requests.post(url, files=files, data=data, timeout=60)
    assert r.status_code == status, r.text
    return r.json()["error"]


def test_refusals_name_what_is_wrong(speech):
    u = speech.url + "/v1/audio/transcriptions"
    e = bad(u, files={"x": ("a.txt", b"1")}, data={"model": "whisper-1"})
    assert "no 'file'" in e["message"] and e["param"] == "file"
    e = bad(u, files={"file": ("notes.txt", b"hello, not audio")})
    assert "notes.txt" in e["message"] and e["param"] == "file"
    e = bad(u, files={"file": ("empty.wav", b"")})
    assert "empty.wav" in e["message"]
    with open(JFK, "rb") as f:
        wav = f.read()
    e = bad(u, files={"file": ("jfk.wav", wav)}, data={"response_format": "docx"})
    assert "docx" in e["message"] and e["param"] == "response_format"
    e = bad(u, files={"file": ("jfk.wav", wav)}, data={"temperature": "hot"})
    assert e["param"] == "temperature"
    e = bad(u, files={"file": ("jfk.wav", wav)}, data={"timestamp_granularities[]": "word"})
    assert "word" in e["message"]
    e = bad(u, files={"file": ("jfk.wav", wav)}, data={"model": "whisper-large"}, status=404)
    assert e["code"] == "model_not_found"
    # a lying header: a RIFF/WAVE header that claims more data than follows, then noise
    e = bad(u, files={"file": ("liar.wav", wav[:44] + b"\x01" * 10)})
    assert "liar.wav" in e["message"]
    # English-only model: no translation
    e = bad(speech.url + "/v1/audio/translations", files={"file": ("jfk.wav", wav)})
    assert "English-only" in e["message"]
    # speech alone: the chat endpoints say so
    r = requests.post(speech.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert r.status_code == 400 and "/v1/audio/transcriptions" in r.json()["error"]["message"]
    # not multipart at all
    r = requests.post(u, json={"file": "jfk.wav"}, timeout=30)
    assert r.status_code in (400, 415), r.text


def test_beside_a_language_model():
    s = Server("--whisper", MODEL)
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        with open(JFK, "rb") as f:
            r = c.audio.transcriptions.create(model="whisper-1", file=f, response_format="text")
        assert r.strip() == cli().strip()
        chat = c.chat.completions.create(model="", max_tokens=4,
                                         messages=[{"role": "user", "content": "Hi"}])
        assert chat.choices[0].message.content
    finally:
        s.stop()


def test_cli_refusals_name_what_is_wrong(tmp_path):
    def err(*args, model=MODEL) -> str:
        r = subprocess.run([BIN, "transcribe", "-m", model, *args], capture_output=True, text=True)
        assert r.returncode != 0, r.stdout
        return r.stderr
    assert "txt, srt, vtt and json" in err("-o", "docx", JFK)
    assert "needs timestamps" in err("--no-timestamps", "-o", "srt", JFK)
    assert "nope.wav" in err(str(tmp_path / "nope.wav"))
    notes = tmp_path / "notes.wav"
    notes.write_text("not audio")
    assert "notes.wav" in err(str(notes))
    assert "English-only" in err("--translate", JFK)
    assert "beam size 0" in err("-b", "0", JFK)
    assert "whisper" in err(JFK, model="smollm2").lower()
    # the files' transcripts into a folder
    subprocess.run([BIN, "transcribe", "-m", MODEL, "-o", "srt", "--output-dir", str(tmp_path), JFK],
                   check=True)
    assert (tmp_path / "jfk.srt").read_text() == cli("-o", "srt")
