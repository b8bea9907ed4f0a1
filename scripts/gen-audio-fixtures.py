#!/usr/bin/env python3
"""Reference fixtures for audio in the prompt (tests/audio_parity.rs), from llama.cpp's mtmd.

Makes, with our generators, a random-weight pair at LFM2-Audio-1.5B's shapes: the mmproj
(`make_mmproj ... 2048 f16 lfm2-audio-1.5b`: the FastConformer, 17 blocks of 512, and the adapter
to 2048) and a language model as wide as LFM2-1.2B (`make_test_model ... lfm2_2048w_q4_0`: 4
layers of 2048, SmolLM2's vocabulary). Then, for each clip, runs scripts/llama-ref/mtmd_ref (our
small program linked against llama.cpp's libllama and libmtmd; mtmd decodes and resamples the
file itself, with miniaudio) on the prompt "Transcribe this:<__media__>\\n" (a token after the audio reads it at once:
mtmd gives no logits at an embedding position) and
stores under
crates/cera/tests/fixtures/audio/:
  index.json       the models' sha256, and per clip: mtmd's chunks, the first step's 64 largest
                   logits, the greedy steps
  NAME.embd.f16    the audio chunk's projected embeddings (f16 LE, [n_tokens, 2048])
The clips: llama.cpp's tools/mtmd/test-2.mp3 (17.4 s of speech, mono 44.1 kHz MP3), and two WAV
files drawn here and in the test alike from integers (`drawn`): 2.5 s mono at 16 kHz (no
resampling) and 1.3 s stereo at 44.1 kHz (downmixed and resampled).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "crates", "cera", "tests", "fixtures", "audio")
PROMPT = "Transcribe this:<__media__>\n"
N_PREDICT = 8


def drawn(n: int, channels: int) -> list[int]:
    """The drawn clip's 16-bit samples, interleaved (the test draws the same): a 160-sample
    sawtooth, an 18-sample square, LCG noise, every third 4000-sample stretch silent; the
    second channel has the square inverted."""
    out = []
    x = 12345
    for i in range(n):
        saw = (i * 7) % 160 - 80
        sq = 50 if (i // 9) % 2 == 0 else -50
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        noise = ((x >> 16) & 0xFF) - 128
        on = 0 if (i // 4000) % 3 == 2 else 1
        out.append((saw * 100 + sq * 120 + noise * 20) * on)
        if channels == 2:
            out.append((saw * 100 - sq * 120 + noise * 20) * on)
    return out


def wav(samples: list[int], channels: int, rate: int) -> bytes:
    data = struct.pack(f"<{len(samples)}h", *samples)
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * channels * 2, channels * 2, 16)
            + b"data" + struct.pack("<I", len(data)) + data)


def build_dumper() -> str:
    bindir = subprocess.check_output(["bash", os.path.join(ROOT, "..", "shared", "tools", "build-llama-cpp.sh")], text=True).strip()
    src = os.path.dirname(os.path.dirname(bindir))  # .../llama.cpp
    exe = os.path.join(tempfile.mkdtemp(prefix="cera-mtmd-ref-"), "mtmd_ref")
    subprocess.check_call([
        "g++", "-O2", "-std=c++17", f"-I{src}/include", f"-I{src}/ggml/include", f"-I{src}/tools/mtmd",
        os.path.join(HERE, "llama-ref", "mtmd_ref.cpp"), f"-L{bindir}", "-lmtmd", "-lllama", "-lggml", "-lggml-base",
        f"-Wl,-rpath,{bindir}", "-o", exe,
    ])
    return exe


def example(name: str, *args: str) -> str:
    # CERA_EXAMPLES: a folder of already built examples (target/ci/examples), else cargo builds
    built = os.environ.get("CERA_EXAMPLES")
    cmd = [os.path.join(built, name)] if built else ["cargo", "run", "-q", "--release", "-p", "cera", "--example", name, "--"]
    return subprocess.check_output([*cmd, *args], cwd=ROOT, text=True)


def main() -> None:
    work = tempfile.mkdtemp(prefix="cera-audio-fixtures-")
    exe = build_dumper()
    model_sha = example("make_test_model", work, "lfm2_2048w_q4_0").split()[1]
    mmproj = os.path.join(work, "mmproj.gguf")
    mmproj_sha = example("make_mmproj", mmproj, "2048", "f16", "lfm2-audio-1.5b").strip()
    model = os.path.join(work, "lfm2_2048w_q4_0.gguf")
    data = example("fetch_test_data").strip().splitlines()[-1]
    clips = {"test-2.mp3": os.path.join(data, "tools", "mtmd", "test-2.mp3")}
    for name, (secs, channels, rate) in {"drawn-16k-mono.wav": (2.5, 1, 16000),
                                         "drawn-44k-stereo.wav": (1.3, 2, 44100)}.items():
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(wav(drawn(int(secs * rate), channels), channels, rate))
        clips[name] = path
    prompt = os.path.join(work, "prompt.txt")
    with open(prompt, "w") as f:
        f.write(PROMPT)
    os.makedirs(OUT, exist_ok=True)
    index = {"model": "lfm2_2048w_q4_0", "model_sha256": model_sha,
             "mmproj": "lfm2-audio-1.5b f16", "mmproj_sha256": mmproj_sha, "prompt": PROMPT, "clips": {}}
    for name, path in clips.items():
        prefix = os.path.join(work, name)
        subprocess.check_call([exe, model, mmproj, prompt, str(N_PREDICT), prefix, path], stderr=subprocess.DEVNULL)
        with open(prefix + ".json") as f:
            ref = json.load(f)
        embd = np.fromfile(prefix + ".embd", dtype="<f4")
        embd.astype("<f2").tofile(os.path.join(OUT, name + ".embd.f16"))
        del ref["encode_ms"]
        index["clips"][name] = ref
        media = sum(c.get("n_tokens", 0) for c in ref["chunks"] if c["type"] != "text")
        print(f"{name}: {media} audio tokens, steps {[s['token'] for s in ref['steps']]}", file=sys.stderr)
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
