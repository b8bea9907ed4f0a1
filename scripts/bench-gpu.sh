#!/usr/bin/env bash
# cera on the GPU machine (issue #19), which reaches nothing: random-weight models of the real
# shapes are built there from vocab-only GGUFs (scripts/vocab-only.py), quantized with
# `cera quantize` to the real files' types, then `cera bench` and `cera batched-bench` run with
# --device gpu. Random weights read the same bytes as real ones, so speeds carry over.
#
#   scripts/bench-gpu.sh CERA MAKE_TEST_MODEL VOCAB_DIR OUT_DIR [ROUNDS]
#
# VOCAB_DIR holds smollm2.vocab.gguf and qwen2.5.vocab.gguf; OUT_DIR gets bench.md and the
# JSON records. The LFM2-350M-shaped model takes SmolLM2's vocabulary (49152, not 65536).
set -euo pipefail
CERA=$1 MK=$2 V=$3 OUT=$4 ROUNDS=${5:-3}
M=${MODELS_DIR:-/tmp/cera-shapes}
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
step "cera bench --device gpu"
for m in smollm2-q4_1 qwen2.5-0.5b-q4_k_m lfm2-350m-q4_k_m; do
  "$CERA" bench -m "$M/$m.gguf" --device gpu -p 512 -n 128 -r "$ROUNDS" | tee -a "$OUT/bench.md"
  "$CERA" bench -m "$M/$m.gguf" --device gpu -p 0 -n 128 -d 4096 -r "$ROUNDS" | tee -a "$OUT/bench.md"
done
step "cera batched-bench --device gpu (aggregate decode at B=8)"
for m in smollm2-q4_1 qwen2.5-0.5b-q4_k_m lfm2-350m-q4_k_m; do
  "$CERA" batched-bench -m "$M/$m.gguf" --device gpu -npp 128 -ntg 128 -npl 1,8 | tee -a "$OUT/bench.md"
done
step "done"
