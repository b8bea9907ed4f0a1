#!/usr/bin/env bash
# One prompt through every front end of the core: Rust (the core API), the CLI, Python (the
# installed wheel), Kotlin (the UniFFI bindings) and WebAssembly (cera-wasm's package in Node):
# the same greedy tokens and text, or a diff.
# Expects what scripts/test.sh leaves behind: the wheel in target/wheel-venv and the Kotlin
# leg's output in target/parity/kotlin.txt (scripts/kotlin-test.sh).
#
# Usage: scripts/parity.sh [MODEL] (default: the SmolLM2 catalog model, prompt and length as
# in scripts/kotlin-test.sh).
# CERA_PROFILE (default release) names the cargo profile whose target folder holds the binaries;
# CERA_BUILT=1 says they are built already (scripts/test.sh built them).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${CERA_PROFILE:-release}
BIN=target/$PROFILE
MODEL=${1:-smollm2-135m-instruct-q4_1}
PROMPT="Once upon a time"
N=48
d=target/parity
mkdir -p "$d"
[ -f "$d/kotlin.txt" ] || { echo "error: $d/kotlin.txt missing: run scripts/kotlin-test.sh first" >&2; exit 1; }
[ -x target/wheel-venv/bin/python ] || { echo "error: target/wheel-venv missing: the wheel step of scripts/test.sh makes it" >&2; exit 1; }
[ -f crates/cera-wasm/pkg/cera_bg.wasm ] || { echo "error: crates/cera-wasm/pkg missing: run scripts/build-wasm.sh first" >&2; exit 1; }
[ -n "${CERA_BUILT:-}" ] || cargo build --profile "$PROFILE" --locked -q -p cera --example parity -p cera-cli
"$BIN/examples/parity" "$MODEL" "$PROMPT" "$N" > "$d/rust.txt"
target/wheel-venv/bin/python scripts/parity.py "$MODEL" "$PROMPT" "$N" > "$d/python.txt"
./$BIN/cera run -m "$MODEL" --raw --temp 0 -n "$N" -t 2 -p "$PROMPT" 2>/dev/null > "$d/cli.txt"
fail=0
# WebAssembly runs the simd128 tier, whose quantized dot products give the scalar tier's bits,
# compared with the CLI on that tier over the first 16 tokens: its attention sums and
# exponentials in vector lanes and its tanh, sin and cos are Rust's libm, not glibc's, so logits
# differ in the last bits and a longer text can part at a near-tie
NW=16
path=$(./$BIN/cera models | awk -v m="$MODEL" '$1 == m { print $NF; exit }')
node crates/cera-wasm/examples/node/generate.mjs "${path:-$MODEL}" "$PROMPT" "$NW" 2>/dev/null > "$d/wasm.txt"
CERA_CPU_TIER=scalar ./$BIN/cera run -m "$MODEL" --raw --temp 0 -n "$NW" -t 2 -p "$PROMPT" \
  2>/dev/null > "$d/cli-scalar.txt"
if ! cmp -s "$d/cli-scalar.txt" "$d/wasm.txt"; then
  echo "parity: WebAssembly's text differs from the CLI's on the scalar tier:"
  diff "$d/cli-scalar.txt" "$d/wasm.txt" || true
  fail=1
fi
for leg in python kotlin; do
  if ! cmp -s "$d/rust.txt" "$d/$leg.txt"; then
    echo "parity: $leg differs from rust:"; diff "$d/rust.txt" "$d/$leg.txt" || true
    fail=1
  fi
done
if [ "$(tail -n +2 "$d/rust.txt")" != "$(cat "$d/cli.txt")" ]; then
  echo "parity: the CLI's text differs from rust:"; diff <(tail -n +2 "$d/rust.txt") "$d/cli.txt" || true
  fail=1
fi
ntok=$(head -1 "$d/rust.txt" | wc -w)
[ "$ntok" -eq "$N" ] || { echo "parity: rust generated $ntok tokens, not $N"; fail=1; }
[ "$fail" -eq 0 ] && echo "parity: rust, cli, python and kotlin agree on $ntok greedy tokens of $MODEL, wasm on the first $NW"
exit "$fail"
