#!/usr/bin/env bash
# KV cache quality per type (issue #18): perplexity, mean KL divergence from the f16-cache run
# and same-top-token rate, for cera (`cera perplexity --kl-base-cache f16`) and llama.cpp
# (`llama-perplexity --kl-divergence`, rotation on by default, LLAMA_ATTN_ROT_DISABLE=1 for
# off) on the GPL-3 text, -c 2048. Prints one markdown table per model.
#
#   scripts/bench-kv.sh [MODEL...]      (default: SmolLM2 and Qwen2.5-Coder from the cache)
#   CHUNKS=2 LLAMA_BIN=... scripts/bench-kv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CERA=${CERA:-target/release/cera}
TEXT=${TEXT:-/usr/share/common-licenses/GPL-3}
CTX=${CTX:-2048}
CHUNKS=${CHUNKS:-2}
T=${T:-2}
LLAMA_BIN=${LLAMA_BIN:-$HOME/.cache/cera-peers/llama.cpp-11434.0.0/src/llama.cpp/build/bin}
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=("$HOME/.cache/cera/models/SmolLM2-135M-Instruct.Q4_1.gguf"
          "$HOME/.cache/cera/models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf")
fi
# K/V rotate (CONFIGS="q8_0 q8_0 on;q4_0 q4_0 off" to pick some)
configs=("f32 f32 on" "bf16 bf16 on"
         "q8_0 q8_0 on" "q8_0 q8_0 off" "q5_1 q5_1 on" "q5_1 q5_1 off" "q5_0 q5_0 on" "q5_0 q5_0 off"
         "q4_1 q4_1 on" "q4_1 q4_1 off" "q4_0 q4_0 on" "q4_0 q4_0 off" "iq4_nl iq4_nl on" "iq4_nl iq4_nl off"
         "tq4 tq4 on" "tq3 tq3 on" "q8_0 q4_0 on" "q8_0 tq3 on" "tq4 tq3 on")
if [ -n "${CONFIGS:-}" ]; then IFS=';' read -r -a configs <<< "$CONFIGS"; fi
llama_types="bf16 q8_0 q5_1 q5_0 q4_1 q4_0 iq4_nl"

for m in "${models[@]}"; do
  name=$(basename "$m" .gguf)
  echo "## $name (-c $CTX, $CHUNKS chunks)"
  echo
  echo "| K | V | rotation | bits/elem | cera PPL | ΔPPL | KL | same top | llama.cpp PPL | ΔPPL | KL | same top |"
  echo "| - | - | - | -: | -: | -: | -: | -: | -: | -: | -: | -: |"
  base_kld=$(mktemp /tmp/kvbase.XXXX.kld)
  lbase=""
  if [ -x "$LLAMA_BIN/llama-perplexity" ]; then
    lbase=$(LD_LIBRARY_PATH=$LLAMA_BIN "$LLAMA_BIN/llama-perplexity" -m "$m" -f "$TEXT" -c "$CTX" -t "$T" \
      --no-repack -fa on --chunks "$CHUNKS" --kl-divergence-base "$base_kld" 2>&1 \
      | sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
  fi
  for c in "${configs[@]}"; do
    read -r kt vt rot <<< "$c"
    out=$("$CERA" perplexity -m "$m" -f "$TEXT" -c "$CTX" -t "$T" --chunks "$CHUNKS" \
      -ctk "$kt" -ctv "$vt" --kv-rotate "$rot" --kl-base-cache f16 2>&1)
    ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p' <<< "$out")
    bpe=$(sed -n 's/.*bytes per token, \([0-9.]*\) bits per element.*/\1/p' <<< "$out")
    kl=$(sed -n 's/.*mean \([0-9.]*\), same top token \([0-9.]*\)%, baseline PPL = \([0-9.]*\).*/\1 \2 \3/p' <<< "$out")
    read -r ckl ctop cbase <<< "$kl"
    cd_=$(python3 -c "print(f'{100*($ppl/$cbase-1):+.2f}%')")
    lcol="| | | |"
    if [ -n "$lbase" ] && [ "$kt" = "$vt" ] && [[ " $llama_types " == *" $kt "* ]]; then
      env=()
      [ "$rot" = off ] && env=(LLAMA_ATTN_ROT_DISABLE=1)
      lo=$(env "${env[@]}" LD_LIBRARY_PATH=$LLAMA_BIN "$LLAMA_BIN/llama-perplexity" -m "$m" -f "$TEXT" \
        -c "$CTX" -t "$T" --no-repack -fa on --chunks "$CHUNKS" -ctk "$kt" -ctv "$vt" \
        --kl-divergence-base "$base_kld" --kl-divergence 2>&1)
      lppl=$(sed -n 's/^Mean PPL(Q) *: *\([0-9.]*\).*/\1/p' <<< "$lo")
      lkl=$(sed -n 's/^Mean *KLD: *\([0-9.]*\).*/\1/p' <<< "$lo")
      ltop=$(sed -n 's/^Same top p: *\([0-9.]*\).*/\1/p' <<< "$lo")
      ld=$(python3 -c "print(f'{100*($lppl/$lbase-1):+.2f}%')")
      lcol="| $lppl | $ld | $lkl | $ltop% |"
    fi
    echo "| $kt | $vt | $rot | $bpe | $ppl | $cd_ | $ckl | $ctop% $lcol"
  done
  echo
  echo "f16 baseline PPL: cera $cbase, llama.cpp ${lbase:-n/a}"
  echo
  rm -f "$base_kld"
done
