#!/usr/bin/env bash
# Before/after speed of the decode loop: two `cera` binaries (a build of an earlier commit and
# this one), interleaved round by round on the same model, medians.
#   tg128      `cera bench -p 0 -n 128` (the session's decode step; no sampling loop)
#   run tg     `cera run --raw --ignore-eos -n 128` decode tokens/s (Session::generate)
#   B=4        `cera batched-bench --npl 4` aggregate decode tokens/s (S_TG)
# usage: scripts/bench-loop.sh BEFORE_BIN AFTER_BIN [MODEL] [ROUNDS]
set -euo pipefail
before=$1 after=$2 model=${3:-smollm2} rounds=${4:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
measure() { # bin -> "tg128 run_tg b4"
  local bin=$1
  local tg run b4
  tg=$("$bin" bench -m "$model" -t 2 -p 0 -n 128 -r 3 -o json | python3 -c \
    'import json,sys; r=[x for x in json.load(sys.stdin) if x.get("n_gen")]; print(r[0]["avg_ts"])')
  run=$("$bin" run -m "$model" -t 2 --raw --ignore-eos --temp 0 -n 128 -p "Once upon a time" 2>&1 >/dev/null |
    grep -oE '\([0-9.]+ t/s\)' | tail -1 | tr -d '(' | cut -d' ' -f1)
  b4=$("$bin" batched-bench -m "$model" -t 2 --npp 128 --ntg 128 --npl 4 --output-format jsonl |
    python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["speed_tg"])')
  echo "$tg $run $b4"
}
for r in $(seq "$rounds"); do
  if (( r % 2 )); then order="before after"; else order="after before"; fi
  for w in $order; do
    bin=$before; [ "$w" = after ] && bin=$after
    m=$(measure "$bin")
    echo "$m" >> "$tmp/$w"
    echo "round $r $w: $m" >&2
  done
done
python3 - "$tmp" <<'PY'
import statistics, sys
d = sys.argv[1]
rows = {w: [list(map(float, l.split())) for l in open(f"{d}/{w}")] for w in ("before", "after")}
print("| measure | before (tok/s) | after (tok/s) | after/before |")
print("| --- | ---: | ---: | ---: |")
for i, name in enumerate(["cera bench tg128", "cera run, 128 tokens (decode)", "batched-bench B=4 (S_TG)"]):
    b = statistics.median(r[i] for r in rows["before"]); a = statistics.median(r[i] for r in rows["after"])
    print(f"| {name} | {b:.1f} | {a:.1f} | {a / b:.3f} |")
PY
