#!/usr/bin/env bash
# Decode speed through the Python and Kotlin bindings against `cera run` on the same model and
# settings (each leg interleaved with the CLI, medians). Needs what scripts/test.sh leaves:
# the wheel in target/wheel-venv and the Kotlin jar from scripts/kotlin-test.sh.
#
# Usage: scripts/bench-bindings.sh [MODEL [N [ROUNDS [THREADS]]]]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-smollm2-135m-instruct-q4_1}
N=${2:-256}
ROUNDS=${3:-6}
THREADS=${4:-2}
target/wheel-venv/bin/python scripts/bench-bindings.py "$PWD/target/release/cera" "$MODEL" "$N" "$ROUNDS" "$THREADS"
kotlinc=target/kotlin-compiler/node_modules/kotlin-compiler/bin/kotlinc
cp=/usr/share/java/jna.jar:target/kotlin-compiler/node_modules/kotlin-compiler/lib/kotlinx-coroutines-core-jvm.jar
LD_LIBRARY_PATH="$PWD/target/release" "$kotlinc" -cp "$cp:target/bindings/cera-kotlin.jar" \
  -script tests/kotlin/bench.kts "$PWD/target/release/cera" "$MODEL" "$N" "$ROUNDS" "$THREADS"
