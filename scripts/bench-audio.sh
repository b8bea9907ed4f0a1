#!/usr/bin/env bash
# Audio encode time beside llama.cpp's mtmd on the CPU (2 threads), at LFM2-Audio-1.5B's shapes
# (random weights: the pair scripts/gen-audio-fixtures.py makes), interleaved, medians of ROUNDS:
# llama.cpp through scripts/llama-ref/mtmd_ref (libmtmd's mtmd_encode_chunk, timed around the
# call: the log-mel spectrogram is computed before, while tokenizing), Cera through
# examples/media_embd (Conformer::encode from the spectrogram, timed the same way). Clips:
# tools/mtmd/test-2.mp3 (17.4 s: 218 positions) and 5 s of a drawn 16 kHz WAV (63 positions).
# Prints a markdown table.
#   scripts/bench-audio.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
W=$(mktemp -d /tmp/cera-bench-audio-XXXX)
trap 'rm -rf "$W"' EXIT
bindir=$(bash ../shared/tools/build-llama-cpp.sh)
src=$(dirname "$(dirname "$bindir")")
g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" -I"$src/tools/mtmd" scripts/llama-ref/mtmd_ref.cpp \
  -L"$bindir" -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,"$bindir" -o "$W/mtmd_ref"
cargo build -q --release -p cera --example media_embd --example make_mmproj --example make_test_model --example fetch_test_data
ex=${CARGO_TARGET_DIR:-target}/release/examples
"$ex/make_mmproj" "$W/mm.gguf" 2048 f16 lfm2-audio-1.5b >/dev/null
"$ex/make_test_model" "$W" lfm2_2048w_q4_0 >/dev/null
data=$("$ex/fetch_test_data")
cp "$data/tools/mtmd/test-2.mp3" "$W/test-2.mp3"
python3 - "$W/drawn.wav" <<'PY'
import math, struct, sys, wave
w = wave.open(sys.argv[1], "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
w.writeframes(b"".join(struct.pack("<h", int(6000 * math.sin(i * 0.07) + 3000 * math.sin(i * 0.41 + math.sin(i * 1e-3)))) for i in range(80000)))
PY
printf 'Transcribe this:<__media__>\n' > "$W/p.txt"
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "| clip | positions | llama.cpp mtmd (ms) | Cera (ms) | Cera / llama.cpp |"
echo "| --- | ---: | ---: | ---: | ---: |"
for clip in test-2.mp3 drawn.wav; do
  : > "$W/l.txt"; : > "$W/c.txt"
  for r in $(seq "$ROUNDS"); do
    "$W/mtmd_ref" "$W/lfm2_2048w_q4_0.gguf" "$W/mm.gguf" "$W/p.txt" 1 "$W/ref" "$W/$clip" 2>/dev/null
    python3 -c "import json; print(sum(json.load(open('$W/ref.json'))['encode_ms']))" >> "$W/l.txt"
    "$ex/media_embd" "$W/mm.gguf" "$W/$clip" "$W/c.f32" | awk '/rows in/ {print $4}' >> "$W/c.txt"
  done
  l=$(median < "$W/l.txt"); c=$(median < "$W/c.txt")
  n=$("$ex/media_embd" "$W/mm.gguf" "$W/$clip" "$W/c.f32" | awk '/rows in/ {print $1}')
  python3 -c "print(f'| $clip | $n | {$l:.0f} | {$c:.0f} | {$c/$l:.2f} |')"
done
