#!/usr/bin/env bash
# Image encode time beside llama.cpp's mtmd on the CPU (2 threads), at LFM2-VL-450M's shapes
# (random weights: the pair scripts/gen-vision-fixtures.py makes), interleaved, medians of
# ROUNDS: llama.cpp through scripts/llama-ref/mtmd_ref (libmtmd's mtmd_encode_chunk, timed
# around the call), Cera through examples/media_embd (Mmproj::encode_image, timed the same
# way). Images: tools/mtmd/test-1.jpeg (640 x 488: one 576 x 416 part, 936 patches) and a
# drawn 256 x 1024 one (1024 patches). Then the same at SmolVLM-256M's shapes (Idefics3: SigLIP
# base at 512, pixel shuffle by 4; its longest edge 1024, so test-1.jpeg is 2 x 2 slices and the
# overview: five encodes of 1024 patches), the sum over the image's parts. Prints markdown tables.
#   scripts/bench-vision.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
W=$(mktemp -d /tmp/cera-bench-vision-XXXX)
trap 'rm -rf "$W"' EXIT
bindir=$(bash ../shared/tools/build-llama-cpp.sh)
src=$(dirname "$(dirname "$bindir")")
g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" -I"$src/tools/mtmd" scripts/llama-ref/mtmd_ref.cpp \
  -L"$bindir" -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,"$bindir" -o "$W/mtmd_ref"
cargo build -q --release -p cera --example media_embd --example make_mmproj --example make_test_model --example fetch_test_data
ex=${CARGO_TARGET_DIR:-target}/release/examples
"$ex/make_mmproj" "$W/mm.gguf" 1024 f16 lfm2-vl-450m >/dev/null
"$ex/make_test_model" --media-tokens "$W" lfm2_350m_q4_0 >/dev/null
"$ex/make_mmproj" "$W/mm-smolvlm.gguf" 576 f16 smolvlm-256m 1024 >/dev/null
"$ex/make_test_model" --idefics3-tokens "$W" llama_576w_q8_0 >/dev/null
data=$("$ex/fetch_test_data")
cp "$data/tools/mtmd/test-1.jpeg" "$W/test-1.jpeg"
python3 - "$W/tall.png" <<'PY'
import sys, zlib, struct
w, h = 256, 1024
raw = b"".join(b"\0" + bytes(v for x in range(w) for v in (x * 255 // (w - 1), y * 255 // (h - 1), ((x // 8 + y // 8) % 2) * 160 + (x * y) % 64)) for y in range(h))
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
PY
printf '<__media__>Describe the image.' > "$W/p.txt"
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
bench() { # TITLE LM MMPROJ IMAGE:PATCHES...
  echo
  echo "$1"
  echo
  echo "| image | patches | llama.cpp mtmd (ms) | Cera (ms) | Cera / llama.cpp |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  local lm=$2 mm=$3
  shift 3
  for spec in "$@"; do
    local img=${spec%%:*} p=${spec#*:}
    : > "$W/l.txt"; : > "$W/c.txt"
    for r in $(seq "$ROUNDS"); do
      "$W/mtmd_ref" "$W/$lm" "$W/$mm" "$W/p.txt" 1 "$W/ref" "$W/$img" 2>/dev/null
      python3 -c "import json; print(sum(json.load(open('$W/ref.json'))['encode_ms']))" >> "$W/l.txt"
      "$ex/media_embd" "$W/$mm" "$W/$img" "$W/c.f32" | awk '/rows in/ {print $4}' >> "$W/c.txt"
    done
    local l c
    l=$(median < "$W/l.txt"); c=$(median < "$W/c.txt")
    python3 -c "print(f'| $img | $p | {$l:.0f} | {$c:.0f} | {$c/$l:.2f} |')"
  done
}
bench "LFM2-VL-450M" lfm2_350m_q4_0.gguf mm.gguf test-1.jpeg:936 tall.png:1024
bench "SmolVLM-256M (longest edge 1024)" llama_576w_q8_0.gguf mm-smolvlm.gguf "test-1.jpeg:5 x 1024" "tall.png:3 x 1024"
