#!/usr/bin/env bash
# Decode speed at a context depth per KV cache type (issue #18): `cera bench -p 0 -n N -d D
# -ctk T -ctv T` against `llama-bench -fa on -ctk T -ctv T` for the types both have,
# interleaved type by type over several rounds; prints the median t/s per type and engine and
# the ratio to f16.
#
#   scripts/bench-kv-speed.sh MODEL [DEPTH=4096] [N=32] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
M=$1; D=${2:-4096}; N=${3:-32}; ROUNDS=${4:-3}
CERA=${CERA:-target/release/cera}
T=${T:-2}
BIN=${LLAMA_BIN:-$HOME/.cache/cera-peers/llama.cpp-11434.0.0/src/llama.cpp/build/bin}
types=(f16 bf16 q8_0 q5_1 q5_0 q4_1 q4_0 iq4_nl tq4 tq3)
llama_types=" f16 bf16 q8_0 q5_1 q5_0 q4_1 q4_0 iq4_nl "
out=$(mktemp)
for r in $(seq "$ROUNDS"); do
  for t in "${types[@]}"; do
    v=$("$CERA" bench -m "$M" -t "$T" -p 0 -n "$N" -d "$D" -r 1 -ctk "$t" -ctv "$t" -o json \
      | python3 -c 'import json,sys; r=json.load(sys.stdin)[0]; print(r["avg_ts"], r["kv_bytes_per_token"])')
    echo "cera $t $v" >> "$out"
    if [[ "$llama_types" == *" $t "* ]] && [ -x "$BIN/llama-bench" ]; then
      v=$(LD_LIBRARY_PATH=$BIN "$BIN/llama-bench" -m "$M" -t "$T" -p 0 -n "$N" -d "$D" -r 1 \
        -fa on -ctk "$t" -ctv "$t" --repack 0 -o json 2>/dev/null \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])')
      echo "llama $t $v" >> "$out"
    fi
  done
done
python3 - "$out" "$M" "$D" "$N" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for r in rows:
    med.setdefault((r[0], r[1]), []).append(float(r[2]))
bpt = {r[1]: float(r[3]) for r in rows if r[0] == "cera"}
m = {k: st.median(v) for k, v in med.items()}
print(f"{sys.argv[2].split('/')[-1]}: tg{sys.argv[4]} @ d{sys.argv[3]}, medians of {len(med[('cera','f16')])} rounds\n")
print("| K = V | KV bytes/token | cera t/s | vs f16 | llama.cpp t/s | vs f16 | cera / llama.cpp |")
print("| - | -: | -: | -: | -: | -: | -: |")
for t in ["f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl", "tq4", "tq3"]:
    c = m[("cera", t)]
    l = m.get(("llama", t))
    lc = f"{l:.2f} | {l / m[('llama', 'f16')]:.2f}x | {c / l:.2f}x" if l else " |  | "
    print(f"| {t} | {bpt[t]:.0f} | {c:.2f} | {c / m[('cera', 'f16')]:.2f}x | {lc} |")
PY
rm -f "$out"
