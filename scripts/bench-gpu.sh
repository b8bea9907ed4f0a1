#!/usr/bin/env bash
# cera on the GPU machine (issue #19), which reaches nothing: random-weight models of the real
# shapes are built there from vocab-only GGUFs (scripts/vocab-only.py), quantized with
# `cera quantize` to the real files' types, then `cera bench` and `cera batched-bench` run with
# --device gpu. Random weights read the same bytes as real ones, so speeds carry over.
#
#   [LLAMA_BIN=DIR] scripts/bench-gpu.sh CERA MAKE_TEST_MODEL VOCAB_DIR OUT_DIR [ROUNDS]
#
# VOCAB_DIR holds smollm2.vocab.gguf and qwen2.5.vocab.gguf; OUT_DIR gets bench.md (cera),
# llama.md (llama.cpp's Vulkan build from scripts/build-llama-vulkan.sh, when LLAMA_BIN names
# the folder holding llama-bench and llama-batched-bench: each model's cera and llama.cpp runs
# alternate) and profile.txt (CERA_GPU_PROFILE: host time per dispatch, device time per op).
# The LFM2-350M-shaped model takes SmolLM2's vocabulary (49152, not 65536).
set -euo pipefail
CERA=$1 MK=$2 V=$3 OUT=$4 ROUNDS=${5:-3}
M=${MODELS_DIR:-/tmp/cera-shapes}
L=${LLAMA_BIN:-}
mkdir -p "$M" "$OUT"
T0=$SECONDS
step() { echo "== $* (at $((SECONDS - T0)) s)"; }
step "models"
[ -f "$M/smollm2-q4_1.gguf" ] || {
  "$MK" --tokenizer "$V/smollm2.vocab.gguf" "$M" smollm2_135m_shape_f16 lfm2_350m_shape_f16
  "$MK" --tokenizer "$V/qwen2.5.vocab.gguf" "$M" qwen2_5_0_5b_shape_f16
  "$CERA" quantize "$M/smollm2_135m_shape_f16.gguf" "$M/smollm2-q4_1.gguf" Q4_1 >/dev/null
  "$CERA" quantize "$M/qwen2_5_0_5b_shape_f16.gguf" "$M/qwen2.5-0.5b-q4_k_m.gguf" Q4_K_M >/dev/null
  "$CERA" quantize "$M/lfm2_350m_shape_f16.gguf" "$M/lfm2-350m-q4_k_m.gguf" Q4_K_M >/dev/null
}
"$CERA" info
MODELS="smollm2-q4_1 qwen2.5-0.5b-q4_k_m lfm2-350m-q4_k_m"
for m in $MODELS; do
  step "$m: cera --device gpu"
  "$CERA" bench -m "$M/$m.gguf" --device gpu -p 512 -n 128 -r "$ROUNDS" | tee -a "$OUT/bench.md"
  "$CERA" bench -m "$M/$m.gguf" --device gpu -p 0 -n 128 -d 4096 -r "$ROUNDS" | tee -a "$OUT/bench.md"
  "$CERA" batched-bench -m "$M/$m.gguf" --device gpu -npp 128 -ntg 128 -npl 1,8 | tee -a "$OUT/bench.md"
  [ -n "$L" ] || continue
  step "$m: llama.cpp Vulkan"
  "$L/llama-bench" -m "$M/$m.gguf" -ngl 99 -p 512 -n 128 -r "$ROUNDS" | tee -a "$OUT/llama.md"
  "$L/llama-bench" -m "$M/$m.gguf" -ngl 99 -p 0 -n 128 -d 4096 -r "$ROUNDS" | tee -a "$OUT/llama.md"
  "$L/llama-batched-bench" -m "$M/$m.gguf" -ngl 99 -c 4096 -npp 128 -ntg 128 -npl 1,8 2>/dev/null \
    | grep '^|' | tee -a "$OUT/llama.md"
done
step "profiles"
for m in $MODELS; do
  echo "## $m" >> "$OUT/profile.txt"
  CERA_GPU_PROFILE=1 "$CERA" bench -m "$M/$m.gguf" --device gpu -p 0 -n 128 -r 2 2>&1 \
    | grep 'gpu profile' >> "$OUT/profile.txt"
  for t in "-p 0 -n 32" "-p 512 -n 0"; do
    # shellcheck disable=SC2086
    CERA_GPU_PROFILE=2 "$CERA" bench -m "$M/$m.gguf" --device gpu $t -r 1 2>&1 \
      | sed -n '/gpu profile/,$p' >> "$OUT/profile.txt"
  done
done
step "done"
