#!/usr/bin/env bash
# Decode speed with a LoRA adapter (rank 16 on every linear projection, f16) against no adapter,
# for cera and llama.cpp (llama-completion --lora) in the same run, interleaved, ROUNDS rounds,
# medians. The adapter is written by scripts/make-lora-adapter.py (random weights).
#
# usage: scripts/bench-lora.sh MODEL.gguf [ROUNDS=3] [N_TOKENS=128]
# Needs llama.cpp built by ../shared/tools/build-llama-cpp.sh and target/pyenv with gguf+numpy.
set -euo pipefail
cd "$(dirname "$0")/.."
M=$1; R=${2:-3}; N=${3:-128}
BIN=$(bash ../shared/tools/build-llama-cpp.sh)
C=target/release/cera
A=target/bench-lora-$(basename "$M" .gguf).gguf
target/pyenv/bin/python scripts/make-lora-adapter.py "$M" "$A" 16 f16 >&2
P="Once upon a time"
cera_tps() { $C run -m "$M" --raw --temp 0 -n "$N" --ignore-eos -t 2 "$@" -p "$P" 2>&1 >/dev/null |
  sed -nE 's/.*generated [0-9]+ tokens in [0-9.]+ ms \(([0-9.]+) t\/s\).*/\1/p'; }
llama_tps() { LD_LIBRARY_PATH=$BIN "$BIN/llama-completion" -m "$M" -p "$P" -n "$N" --temp 0 --ignore-eos -t 2 \
  --no-repack -no-cnv "$@" 2>&1 | sed -nE 's/.*eval time = .* runs .* ([0-9.]+) tokens per second.*/\1/p' | tail -1; }
for i in $(seq "$R"); do
  echo "$(cera_tps) $(cera_tps --lora "$A") $(llama_tps) $(llama_tps --lora "$A")"
done | python3 -c "
import statistics as s, sys
rows = [list(map(float, l.split())) for l in sys.stdin]
m = [s.median(r[i] for r in rows) for i in range(4)]
print('rounds (cera, cera+lora, llama, llama+lora):', rows)
print(f'cera  {m[0]:.1f} -> {m[1]:.1f} tok/s with the adapter ({m[1]/m[0]:.3f})')
print(f'llama {m[2]:.1f} -> {m[3]:.1f} tok/s with the adapter ({m[3]/m[2]:.3f})')
print(f'with the adapter: cera / llama = {m[1]/m[3]:.2f}x')
"
