#!/usr/bin/env bash
# The CPU benchmark suite (issue #13): one model per architecture we run, at a real model's shape
# and vocabulary, in the Q4_K_M mix llama-quantize gives that shape, side by side with llama.cpp.
# The models are random-weight files written by our GGUF writer (`make_test_model --list suite`)
# and quantized by `cera quantize` (byte for byte llama-quantize's mix), cached in
# target/bench-suite/; SmolLM2 and Qwen2.5 are the real files. Not used by CI.
#
#   usage: scripts/bench-suite.sh [-m] [bench-vs-llama.sh flags] [NAME...]
#          -m: only make the models (prints their paths)
#   env:   SUITE_DIR (default target/bench-suite), and bench-vs-llama.sh's (LLAMA_BENCH, CERA...)
# NAME: a suite model (gemma3_270m_shape_f16 ...), smollm2 or qwen; default: all of them.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
cd "$ROOT"
make_only=0
flags=()
names=()
while [ $# -gt 0 ]; do
  case $1 in
    -m) make_only=1 ;;
    -t | -r | -p | -n | -d) flags+=("$1" "$2"); shift ;;
    -*) echo "unknown flag $1" >&2; exit 2 ;;
    *) names+=("$1") ;;
  esac
  shift
done
DIR=${SUITE_DIR:-$ROOT/target/bench-suite}
mkdir -p "$DIR"
cargo build --release --locked -q -p cera-cli -p cera --example make_test_model >&2
MAKE=$ROOT/target/release/examples/make_test_model
CERA=$ROOT/target/release/cera
if [ ${#names[@]} -eq 0 ]; then
  mapfile -t names < <(echo smollm2; echo qwen; "$MAKE" --list suite)
fi
models=()
for n in "${names[@]}"; do
  case $n in
    smollm2 | qwen) models+=("$("$CERA" pull "$n" 2>/dev/null | tail -1)"); continue ;;
  esac
  q=$DIR/${n%_f16}_q4_k_m.gguf
  if [ ! -s "$q" ]; then
    t0=$SECONDS
    "$MAKE" "$DIR" "$n" >&2
    "$CERA" quantize "$DIR/$n.gguf" "$q.part" Q4_K_M >&2
    mv "$q.part" "$q"
    rm -f "$DIR/$n.gguf"
    echo "made $q in $((SECONDS - t0)) s" >&2
  fi
  models+=("$q")
done
if [ $make_only = 1 ]; then
  printf '%s\n' "${models[@]}"
  exit 0
fi
exec bash "$HERE/bench-vs-llama.sh" "${flags[@]}" "${models[@]}"
