#!/usr/bin/env bash
# Where the workspace tests' time goes: runs every test binary of `cargo test --workspace` (the
# CI profile's build, as scripts/test.sh makes it) as cargo test would (from its package's
# folder, two test threads), with libtest's per-test times, then prints each binary's wall time
# and the slowest tests.
#
# Usage: scripts/test-times.sh [N] [-- TEST ARGS]   (N: how many of the slowest tests to list,
# default 25; the arguments after `--` go to every binary, e.g. `-- --skip gpu::`)
# Needs what scripts/test.sh's "cargo test" step needs (the fetched models and test data).
# libtest's --report-time is unstable; RUSTC_BOOTSTRAP=1 in the test binaries' environment (not
# cargo's, which would rebuild) lets a stable toolchain's test harness take it.
set -euo pipefail
cd "$(dirname "$0")/.."
N=25
if [[ ${1:-} =~ ^[0-9]+$ ]]; then N=$1; shift; fi
[ "${1:-}" = -- ] && shift
PROFILE=${CERA_PROFILE:-ci}
if [ "$PROFILE" = ci ] && [ -z "${RUSTC_WORKSPACE_WRAPPER:-}" ]; then
  # the same compiler as scripts/test.sh, so its build is reused
  export RUSTC_WORKSPACE_WRAPPER
  RUSTC_WORKSPACE_WRAPPER=$(command -v clippy-driver || echo "$(dirname "$(rustup which rustc)")/clippy-driver")
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi
export CARGO_INCREMENTAL=0 CARGO_PROFILE_TEST_DEBUG=false CARGO_PROFILE_RELEASE_DEBUG=false
[ -x target/pyenv/bin/python ] && export CERA_TEST_PYTHON="$PWD/target/pyenv/bin/python"
out=target/test-times
mkdir -p "$out"
# each test binary with the manifest folder of its package (cargo runs tests there)
cargo test --workspace --profile "$PROFILE" --locked --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(os.path.dirname(m["manifest_path"]), m["target"]["name"], m["executable"])
' >"$out/binaries.txt"
: >"$out/tests.txt"
: >"$out/binaries-times.txt"
while read -r dir name exe; do
  s=$(date +%s.%N)
  (cd "$dir" && RUSTC_BOOTSTRAP=1 "$exe" -Z unstable-options --report-time "$@" 2>&1) |
    sed -n "s/^test \(.*\) \.\.\. \([a-z]*\) <\([0-9.]*\)s>$/\3 $name::\1 \2/p" >>"$out/tests.txt" || true
  e=$(date +%s.%N)
  printf '%8.1f %s (%s)\n' "$(echo "$e - $s" | bc)" "$name" "$(basename "$dir")" | tee -a "$out/binaries-times.txt"
done <"$out/binaries.txt"
echo
echo "total: $(awk '{s += $1} END {printf "%.0f", s}' "$out/binaries-times.txt") s in $(wc -l <"$out/binaries.txt") binaries"
echo "slowest tests (seconds, with another test beside them):"
sort -rn "$out/tests.txt" | head -n "$N"
