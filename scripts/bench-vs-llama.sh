#!/usr/bin/env bash
# Side-by-side throughput: `cera bench` against llama.cpp's `llama-bench`, interleaved (one
# repetition of each engine in turn, so load changes hit both alike), same threads, same tests.
# Prints a markdown table of medians (and every sample) with the ratio, plus machine, commit and
# date. Not used by CI.
#
#   usage: scripts/bench-vs-llama.sh [-t THREADS] [-r ROUNDS] [-p 512] [-n 128] [-d 1024] MODEL...
#   env:   LLAMA_BENCH=path/to/llama-bench   (default: ../shared/tools/build-llama-cpp.sh's,
#          preferring a build-noamx/ tree next to it: see benchmarks/README.md)
#          LLAMA_ARGS="--repack 0"          extra llama-bench flags
#          CERA=target/release/cera
#          TG_DEPTH=128                     tokens of the depth test (default: -n's)
# MODEL is a path or a cera catalog name (resolved with `cera pull`).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
THREADS=2 ROUNDS=5 PP=512 TG=128 DEPTH=1024
while getopts "t:r:p:n:d:" o; do
  case $o in
    t) THREADS=$OPTARG ;; r) ROUNDS=$OPTARG ;; p) PP=$OPTARG ;; n) TG=$OPTARG ;; d) DEPTH=$OPTARG ;;
    *) echo "bad flag" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n 2,12p "$0" >&2; exit 2; }

CERA=${CERA:-$ROOT/target/release/cera}
[ -x "$CERA" ] || (cd "$ROOT" && cargo build --release -p cera-cli >&2)
if [ -z "${LLAMA_BENCH:-}" ]; then
  BIN=$(bash "$ROOT/../shared/tools/build-llama-cpp.sh")
  if [ -x "$BIN/../../build-noamx/bin/llama-bench" ]; then BIN=$(cd "$BIN/../../build-noamx/bin" && pwd); fi
  LLAMA_BENCH=$BIN/llama-bench
fi
LLAMA_ARGS=${LLAMA_ARGS:-}

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
models=()
for m in "$@"; do
  if [ -f "$m" ]; then models+=("$m"); else models+=("$("$CERA" pull "$m" 2>/dev/null | tail -1)"); fi
done

# tests: "-p PP -n 0", "-p 0 -n TG", "-p 0 -n TG -d DEPTH"; -p 0, -n 0 or -d 0 leaves one out
tests=()
[ "$PP" != 0 ] && tests+=("-p $PP -n 0 -d 0")
[ "$TG" != 0 ] && tests+=("-p 0 -n $TG -d 0")
[ "$DEPTH" != 0 ] && tests+=("-p 0 -n ${TG_DEPTH:-$TG} -d $DEPTH")
for round in $(seq "$ROUNDS"); do
  for mi in "${!models[@]}"; do
    for ti in "${!tests[@]}"; do
      # shellcheck disable=SC2086
      "$LLAMA_BENCH" -m "${models[$mi]}" -t "$THREADS" -r 1 -o json ${tests[$ti]} $LLAMA_ARGS \
        > "$OUT/llama.$mi.$ti.$round.json" 2>/dev/null
      # shellcheck disable=SC2086
      "$CERA" bench -m "${models[$mi]}" -t "$THREADS" -r 1 -o json ${tests[$ti]} \
        > "$OUT/cera.$mi.$ti.$round.json" 2>/dev/null
    done
  done
  echo "round $round/$ROUNDS done" >&2
done

python3 - "$OUT" "$ROUNDS" "$THREADS" "$CERA" "$LLAMA_BENCH" "$LLAMA_ARGS" "$ROOT" "${models[@]}" <<'EOF'
import glob, json, os, statistics, subprocess, sys, datetime
out, rounds, threads, cera, llama, largs, root = sys.argv[1:8]
models = sys.argv[8:]
def samples(engine, mi):
    res = {}
    for f in sorted(glob.glob(f"{out}/{engine}.{mi}.*.json")):
        for rec in json.load(open(f)):
            name = (f"pp{rec['n_prompt']}" if rec["n_prompt"] else f"tg{rec['n_gen']}")
            if rec.get("n_depth"):
                name += f" @ d{rec['n_depth']}"
            res.setdefault(name, []).extend(rec["samples_ts"])
    return res
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
try:
    commit = subprocess.check_output(["git", "-C", root, "rev-parse", "--short", "HEAD"], text=True).strip()
except Exception:
    commit = "?"
load = open("/proc/loadavg").read().split()[:3]
print(f"- date {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, cera commit `{commit}`, CPU {cpu}, "
      f"{os.cpu_count()} cores, load average after the runs {' '.join(load)}")
print(f"- threads {threads}, {rounds} interleaved rounds, llama-bench `{llama}` {largs}")
print()
print("| model | test | llama.cpp t/s (median) | cera t/s (median) | cera / llama.cpp | llama.cpp samples | cera samples |")
print("| --- | --- | ---: | ---: | ---: | --- | --- |")
for mi, m in enumerate(models):
    a, b = samples("llama", mi), samples("cera", mi)
    for test in a:
        if test not in b:
            continue
        ma, mb = statistics.median(a[test]), statistics.median(b[test])
        fa = " ".join(f"{x:.1f}" for x in a[test])
        fb = " ".join(f"{x:.1f}" for x in b[test])
        print(f"| {os.path.basename(m)} | {test} | {ma:.2f} | {mb:.2f} | {mb / ma:.2f} | {fa} | {fb} |")
EOF
