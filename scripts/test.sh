#!/usr/bin/env bash
# The whole test suite, from a fresh clone: formatting, lints, the models the tests need (fetched
# through the project's own fetch step), every test in the workspace, the cross-compiled kernel
# tests (aarch64 under qemu, wasm32 under Node and Chromium) and the front ends (server, Hub,
# Python wheel, WebAssembly, browser, Kotlin, parity). Ends with a table of step times.
#
# Where the time goes, and what keeps it down (CONTRIBUTING.md has the last step table):
# - one native build for everything (the `ci` profile: release code with debug assertions and
#   overflow checks): the workspace tests, the `cera` binary the other suites drive, the
#   examples, the GPU parity list, the Kotlin library; clippy lints the workspace crates during
#   that same build (clippy-driver as the workspace's rustc wrapper) instead of a second pass;
# - the cross-compiled builds (aarch64 and wasm32 clippy and test binaries, the wasm packages)
#   run in the background at the lowest CPU priority from the start, in target folders of their
#   own, filling the cores the native build and tests leave idle; their tests run later;
# - packages (apt, rustup targets, pip, npm) install in the background at the start.
# Logs of background jobs: target/ci-logs/. CERA_KEEP_TARGETS=1 keeps each step's target folder.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
# Disk: a CI machine may have only a few GiB free; a one-off build gains nothing from incremental
# state, and debug info was four fifths of every test binary (the profiles carry no debug info).
export CARGO_INCREMENTAL=0 CARGO_PROFILE_TEST_DEBUG=false CARGO_PROFILE_RELEASE_DEBUG=false
export CARGO_TERM_PROGRESS_WHEN=never
PROFILE=ci
OUT=target/$PROFILE
LOGS=target/ci-logs
mkdir -p "$LOGS"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo

# ---- step times: each step's start, and a closing table (also when a step fails) ----
steps=() starts=()
step() {
  steps+=("$*")
  starts+=($((SECONDS - T0)))
  echo "== $* (at $((SECONDS - T0)) s)"
}
table() {
  local rc=$? end=$((SECONDS - T0)) i n=${#steps[@]}
  ((n)) || return 0
  echo
  echo "| step | s |"
  echo "| --- | ---: |"
  for ((i = 0; i < n; i++)); do
    local until=$end
    ((i + 1 < n)) && until=${starts[i + 1]}
    echo "| ${steps[i]%%:*} | $((until - starts[i])) |"
  done
  echo "| **total** | **$end** |"
  [ "$rc" -eq 0 ] || echo "(failed in the step '${steps[n - 1]%%:*}', exit $rc)"
  if ((end > 2700)); then
    echo
    echo "WARNING: the test suite took $end s, past 45 minutes (target: 40, CI's limit: 90)."
    echo "WARNING: find the step that grew in the table above before it costs the next landing."
  fi
}
trap table EXIT

# ---- background jobs: NAME's output in target/ci-logs/NAME.log, its exit status in NAME.rc;
# `join NAME` waits for it here, `await NAME` inside another background job ----
declare -A pids
bg() {
  local name=$1
  shift
  echo "-- background: $name (log $LOGS/$name.log)"
  rm -f "$LOGS/$name.rc"
  (
    set +e
    (
      set -e
      "$@"
    ) >"$LOGS/$name.log" 2>&1
    echo $? >"$LOGS/$name.rc"
  ) &
  pids[$name]=$!
}
join() {
  local s=$SECONDS
  wait "${pids[$1]}" || true
  if [ "$(cat "$LOGS/$1.rc" 2>/dev/null)" != 0 ]; then
    tail -n 60 "$LOGS/$1.log"
    echo "error: the background job '$1' failed (its log: $LOGS/$1.log)" >&2
    exit 1
  fi
  echo "-- $1 done (waited $((SECONDS - s)) s)"
}
await() {
  until [ -e "$LOGS/$1.rc" ]; do sleep 1; done
  [ "$(cat "$LOGS/$1.rc")" = 0 ] || { echo "error: $1 failed" >&2; return 1; }
}
# a command with its start time, in a background job's log
run() {
  echo "-- [$((SECONDS - T0)) s] $*"
  "$@"
}
done_with() {
  [ -n "${CERA_KEEP_TARGETS:-}" ] && return
  echo "-- freeing $* ($(du -sh "$@" 2>/dev/null | awk '{print $1}' | paste -sd+), $(df -h . | awk 'NR == 2 { print $4 }') free before)"
  rm -rf "$@"
}

command -v cargo >/dev/null || { echo "error: cargo (Rust 1.95+) is required" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 with pip is required to fetch models" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy

step "fmt: cargo fmt --check"
cargo fmt --all --check

step "setup: packages in the background (apt, rustup targets, pip, npm)"
packages() {
  # Debian: qemu and the aarch64 linker (the NEON tests), Node (wasm tests), Mesa's lavapipe
  # (software Vulkan: the GPU tests), Chromium (the page), a JDK and JNA (Kotlin)
  local need=()
  command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
  command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
  command -v node >/dev/null || need+=(nodejs npm)
  ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers libvulkan1)
  command -v chromium >/dev/null || need+=(chromium)
  command -v javac >/dev/null || need+=(default-jdk-headless)
  [ -f /usr/share/java/jna.jar ] || need+=(libjna-java)
  python3 -m venv --help >/dev/null 2>&1 || need+=(python3-venv)
  if ((${#need[@]})); then
    run $sudo apt-get update -qq
    run $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
  fi
  local t
  for t in aarch64-unknown-linux-gnu wasm32-wasip1 wasm32-unknown-unknown wasm32-wasip1-threads; do
    rustup target list --installed | grep -q "^$t\$" || run rustup target add "$t"
  done
}
bg packages packages
python_env() {
  # a virtual environment of its own under target/, so the system Python is left alone (numpy
  # and gguf also make the conversion tests' checkpoints; maturin builds the wheel)
  await packages
  [ -x target/pyenv/bin/python ] || run python3 -m venv target/pyenv
  run target/pyenv/bin/pip install -q --disable-pip-version-check openai ollama requests \
    jsonschema pytest numpy gguf huggingface_hub maturin
}
bg python python_env
npm_packages() {
  await packages
  # puppeteer-core for the page test; a current Kotlin compiler (Debian's is too old for the
  # generated code; scripts/kotlin-test.sh checks its version)
  (cd crates/cera-wasm/tests/browser && run npm ci --no-audit --no-fund --loglevel=error)
  run bash scripts/kotlin-test.sh --install-only
}
bg npm npm_packages

# The cross-compiled builds, at the lowest priority, each in target folders of its own (cargo
# locks a target folder per profile while it builds): their clippy passes and their test
# binaries now, their runs in the steps below.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
arm=(-p cera --no-default-features --locked --target aarch64-unknown-linux-gnu)
wasi=(-p cera --no-default-features --locked --target wasm32-wasip1)
WASI_FLAGS="-C target-feature=+simd128"
RELAXED_FLAGS="-C target-feature=+simd128,+relaxed-simd"
relaxed=(-p cera --no-default-features --locked --target wasm32-wasip1 --target-dir target/wasm-relaxed)
cross_builds() {
  # the lowest priority: these only take what the foreground leaves idle until it waits for them
  renice -n 19 -p "$BASHPID" >/dev/null
  await packages
  # aarch64: the NEON tiers (hub off: its TLS stack is not what these tests are about)
  run cargo clippy "${arm[@]}" --all-targets -- -D warnings
  run cargo test "${arm[@]}" --profile cross --lib --test kernels --test arch_parity --no-run
  # wasm32-wasip1: the simd128 tier (Node's WASI runs the tests), then with relaxed SIMD
  # (Chromium's engine runs those)
  CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="$WASI_FLAGS" run cargo clippy "${wasi[@]}" --all-targets -- -D warnings
  CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="$WASI_FLAGS" run cargo test "${wasi[@]}" --profile cross --lib --test kernels --no-run
  CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="$RELAXED_FLAGS" run cargo test "${relaxed[@]}" --profile cross --test kernels --no-run
  # cera-wasm's package (wasm-bindgen's module, the threads builds), then clippy on its targets:
  # with simd128 (the module as built), without (the scalar-only build), and the threads build's
  # exports (abi.rs), which compile only there
  run bash scripts/build-wasm.sh
  CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="$WASI_FLAGS" \
    run cargo clippy -p cera-wasm --target wasm32-unknown-unknown --locked -- -D warnings
  run cargo clippy -p cera-wasm --target wasm32-unknown-unknown --locked -- -D warnings
  CARGO_TARGET_WASM32_WASIP1_THREADS_RUSTFLAGS="$WASI_FLAGS -C link-arg=--max-memory=4294967296" \
    run cargo clippy -p cera-wasm --target wasm32-wasip1-threads --locked -- -D warnings
  echo "-- [$((SECONDS - T0)) s] cross builds done"
}
bg cross cross_builds

# The wheel: maturin builds cera-py alone, whose features differ from the workspace tests' (the
# tests' dev-dependencies turn on features of shared crates), so it is a build of its own, in
# the background at the lowest priority, linted as it compiles (cargo test does not build
# cera-py's library; see the next step)
wheel() {
  renice -n 19 -p "$BASHPID" >/dev/null
  await python
  rm -rf target/wheels
  RUSTC_WORKSPACE_WRAPPER=$CLIPPY_DRIVER CLIPPY_ARGS=$CLIPPY_ARGS CARGO_TARGET_DIR=target/wheel-build \
    run target/pyenv/bin/maturin build --profile "$PROFILE" --locked -m crates/cera-py/Cargo.toml -o target/wheels
}

step "build: the workspace, its tests and examples, linted by clippy as they compile (profile ci)"
# clippy-driver as the workspace crates' compiler: `cargo clippy -D warnings`'s lints on every
# target it builds, in the one compilation (dependencies compile with plain rustc as under
# `cargo clippy`). Every cargo command below on target/ci keeps the same wrapper, or the
# workspace crates would be rebuilt.
CLIPPY_DRIVER=$(command -v clippy-driver || true)
[ -n "$CLIPPY_DRIVER" ] || CLIPPY_DRIVER="$(dirname "$(rustup which rustc)")/clippy-driver"
CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
bg wheel wheel
export RUSTC_WORKSPACE_WRAPPER=$CLIPPY_DRIVER CLIPPY_ARGS
cargo test --workspace --profile "$PROFILE" --locked --no-run

step "fetch: the test models and llama.cpp's test data"
for m in smollm2-135m-instruct-q4_1 qwen2.5-coder-0.5b-instruct-q4_k_m; do
  "$OUT/cera" pull "$m"
done
"$OUT/examples/fetch_test_data"

step "cargo test: the workspace on the CPU and lavapipe (profile ci)"
join python
join packages
# the workspace builds the core with the `gpu` feature (cera-cli enables it), so its GPU tests
# (tests/gpu_ops.rs, tests/gpu_model.rs) run here, on Mesa's lavapipe (CERA_GPU picks an adapter
# by index where a machine has several); the GPU parity list of arch_parity runs next, four
# models of it
CERA_TEST_PYTHON="$PWD/target/pyenv/bin/python" cargo test --workspace --profile "$PROFILE" --locked -- --skip gpu::

step "gpu: llama.cpp parity of the architectures through the GPU kernels (lavapipe)"
# one model per feature the kernels add (quantized GEMM, soft-capping, sliding windows,
# convolution and experts); the whole list is `arch_parity gpu::` (minutes each on lavapipe)
cargo test --workspace --profile "$PROFILE" --locked --test arch_parity -- \
  gpu::llama3_q4_0 gpu::gemma2_q8_0 gpu::gemma3_swa_f32 gpu::lfm2moe_q4_0

step "server: pytest with the openai client, requests and jsonschema"
# a random-weight BERT reranker (the same generator as the Rust tests) for the /v1/rerank test
"$OUT/examples/make_bert_model" target/pytest-rerank.gguf rerank >/dev/null
CERA_RERANK_MODEL="$PWD/target/pytest-rerank.gguf" CERA_BIN="$PWD/$OUT/cera" \
  target/pyenv/bin/python -m pytest -q tests/server

step "hub: a local Hugging Face Hub (loopback), cera's client and huggingface_hub on one cache"
CERA_BIN="$PWD/$OUT/cera" target/pyenv/bin/python -m pytest -q tests/hub

step "python: the cera wheel (built above), pip-installed into a fresh venv, pytest"
join wheel
rm -rf target/wheel-venv
python3 -m venv target/wheel-venv
target/wheel-venv/bin/pip install -q --disable-pip-version-check target/wheels/cera-*.whl pytest jsonschema
CERA_BIN="$PWD/$OUT/cera" target/wheel-venv/bin/python -m pytest -q tests/python

step "kotlin: UniFFI bindings generated, compiled with kotlinc, tests/kotlin/bindings.kts"
join npm
# (cargo test built the library, in the profile's deps/ folder: it copies up only what tests run)
CERA_PROFILE=$PROFILE CERA_BUILT=1 CERA_FFI_LIB="$OUT/deps/libcera_ffi.so" bash scripts/kotlin-test.sh

step "aarch64: the NEON kernel tests under qemu-user"
join cross
# the cross builds were made without the clippy wrapper (their clippy passes are separate)
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
# The NEON tiers are cross-compiled (above) and run under qemu twice: on `-cpu max` (every
# tier) and on a Cortex-A72 (no `sdot`), where detection must fall back to `neon`.
# CERA_EXPECT_TIERS makes a detection mismatch fail the run; CERA_TEST_RUNNER lets tests that
# re-run their own binary go through qemu too.
for cpu_tiers in max:scalar,neon,neon-dotprod,neon-i8mm cortex-a72:scalar,neon; do
  runner="qemu-aarch64 -cpu ${cpu_tiers%%:*} -L /usr/aarch64-linux-gnu"
  echo "-- $runner (expecting tiers ${cpu_tiers#*:})"
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner" CERA_TEST_RUNNER="$runner"
  export CERA_EXPECT_TIERS="${cpu_tiers#*:}"
  if [ "${cpu_tiers%%:*}" = max ]; then
    # every tier runs here (`max` has them all), so the kernels are tested once, on all tiers
    cargo test "${arm[@]}" --profile cross --test kernels
    # (the attention tests take fewer thread counts under the emulator: CERA_TEST_RUNNER)
    cargo test "${arm[@]}" --profile cross --lib -- kernels:: backend::attention
    # end to end through the matmul (the i8mm GEMM), prefill against decode included
    cargo test "${arm[@]}" --profile cross --test arch_parity -- --exact llama3_q4_0 qwen2_q8_0 lfm2_q4_0
  else
    # a core without `sdot`: what is new here is detection falling back to `neon`
    cargo test "${arm[@]}" --profile cross --lib -- kernels::cpu
  fi
done
unset CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER CERA_TEST_RUNNER CERA_EXPECT_TIERS
done_with target/aarch64-unknown-linux-gnu

step "wasm32: the simd128 kernel tests under Node's WASI"
# The simd128 tier built for wasm32-wasip1 (above) and run by Node (scripts/wasi-run.mjs): the
# kernel tests (every format, simd128 against scalar, bit for bit) and the kernel and attention
# unit tests (one thread: no threads in wasm32-wasip1). A WASI program cannot start a process,
# so the CERA_CPU_TIER test runs once per tier from here, with the tier it must get.
export CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="$WASI_FLAGS"
export CARGO_TARGET_WASM32_WASIP1_RUNNER="node --single-threaded-gc $PWD/scripts/wasi-run.mjs"
CERA_EXPECT_TIERS=scalar,simd128 cargo test "${wasi[@]}" --profile cross --test kernels
CERA_EXPECT_TIERS=scalar,simd128 cargo test "${wasi[@]}" --profile cross --lib -- kernels:: backend::attention
for t in scalar simd128; do
  CERA_CPU_TIER=$t CERA_TEST_EXPECT_TIER=$t \
    cargo test "${wasi[@]}" --profile cross --test kernels -- --exact cpu_tier_env_override
done
unset CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS CARGO_TARGET_WASM32_WASIP1_RUNNER
done_with target/wasm32-wasip1

step "wasm: cera-wasm's package (built above) in node --test"
model_path() { "$OUT/cera" models | awk -v m="$1" '$1 == m { print $NF; exit }'; }
SMOL=$(model_path smollm2-135m-instruct-q4_1)
QWEN=$(model_path qwen2.5-coder-0.5b-instruct-q4_k_m)
CERA_BIN="$PWD/$OUT/cera" CERA_TEST_MODEL="$SMOL" CERA_TEST_TOOLS_MODEL="$QWEN" \
  node --test crates/cera-wasm/tests/node.test.mjs
# the same tests on the threads build, its kernels on two threads (the simd128 module: Node 20
# has no relaxed SIMD to speak of, so the loader picks that one; Chromium's turn is below)
CERA_WASM_THREADS=2 CERA_BIN="$PWD/$OUT/cera" CERA_TEST_MODEL="$SMOL" CERA_TEST_TOOLS_MODEL="$QWEN" \
  node --test crates/cera-wasm/tests/node.test.mjs

step "browser: the cera-wasm page in headless Chromium (puppeteer-core), screenshot in target/browser"
# the simd128 tier built with relaxed SIMD (above), bit for bit against the scalar tier, in
# Chromium's engine: Node 20 has relaxed SIMD only behind a flag, and there its 8-bit dot product
# is twice the sum. (Without the model file: no file system in a page.)
CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="$RELAXED_FLAGS" \
  CARGO_TARGET_WASM32_WASIP1_RUNNER="node $PWD/crates/cera-wasm/tests/browser/wasi-run.mjs" \
  CERA_EXPECT_TIERS=scalar,simd128 cargo test "${relaxed[@]}" --profile cross \
  --test kernels -- --skip real_model_tensors
CERA_BIN="$PWD/$OUT/cera" CERA_TEST_MODEL="$SMOL" node --test crates/cera-wasm/tests/browser/page.test.mjs
done_with target/wasm-relaxed target/wasm32-wasip1-threads target/wasm32-unknown-unknown

step "parity: the same greedy tokens through Rust, the CLI, Python, Kotlin and WebAssembly (Node)"
CERA_PROFILE=$PROFILE CERA_BUILT=1 bash scripts/parity.sh
step "done"
