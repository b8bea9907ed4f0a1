"""Speech to text through the wheel: `cera.Whisper(...).transcribe` on a path, the file's bytes
and 16 kHz samples gives what `cera transcribe` prints; srt/vtt/json as the CLI writes them;
language detection on the multilingual base; bad audio and arguments raise errors naming them.
The clip is whisper.cpp's jfk.wav (crates/cera/tests/fixtures/whisper/)."""

import json
import os
import subprocess
import wave

import pytest

import cera

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
JFK = os.path.join(ROOT, "crates", "cera", "tests", "fixtures", "whisper", "jfk.wav")
BIN = os.environ.get("CERA_BIN", os.path.join(ROOT, "target", "release", "cera"))


@pytest.fixture(scope="module")
def tiny():
    return cera.Whisper("whisper-tiny.en", n_threads=2)


def cli(*args) -> str:
    return subprocess.run([BIN, "transcribe", "-m", "whisper-tiny.en", "-t", "2", *args, JFK],
                          check=True, capture_output=True, text=True).stdout


def samples_16k(path):
    with wave.open(path) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        raw = w.readframes(w.getnframes())
    return [int.from_bytes(raw[i:i + 2], "little", signed=True) / 32768.0 for i in range(0, len(raw), 2)]


def test_path_bytes_and_samples_equal_the_cli(tiny):
    want = cli().strip()
    r = tiny.transcribe(JFK)
    assert r["text"] == want and r["language"] == "en" and not tiny.multilingual
    assert r["segments"][0]["start"] == 0.0 and r["segments"][-1]["end"] <= r["duration"] + 1
    with open(JFK, "rb") as f:
        assert tiny.transcribe(f.read())["text"] == want
    assert tiny.transcribe(samples_16k(JFK))["text"] == want
    assert tiny.transcribe(JFK, response_format="srt") == cli("-o", "srt")
    assert tiny.transcribe(JFK, response_format="vtt") == cli("-o", "vtt")
    assert tiny.transcribe(JFK, response_format="json") == {"text": want}
    full = json.loads(cli("-o", "json"))
    assert [s["tokens"] for s in r["segments"]] == [s["tokens"] for s in full["segments"]]
    greedy = tiny.transcribe(JFK, beam_size=1, timestamps=False, fallback=False, response_format="text")
    assert greedy == cli("-b", "1", "--no-timestamps", "--no-fallback")


def test_refusals(tiny, tmp_path):
    with pytest.raises(cera.CeraError, match="audio"):
        tiny.transcribe(b"definitely not audio")
    with pytest.raises(cera.CeraError, match="no audio"):
        tiny.transcribe([])
    with pytest.raises(cera.CeraError, match="English-only"):
        tiny.transcribe(JFK, translate=True)
    with pytest.raises(cera.CeraError, match="docx"):
        tiny.transcribe(JFK, response_format="docx")
    with pytest.raises(ValueError, match="timestamps"):
        tiny.transcribe(JFK, timestamps=False, response_format="srt")
    with pytest.raises(cera.CeraError, match="beam size"):
        tiny.transcribe(JFK, beam_size=0)
    with pytest.raises(cera.CeraError, match="multilingual"):
        tiny.detect_language(JFK)
    with pytest.raises(cera.CeraError):
        cera.Whisper("smollm2-135m-instruct-q4_1")


def test_base_detects_english():
    base = cera.Whisper("whisper-base", n_threads=2)
    assert base.multilingual
    langs = base.detect_language(JFK)
    assert langs[0][0] == "en" and langs[0][1] > 0.9 and len(langs) == 99
