#!/usr/bin/env bash
# Side-by-side multi-sequence throughput: `cera batched-bench` against llama.cpp's
# `llama-batched-bench`, interleaved (one run of each engine in turn per round, so load changes
# hit both alike), same model, threads, -npp/-ntg/-npl. Prints a markdown table of medians over
# the rounds (S_PP, S_TG per B, with the ratio and S_TG's scaling over B=1), plus peak RSS at
# the largest B (GNU time), machine, commit and date. Not used by CI.
#
#   usage: scripts/bench-batched-vs-llama.sh [-t THREADS] [-r ROUNDS] [-p NPP] [-n NTG] [-b NPL] MODEL...
#   env:   LLAMA_BATCHED_BENCH=path/to/llama-batched-bench (default: ../shared/tools/build-llama-cpp.sh's)
#          CERA=target/release/cera
# MODEL is a path or a cera catalog name (resolved with `cera pull`).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
THREADS=2 ROUNDS=3 NPP=128 NTG=128 NPL=1,2,4,8
while getopts "t:r:p:n:b:" o; do
  case $o in
    t) THREADS=$OPTARG ;; r) ROUNDS=$OPTARG ;; p) NPP=$OPTARG ;; n) NTG=$OPTARG ;; b) NPL=$OPTARG ;;
    *) echo "bad flag" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n 2,12p "$0" >&2; exit 2; }

CERA=${CERA:-$ROOT/target/release/cera}
[ -x "$CERA" ] || (cd "$ROOT" && cargo build --release -p cera-cli >&2)
if [ -z "${LLAMA_BATCHED_BENCH:-}" ]; then
  BIN=$(bash "$ROOT/../shared/tools/build-llama-cpp.sh")
  LLAMA_BATCHED_BENCH=$BIN/llama-batched-bench
fi
LLAMA_LIB=$(dirname "$LLAMA_BATCHED_BENCH")
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 1; }

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
models=()
for m in "$@"; do
  if [ -f "$m" ]; then models+=("$m"); else models+=("$("$CERA" pull "$m" 2>/dev/null | tail -1)"); fi
done
MAXB=${NPL##*,}
# llama.cpp needs a context for every sequence's cells
CTX=$(( MAXB * (NPP + NTG) + 64 ))

for round in $(seq "$ROUNDS"); do
  for mi in "${!models[@]}"; do
    m=${models[$mi]}
    LD_LIBRARY_PATH=$LLAMA_LIB /usr/bin/time -f "%M" -o "$OUT/llama.$mi.$round.rss" \
      "$LLAMA_BATCHED_BENCH" -m "$m" -t "$THREADS" -c "$CTX" -npp "$NPP" -ntg "$NTG" -npl "$NPL" \
      --output-format jsonl 2>/dev/null | grep '^{' > "$OUT/llama.$mi.$round.jsonl"
    /usr/bin/time -f "%M" -o "$OUT/cera.$mi.$round.rss" \
      "$CERA" batched-bench -m "$m" -t "$THREADS" -npp "$NPP" -ntg "$NTG" -npl "$NPL" \
      --output-format jsonl 2>/dev/null | grep '^{' > "$OUT/cera.$mi.$round.jsonl"
    # peak RSS at the largest B alone
    if [ "$round" = 1 ]; then
      LD_LIBRARY_PATH=$LLAMA_LIB /usr/bin/time -f "%M" -o "$OUT/llama.$mi.maxb.rss" \
        "$LLAMA_BATCHED_BENCH" -m "$m" -t "$THREADS" -c "$CTX" -npp "$NPP" -ntg "$NTG" -npl "$MAXB" \
        >/dev/null 2>&1
      /usr/bin/time -f "%M" -o "$OUT/cera.$mi.maxb.rss" \
        "$CERA" batched-bench -m "$m" -t "$THREADS" -npp "$NPP" -ntg "$NTG" -npl "$MAXB" >/dev/null 2>&1
    fi
  done
  echo "round $round/$ROUNDS done" >&2
done

python3 - "$OUT" "$ROUNDS" "$THREADS" "$CERA" "$LLAMA_BATCHED_BENCH" "$ROOT" "$MAXB" "${models[@]}" <<'EOF'
import json, os, statistics, subprocess, sys, datetime
out, rounds, threads, cera, llama, root, maxb = sys.argv[1:8]
models = sys.argv[8:]
rounds = int(rounds)

def load(engine, mi):
    rows = {}
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{engine}.{mi}.{r}.jsonl"):
            rec = json.loads(line)
            rows.setdefault(rec["pl"], []).append(rec)
    return rows

def med(recs, k):
    return statistics.median(x[k] for x in recs)

def rss(engine, mi):
    return int(open(f"{out}/{engine}.{mi}.maxb.rss").read().split()[-1]) / 1024

commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
tier = [l.split(':', 1)[1].split('(')[0].strip() for l in subprocess.run([cera, 'info'], capture_output=True, text=True).stdout.splitlines() if l.startswith('kernel tier')]
print(f"{datetime.date.today()}, {cpu}, {threads} threads, cera {commit} ({tier[0] if tier else '?'}), "
      f"{os.path.basename(llama)}; medians of {rounds} interleaved rounds\n")
for mi, m in enumerate(models):
    c, l = load("cera", mi), load("llama", mi)
    print(f"**{os.path.basename(m)}**\n")
    print("| B | cera S_PP | llama S_PP | cera S_TG | llama S_TG | S_TG ratio | cera S_TG / B=1 | llama S_TG / B=1 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    c1, l1 = med(c[min(c)], "speed_tg"), med(l[min(l)], "speed_tg")
    for b in sorted(c):
        cs, ls = med(c[b], "speed_tg"), med(l[b], "speed_tg")
        print(f"| {b} | {med(c[b], 'speed_pp'):.1f} | {med(l[b], 'speed_pp'):.1f} | {cs:.1f} | {ls:.1f} | "
              f"**{cs / ls:.2f}×** | {cs / c1:.2f}× | {ls / l1:.2f}× |")
    print(f"\npeak RSS at B={maxb}: cera {rss('cera', mi):.0f} MB, llama.cpp {rss('llama', mi):.0f} MB\n")
    for b in sorted(c):
        print(f"<!-- B={b} cera S_TG samples {[round(x['speed_tg'], 1) for x in c[b]]}, "
              f"llama {[round(x['speed_tg'], 1) for x in l[b]]} -->")
    print()
EOF
