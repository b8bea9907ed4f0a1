#!/usr/bin/env bash
# cera convert against llama.cpp's convert_hf_to_gguf.py: wall time and peak RSS, interleaved,
# ROUNDS rounds (default 3), medians, on the bf16 checkpoints scripts/make-hf-checkpoint.py
# makes from both real models (SmolLM2 whole, Qwen2.5 in four shards).
#
#   PYTHON=/path/to/python-with-torch scripts/bench-convert.sh [ROUNDS]
#
# Needs /usr/bin/time, the llama.cpp source (LLAMA_SRC, default the one build-llama-cpp.sh
# fetches) and a Python with torch, transformers, numpy and gguf for the converter.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
PY=${PYTHON:-python3}
SRC=${LLAMA_SRC:-$HOME/.cache/cera-peers/llama.cpp-11434.0.0/src/llama.cpp}
M=$HOME/.cache/cera/models
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cargo build --release -q -p cera-cli
CERA=$PWD/target/release/cera
python3 scripts/make-hf-checkpoint.py "$M/SmolLM2-135M-Instruct.Q4_1.gguf" "$W/SmolLM2-135M-Instruct" --dtype bf16
python3 scripts/make-hf-checkpoint.py "$M/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf" "$W/Qwen2.5-Coder-0.5B-Instruct" \
  --dtype bf16 --shard-mb 400

# one run: prints "seconds peak_rss_mib"
one() {
  /usr/bin/time -f "%e %M" -o "$W/time" "$@" >/dev/null 2>&1
  awk '{printf "%s %.0f\n", $1, $2 / 1024}' "$W/time"
}
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR + 1) / 2)]}'; }

printf '| checkpoint | outtype | cera s | converter s | speedup | cera peak RSS MiB | converter peak RSS MiB |\n'
printf '|---|---|---:|---:|---:|---:|---:|\n'
for ck in SmolLM2-135M-Instruct Qwen2.5-Coder-0.5B-Instruct; do
  for ot in f16 q8_0; do
    : >"$W/c"
    : >"$W/p"
    for _ in $(seq "$ROUNDS"); do
      one "$CERA" convert "$W/$ck" --outtype "$ot" -o "$W/out.gguf" >>"$W/c"
      sync
      one "$PY" "$SRC/convert_hf_to_gguf.py" "$W/$ck" --outtype "$ot" --outfile "$W/ref.gguf" >>"$W/p"
      sync
      cmp -s "$W/out.gguf" "$W/ref.gguf" || { echo "error: $ck $ot: outputs differ" >&2; exit 1; }
    done
    ct=$(cut -d' ' -f1 "$W/c" | median)
    pt=$(cut -d' ' -f1 "$W/p" | median)
    cm=$(cut -d' ' -f2 "$W/c" | median)
    pm=$(cut -d' ' -f2 "$W/p" | median)
    printf '| %s | %s | %s | %s | %.1f× | %s | %s |\n' "$ck" "$ot" "$ct" "$pt" \
      "$(echo "$pt / $ct" | bc -l)" "$cm" "$pm"
  done
done
