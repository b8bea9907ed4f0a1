#!/usr/bin/env bash
# Two builds of cera side by side: `cera bench` of binary A and binary B, interleaved (one
# repetition of each in turn, so load changes hit both alike), same threads and tests. Prints a
# markdown table of medians with B/A. For no-regression checks (build A from an older commit:
# `git worktree add /tmp/old COMMIT && (cd /tmp/old && cargo build --release -p cera-cli)`).
# Not used by CI.
#
#   usage: scripts/bench-ab.sh [-t THREADS] [-r ROUNDS] [-p 512] [-n 128] [-d 1024] A_BIN B_BIN MODEL...
set -euo pipefail
THREADS=2 ROUNDS=5 PP=512 TG=128 DEPTH=1024
while getopts "t:r:p:n:d:" o; do
  case $o in
    t) THREADS=$OPTARG ;; r) ROUNDS=$OPTARG ;; p) PP=$OPTARG ;; n) TG=$OPTARG ;; d) DEPTH=$OPTARG ;;
    *) echo "bad flag" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 3 ] || { sed -n 2,9p "$0" >&2; exit 2; }
A=$1 B=$2
shift 2
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
tests=("-p $PP -n 0 -d 0" "-p 0 -n $TG -d 0")
[ "$DEPTH" != 0 ] && tests+=("-p 0 -n $TG -d $DEPTH")
for round in $(seq "$ROUNDS"); do
  for mi in $(seq 0 $(($# - 1))); do
    m=${*:$((mi + 1)):1}
    for ti in "${!tests[@]}"; do
      for side in A B; do
        bin=$A
        [ $side = B ] && bin=$B
        # shellcheck disable=SC2086
        "$bin" bench -m "$m" -t "$THREADS" -r 1 -o json ${tests[$ti]} > "$OUT/$side.$mi.$ti.$round.json" 2>/dev/null
      done
    done
  done
  echo "round $round/$ROUNDS done" >&2
done
python3 - "$OUT" "$ROUNDS" "${#tests[@]}" "$A" "$B" "$@" <<'EOF'
import json, os, statistics, sys
out, rounds, ntests, a, b = sys.argv[1:6]
models = sys.argv[6:]
rounds, ntests = int(rounds), int(ntests)
print(f"A = {a}, B = {b}; medians of {rounds} interleaved rounds (t/s)\n")
print("| model | test | A | B | B/A |")
print("|---|---|---:|---:|---:|")
for mi, m in enumerate(models):
    for ti in range(ntests):
        vals = {}
        for side in "AB":
            recs = [json.load(open(f"{out}/{side}.{mi}.{ti}.{r}.json"))[0] for r in range(1, rounds + 1)]
            vals[side] = statistics.median(x["avg_ts"] for x in recs)
            name = recs[0]["test"]
        print(f"| {os.path.basename(m)} | {name} | {vals['A']:.1f} | {vals['B']:.1f} | **{vals['B'] / vals['A']:.3f}** |")
EOF
