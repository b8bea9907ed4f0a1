#!/usr/bin/env bash
# Perplexity of `cera quantize --quant-strategy fast-mse` against the reference quantizers
# (whose files are byte for byte llama-quantize's: crates/cera-cli/tests/quantize.rs), per
# type, on F16 copies of the real models, with the F16 copy's own perplexity as the floor.
#   usage: scripts/bench-quant-strategy.sh [CHUNKS] [MODEL...]   (default: 8 smollm2 qwen)
# Text: /usr/share/common-licenses/GPL-3, -c 512. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
chunks=${1:-8}
shift || true
models=("${@:-smollm2 qwen}")
# shellcheck disable=SC2206
models=(${models[@]})
cargo build --release --locked -q -p cera-cli
cera=target/release/cera
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ppl() { "$cera" perplexity -m "$1" -f /usr/share/common-licenses/GPL-3 -c 512 --chunks "$chunks" -t 2 2>/dev/null |
  sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' | tail -1; }
echo "| model | type | F16 | reference (= llama-quantize) | fast-mse | fast-mse quantize s | reference s |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
for m in "${models[@]}"; do
  "$cera" quantize "$m" "$dir/f16.gguf" F16 --allow-requantize 2>/dev/null
  base=$(ppl "$dir/f16.gguf")
  for ty in Q4_0 Q4_1 Q5_0 Q5_1 Q8_0; do
    t0=$(date +%s.%N)
    "$cera" quantize "$dir/f16.gguf" "$dir/ref.gguf" "$ty" --pure 2>/dev/null
    t1=$(date +%s.%N)
    "$cera" quantize "$dir/f16.gguf" "$dir/mse.gguf" "$ty" --pure --quant-strategy fast-mse 2>/dev/null
    t2=$(date +%s.%N)
    printf '| %s | %s | %s | %s | %s | %.1f | %.1f |\n' "$m" "$ty" "$base" "$(ppl "$dir/ref.gguf")" \
      "$(ppl "$dir/mse.gguf")" "$(awk "BEGIN{print $t2 - $t1}")" "$(awk "BEGIN{print $t1 - $t0}")"
  done
done
