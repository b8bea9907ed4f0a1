#!/usr/bin/env bash
# Whisper's encoder batched over windows on a GPU, measured (the `device` machine: no network,
# so what it needs is built and packed here first):
#
#   scripts/bench-whisper-gpu.sh pack      # here: target/gpu-whisper/{cera,model,audio}
#   scripts/bench-whisper-gpu.sh run [RUNS] # there: medians into $OUT (or target/gpu-whisper)
#
# `pack` builds the release `cera` (wgpu included), quantizes the catalog's whisper-tiny.en to
# Q8_0 (the carried files must fit in 64 MiB, xz-packed: base's Q8_0 does not) and writes a
# 100-second WAV of the five LibriVox clips end to end, four times. `run` transcribes it greedy without
# timestamps on the GPU with `--encoder-batch` 1, 2, 4 and 8, interleaved, and prints the median
# wall times (the first run of each is a warm-up).
set -euo pipefail
cd "$(dirname "$0")/.."
D=target/gpu-whisper
case "${1:-}" in
pack)
  cargo build --release -p cera-cli --bin cera
  mkdir -p "$D"
  g=$(target/release/cera pull whisper-tiny.en)
  target/release/cera quantize "$g" "$D/whisper-tiny.en.q8_0.gguf" Q8_0 >/dev/null
  python3 - "$D/audio.wav" <<'PY'
import sys, wave, glob
clips = sorted(glob.glob("/usr/share/pocketsphinx/test/data/librivox/*.wav"))
frames = b""
for c in clips:
    with wave.open(c) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1
        frames += w.readframes(w.getnframes())
with wave.open(sys.argv[1], "wb") as o:
    o.setnchannels(1); o.setsampwidth(2); o.setframerate(16000)
    o.writeframes(frames * 4)
PY
  cp target/release/cera "$D/cera"
  tar -C "$D" -cJf target/gpu-whisper.tar.xz cera audio.wav whisper-tiny.en.q8_0.gguf
  du -h target/gpu-whisper.tar.xz
  ;;
run)
  runs=${2:-5}
  mkdir -p "$D"
  [ -x "$D/cera" ] || tar -C "$D" -xJf target/gpu-whisper.tar.xz
  out=${OUT:-$D}
  for m in whisper-tiny.en; do
    for b in 1 2 4 8; do
      "$D/cera" transcribe -m "$D/$m.q8_0.gguf" --device gpu --no-timestamps -b 1 --best-of 1 \
        --encoder-batch $b "$D/audio.wav" > "$out/$m-b$b.txt"
    done
    for i in $(seq "$runs"); do
      for b in 1 2 4 8; do
        TIMEFORMAT="$m $b %R"
        { time "$D/cera" transcribe -m "$D/$m.q8_0.gguf" --device gpu --no-timestamps -b 1 \
          --best-of 1 --encoder-batch $b "$D/audio.wav" > /dev/null 2>&1; } 2>> "$out/times.txt"
      done
    done
    for b in 2 4 8; do cmp "$out/$m-b1.txt" "$out/$m-b$b.txt" && echo "$m: the same text with batches of 1 and $b"; done
  done
  python3 - "$out/times.txt" <<'PY'
import sys, statistics, collections
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m, b, s = line.split()
    t[(m, int(b))].append(float(s))
for (m, b), v in sorted(t.items()):
    print(f"{m} --encoder-batch {b}: median {statistics.median(v):.2f} s of {len(v)} ({', '.join(f'{x:.2f}' for x in v)})")
PY
  ;;
*)
  echo "usage: $0 pack | run [RUNS]" >&2
  exit 2
  ;;
esac
