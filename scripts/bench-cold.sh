#!/usr/bin/env bash
# Cold start, as a user meets it: `cera run --raw -p Hello -n 1` as a whole process against
# `llama-simple -n 1 Hello`, alternating, ROUNDS runs each (default 5); prints each run's wall
# time and peak RSS (/usr/bin/time), then the medians. The page cache is warm (the file was read
# before): what is compared is the engines' own start, not the disk. Not used by CI.
#
#   usage: scripts/bench-cold.sh [-r ROUNDS] MODEL...
#   env:   LLAMA_SIMPLE=path/to/llama-simple (default: ../shared/tools/build-llama-cpp.sh's),
#          CERA=target/release/cera
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
ROUNDS=5
while getopts "r:" o; do
  case $o in r) ROUNDS=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n 2,10p "$0" >&2; exit 2; }
CERA=${CERA:-$ROOT/target/release/cera}
if [ -z "${LLAMA_SIMPLE:-}" ]; then
  BIN=$(bash "$ROOT/../shared/tools/build-llama-cpp.sh")
  LLAMA_SIMPLE=$BIN/llama-simple
fi
export LD_LIBRARY_PATH="$(dirname "$LLAMA_SIMPLE")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "| model | engine | wall s (median) | peak RSS MB (median) | wall samples |"
echo "| --- | --- | ---: | ---: | --- |"
for m in "$@"; do
  [ -f "$m" ] || m=$("$CERA" pull "$m" 2>/dev/null | tail -1)
  cat "$m" >/dev/null # into the page cache
  : >/tmp/cold.cera
  : >/tmp/cold.llama
  for _ in $(seq "$ROUNDS"); do
    /usr/bin/time -f "%e %M" -a -o /tmp/cold.cera "$CERA" run -m "$m" --raw -p Hello -n 1 >/dev/null 2>&1
    /usr/bin/time -f "%e %M" -a -o /tmp/cold.llama "$LLAMA_SIMPLE" -m "$m" -n 1 Hello >/dev/null 2>&1
  done
  for e in cera llama; do
    w=$(awk '{ print $1 }' /tmp/cold.$e | median)
    r=$(awk '{ print $2 / 1024 }' /tmp/cold.$e | median)
    s=$(awk '{ printf "%s ", $1 }' /tmp/cold.$e)
    name=$([ $e = cera ] && echo cera || echo llama-simple)
    printf '| %s | %s | %.2f | %.1f | %s|\n' "$(basename "$m")" "$name" "$w" "$r" "$s"
  done
done
