#!/usr/bin/env bash
# The whole test suite, from a fresh clone: formatting, lints, the models the tests need (fetched
# through the project's own fetch step), every test in the workspace, the cross-compiled kernel
# tests (aarch64 under qemu, wasm32 under Node and Chromium) and the front ends (server, Hub,
# Python wheel, WebAssembly, browser, Kotlin, parity). Ends with a table of step times.
#
# What keeps it inside 40 minutes on two cores (CONTRIBUTING.md says more, with the last table):
# - one native build for everything (the `ci` profile: release code with debug assertions and
#   overflow checks): the workspace tests, the `cera` binary the other suites drive, the
#   examples, the GPU parity list, the Kotlin library, and (through feature pins in cera-py) the
#   wheel; clippy lints the workspace crates as every build compiles them (clippy-driver as the
#   workspace's rustc wrapper) instead of in a second pass;
# - the cross-compiled builds and their tests (aarch64 under qemu, wasm32-wasip1 under Node, the
#   wasm package) run in three background chains at the lowest CPU priority from the start, in
#   target folders of their own, filling the cores the native build and tests leave idle;
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
declare -A pids
jobs_started=()
step() {
  steps+=("$*")
  starts+=($((SECONDS - T0)))
  echo "== $* (at $((SECONDS - T0)) s)"
}
table() {
  local rc=$1 end=$((SECONDS - T0)) i n=${#steps[@]}
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
  if ((${#jobs_started[@]})); then
    echo
    echo "background jobs (at the lowest priority but for the installs; s from the start):"
    local j
    for j in "${jobs_started[@]}"; do
      echo "  ${j%%:*}: ${j#*:} -> $(cat "$LOGS/${j%%:*}.end" 2>/dev/null || echo '?')"
    done
  fi
  [ "$rc" -eq 0 ] || echo "(failed in the step '${steps[n - 1]%%:*}', exit $rc)"
  if ((end > 2700)); then
    echo
    echo "WARNING: the test suite took $end s, past 45 minutes (target: 40, CI's limit: 90)."
    echo "WARNING: find the step that grew in the table above before it costs the next landing."
  fi
}
# on the way out (a failed step), background jobs still running are stopped with their children
kill_tree() {
  local c
  for c in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$c"; done
  kill "$1" 2>/dev/null || true
}
finish() {
  local rc=$?
  table "$rc"
  local name
  for name in "${!pids[@]}"; do
    [ -e "$LOGS/$name.rc" ] || kill_tree "${pids[$name]}"
  done
  exit "$rc"
}
trap finish EXIT
rm -f "$LOGS"/*.rc "$LOGS"/*.end

# ---- background jobs: NAME's output in target/ci-logs/NAME.log, its exit status in NAME.rc;
# `join NAME` waits for it here, `await NAME` inside another background job ----
bg() {
  local name=$1
  shift
  echo "-- background: $name (log $LOGS/$name.log)"
  rm -f "$LOGS/$name.rc" "$LOGS/$name.end"
  jobs_started+=("$name:$((SECONDS - T0))")
  (
    set +e
    (
      set -e
      "$@"
    ) >"$LOGS/$name.log" 2>&1
    echo $? >"$LOGS/$name.rc"
    echo $((SECONDS - T0)) >"$LOGS/$name.end"
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
  [ "${2:-}" = --show ] && cat "$LOGS/$1.log"
  echo "-- $1 done (waited $((SECONDS - s)) s; its log: $LOGS/$1.log)"
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

# clippy-driver as the workspace crates' compiler in every build below: `cargo clippy -D
# warnings`'s lints on every target a build compiles, in that one compilation (dependencies
# compile with plain rustc, as under `cargo clippy`). Every cargo command on a target folder must
# keep the same wrapper, or the workspace crates rebuild.
CLIPPY_DRIVER=$(command -v clippy-driver || true)
[ -n "$CLIPPY_DRIVER" ] || CLIPPY_DRIVER="$(dirname "$(rustup which rustc)")/clippy-driver"
export RUSTC_WORKSPACE_WRAPPER=$CLIPPY_DRIVER CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

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
  # five LibriVox clips with transcripts (the Whisper tests)
  [ -d /usr/share/pocketsphinx/test/data/librivox ] || need+=(pocketsphinx-testdata)
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

# The cross-compiled builds and their tests, at the lowest priority, in three chains that run
# side by side (a WASI test run takes one core), each in target folders of its own (cargo locks
# a target folder per profile while it builds). They take only what the native build and tests
# leave idle until the steps below wait for them. clippy lints what these builds compile for each
# target: the core (with and without cfg(test)), tests/kernels.rs (the one test file with code of
# its own per target; the other tests and the examples are linted natively) and cera-wasm.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
arm=(-p cera --no-default-features --locked --target aarch64-unknown-linux-gnu --profile cross)
# (each chain its own target folder: two builds of one profile share its host folder, whose lock
# kept the aarch64 tests waiting four minutes for the wasi build to end)
wasi=(-p cera --no-default-features --locked --target wasm32-wasip1 --target-dir target/wasi --profile cross)
relaxed=(-p cera --no-default-features --locked --target wasm32-wasip1 --target-dir target/wasm-relaxed --profile cross)
WASI_FLAGS="-C target-feature=+simd128"
RELAXED_FLAGS="-C target-feature=+simd128,+relaxed-simd"
lowest_priority() { renice -n 19 -p "$BASHPID" >/dev/null; }

aarch64_tests() {
  lowest_priority
  await packages
  # the NEON tiers (hub off: its TLS stack is not what these tests are about)
  run cargo test "${arm[@]}" --lib --test kernels --test arch_parity --no-run
  # run under qemu twice: on `-cpu max` (every tier) and on a Cortex-A72 (no `sdot`), where
  # detection must fall back to `neon`. CERA_EXPECT_TIERS makes a detection mismatch fail the
  # run; CERA_TEST_RUNNER lets tests that re-run their own binary go through qemu too.
  local cpu_tiers runner
  for cpu_tiers in max:scalar,neon,neon-dotprod,neon-i8mm cortex-a72:scalar,neon; do
    runner="qemu-aarch64 -cpu ${cpu_tiers%%:*} -L /usr/aarch64-linux-gnu"
    echo "-- $runner (expecting tiers ${cpu_tiers#*:})"
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner" CERA_TEST_RUNNER="$runner"
    export CERA_EXPECT_TIERS="${cpu_tiers#*:}"
    if [ "${cpu_tiers%%:*}" = max ]; then
      # every tier runs here (`max` has them all), so the kernels are tested once, on all tiers
      run cargo test "${arm[@]}" --test kernels
      # (the attention tests take fewer thread counts under the emulator: CERA_TEST_RUNNER)
      run cargo test "${arm[@]}" --lib -- kernels:: backend::cpu::attention
      # end to end through the matmul (the i8mm GEMM), prefill against decode included; the
      # tiny models take their tokenizer from SmolLM2
      await models
      run cargo test "${arm[@]}" --test arch_parity -- --exact llama3_q4_0 qwen2_q8_0 lfm2_q4_0
    else
      # a core without `sdot`: what is new here is detection falling back to `neon`
      run cargo test "${arm[@]}" --lib -- kernels::cpu
    fi
  done
  done_with target/aarch64-unknown-linux-gnu
}

wasi_tests() {
  lowest_priority
  await packages
  # The simd128 tier built for wasm32-wasip1 and run by Node (scripts/wasi-run.mjs): the kernel
  # tests (every format, simd128 against scalar, bit for bit) and the kernel and attention unit
  # tests (one thread: no threads in wasm32-wasip1). A WASI program cannot start a process, so
  # the CERA_CPU_TIER test runs once per tier from here, with the tier it must get.
  export CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="$WASI_FLAGS"
  export CARGO_TARGET_WASM32_WASIP1_RUNNER="node --single-threaded-gc $PWD/scripts/wasi-run.mjs"
  run cargo test "${wasi[@]}" --lib --test kernels --no-run
  await models
  CERA_EXPECT_TIERS=scalar,simd128 run cargo test "${wasi[@]}" --test kernels
  CERA_EXPECT_TIERS=scalar,simd128 run cargo test "${wasi[@]}" --lib -- kernels:: backend::cpu::attention
  local t
  for t in scalar simd128; do
    CERA_CPU_TIER=$t CERA_TEST_EXPECT_TIER=$t \
      run cargo test "${wasi[@]}" --test kernels -- --exact cpu_tier_env_override
  done
  done_with target/wasi
  # the relaxed-SIMD build of the same tests (run in Chromium by the browser step)
  CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="$RELAXED_FLAGS" run cargo test "${relaxed[@]}" --test kernels --no-run
}

wasm_package() {
  lowest_priority
  await packages
  # cera-wasm's package (wasm-bindgen's module with simd128, the threads builds), then clippy
  # on the one cfg no build here compiles: wasm32 without simd128 (the scalar-only build)
  run bash scripts/build-wasm.sh
  echo "-- [$((SECONDS - T0)) s] cargo clippy -p cera-wasm --target wasm32-unknown-unknown"
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS \
    cargo clippy -p cera-wasm --target wasm32-unknown-unknown --locked -- -D warnings
}
bg aarch64 aarch64_tests
bg wasi wasi_tests
bg wasm wasm_package

step "build: the workspace, its tests and examples, linted by clippy as they compile (profile ci)"
cargo test --workspace --profile "$PROFILE" --locked --no-run

step "wheel: cera-py's wheel (maturin), on the same build"
# maturin builds cera-py alone; crates/cera-py/Cargo.toml pins the features the workspace's test
# build turned on, so the core and every dependency come from that build (cargo test does not
# build cera-py's library: it is linted here)
join python
rm -rf target/wheels
target/pyenv/bin/maturin build --profile "$PROFILE" --locked -m crates/cera-py/Cargo.toml \
  -o target/wheels 2>&1 | tee "$LOGS/wheel.log"
if grep -q "Compiling cera v" "$LOGS/wheel.log"; then
  echo "WARNING: maturin compiled the core again: a feature pin in crates/cera-py/Cargo.toml is stale"
  echo "WARNING: (compare \`cargo tree -p cera-py -e normal,build -f '{p} {f}'\` with the workspace's)"
fi

step "fetch: the test models and llama.cpp's test data"
for m in smollm2-135m-instruct-q4_1 qwen2.5-coder-0.5b-instruct-q4_k_m whisper-tiny.en whisper-base; do
  "$OUT/cera" pull "$m"
done
"$OUT/examples/fetch_test_data"
echo 0 >"$LOGS/models.rc"

step "cargo test: the workspace on the CPU and lavapipe (profile ci)"
join packages
# the workspace builds the core with the `gpu` feature (cera-cli enables it), so its GPU tests
# (tests/gpu_ops.rs, tests/gpu_model.rs) run here, on Mesa's lavapipe (CERA_GPU picks an adapter
# by index where a machine has several); the GPU parity list of arch_parity runs next, four
# models of it
CERA_TEST_PYTHON="$PWD/target/pyenv/bin/python" cargo test --workspace --profile "$PROFILE" --locked -- --skip gpu::

step "gpu: llama.cpp parity of the architectures, the media towers and Whisper through the GPU kernels (lavapipe)"
# one model per feature the kernels add (quantized GEMM, soft-capping, sliding windows,
# convolution and experts); the whole list is `arch_parity gpu::` (minutes each on lavapipe)
# and the media towers against mtmd's rows (LFM2-VL's and LFM2-Audio's; SmolVLM's three slices
# take minutes there: `vision_parity gpu::smolvlm_encodes_as_mtmd` by name)
cargo test --workspace --profile "$PROFILE" --locked --test arch_parity --test vision_parity \
  --test audio_parity --test whisper -- gpu::llama3_q4_0 gpu::gemma2_q8_0 gpu::gemma3_swa_f32 \
  gpu::lfm2moe_q4_0 gpu::lfm2_vl_encodes_as_mtmd gpu::lfm2_audio_encodes_as_mtmd \
  gpu::tiny_en_transcribes_as_whisper_cpp

step "server: pytest with the openai client, requests and jsonschema"
# a random-weight BERT reranker (the same generator as the Rust tests) for the /v1/rerank test
"$OUT/examples/make_bert_model" target/pytest-rerank.gguf rerank >/dev/null
# a random-weight mmproj as wide as SmolLM2, with a vision and an audio half, for the media tests
# (tests/server/test_vision.py, tests/python/test_vision.py, tests/kotlin/bindings.kts, the
# cera-wasm tests in Node and Chromium)
"$OUT/examples/make_mmproj" target/pytest-mmproj.gguf 576 f16 tiny+audio >/dev/null
CERA_RERANK_MODEL="$PWD/target/pytest-rerank.gguf" CERA_MMPROJ="$PWD/target/pytest-mmproj.gguf" \
  CERA_TEST_DATA="$("$OUT/examples/fetch_test_data")" CERA_BIN="$PWD/$OUT/cera" \
  target/pyenv/bin/python -m pytest -q tests/server

step "hub: a local Hugging Face Hub (loopback), cera's client and huggingface_hub on one cache"
CERA_BIN="$PWD/$OUT/cera" target/pyenv/bin/python -m pytest -q tests/hub

step "python: the cera wheel (built above), pip-installed into a fresh venv, pytest"
rm -rf target/wheel-venv
python3 -m venv target/wheel-venv
target/wheel-venv/bin/pip install -q --disable-pip-version-check target/wheels/cera-*.whl pytest jsonschema
CERA_MMPROJ="$PWD/target/pytest-mmproj.gguf" CERA_TEST_DATA="$("$OUT/examples/fetch_test_data")" \
  CERA_BIN="$PWD/$OUT/cera" target/wheel-venv/bin/python -m pytest -q tests/python

step "kotlin: UniFFI bindings generated, compiled with kotlinc, tests/kotlin/bindings.kts"
join npm
# (cargo test built the library, in the profile's deps/ folder: it copies up only what tests run)
CERA_MMPROJ="$PWD/target/pytest-mmproj.gguf" CERA_TEST_DATA="$("$OUT/examples/fetch_test_data")" \
  CERA_PROFILE=$PROFILE CERA_BUILT=1 CERA_FFI_LIB="$OUT/deps/libcera_ffi.so" bash scripts/kotlin-test.sh

step "aarch64: the NEON kernel tests under qemu-user (built and run in the background)"
join aarch64 --show

step "wasm32: the simd128 kernel tests under Node's WASI, relaxed SIMD's in Chromium (background)"
join wasi --show

step "wasm: cera-wasm's package (built in the background) in node --test"
join wasm
model_path() { "$OUT/cera" models | awk -v m="$1" '$1 == m { print $NF; exit }'; }
SMOL=$(model_path smollm2-135m-instruct-q4_1)
QWEN=$(model_path qwen2.5-coder-0.5b-instruct-q4_k_m)
export CERA_WHISPER=$(model_path whisper-tiny.en)
CERA_BIN="$PWD/$OUT/cera" CERA_TEST_MODEL="$SMOL" CERA_TEST_TOOLS_MODEL="$QWEN" \
  CERA_MMPROJ="$PWD/target/pytest-mmproj.gguf" node --test crates/cera-wasm/tests/node.test.mjs
# the same tests on the threads build, its kernels on two threads (the simd128 module: Node 20
# has no relaxed SIMD to speak of, so the loader picks that one; Chromium's turn is below)
CERA_WASM_THREADS=2 CERA_BIN="$PWD/$OUT/cera" CERA_TEST_MODEL="$SMOL" CERA_TEST_TOOLS_MODEL="$QWEN" \
  CERA_MMPROJ="$PWD/target/pytest-mmproj.gguf" node --test crates/cera-wasm/tests/node.test.mjs

step "browser: relaxed SIMD's kernel tests and the cera-wasm page in headless Chromium (puppeteer-core)"
# the simd128 tier built with relaxed SIMD (in the background), bit for bit against the scalar
# tier, in Chromium's engine: Node 20 has relaxed SIMD only behind a flag, and there its 8-bit
# dot product is twice the sum. (Without the model file: no file system in a page.)
CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="$RELAXED_FLAGS" \
  CARGO_TARGET_WASM32_WASIP1_RUNNER="node $PWD/crates/cera-wasm/tests/browser/wasi-run.mjs" \
  CERA_EXPECT_TIERS=scalar,simd128 cargo test "${relaxed[@]}" --test kernels -- --skip real_model_tensors
# the page (screenshot in target/browser)
CERA_BIN="$PWD/$OUT/cera" CERA_TEST_MODEL="$SMOL" CERA_MMPROJ="$PWD/target/pytest-mmproj.gguf" \
  node --test crates/cera-wasm/tests/browser/page.test.mjs
done_with target/wasm-relaxed target/wasm32-wasip1-threads target/wasm32-unknown-unknown

step "parity: the same greedy tokens through Rust, the CLI, Python, Kotlin and WebAssembly (Node)"
CERA_PROFILE=$PROFILE CERA_BUILT=1 bash scripts/parity.sh
step "done"
