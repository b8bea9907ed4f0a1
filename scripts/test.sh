#!/usr/bin/env bash
# The whole test suite, from a fresh clone: formatting, lints, the models the tests need
# (fetched through the project's own fetch step), then every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
# each step's header says how long the run has taken so far
step() { echo "== $* (at $((SECONDS - T0)) s)"; }
# Disk: a CI machine may have only a few GiB free. A one-off build gains nothing from
# incremental state (1.7 GiB of it), and debug info is four fifths of every test binary
# (75 MB against 14 MB, ~45 of them) and of the release builds; symbols stay, so backtraces
# still name functions. Each target folder a step alone uses goes once the step is done
# (CERA_KEEP_TARGETS=1 keeps them, for re-running this script on a machine with room).
export CARGO_INCREMENTAL=0 CARGO_PROFILE_TEST_DEBUG=false CARGO_PROFILE_RELEASE_DEBUG=false
done_with() {
  [ -n "${CERA_KEEP_TARGETS:-}" ] && return
  echo "-- freeing $* ($(du -sh "$@" 2>/dev/null | awk '{print $1}' | paste -sd+), $(df -h . | awk 'NR == 2 { print $4 }') free before)"
  rm -rf "$@"
}

command -v cargo >/dev/null || { echo "error: cargo (Rust 1.95+) is required" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 with pip is required to fetch models" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy

step "cargo fmt --check"
cargo fmt --all --check
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "fetching test models"
cargo build --release --locked -p cera-cli
for m in smollm2-135m-instruct-q4_1 qwen2.5-coder-0.5b-instruct-q4_k_m; do
  ./target/release/cera pull "$m"
done
cargo run --release --locked -q -p cera --example fetch_test_data
step "aarch64: clippy, then the NEON kernel tests under qemu-user"
# The NEON tiers are cross-compiled and run under qemu (after the fetch: the tiny-model parity
# tests take their tokenizer from SmolLM2), twice: on `-cpu max` (every tier) and on
# a Cortex-A72 (no `sdot`), where detection must fall back to `neon`. CERA_EXPECT_TIERS makes
# a detection mismatch fail the run; CERA_TEST_RUNNER lets tests that re-run their own binary
# go through qemu too.
need=()
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${need[@]}"
fi
rustup target list --installed | grep -q '^aarch64-unknown-linux-gnu$' ||
  rustup target add aarch64-unknown-linux-gnu
arm=(--locked --target aarch64-unknown-linux-gnu)
cargo clippy -p cera --all-targets "${arm[@]}" -- -D warnings
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
for cpu_tiers in max:scalar,neon,neon-dotprod,neon-i8mm cortex-a72:scalar,neon; do
  runner="qemu-aarch64 -cpu ${cpu_tiers%%:*} -L /usr/aarch64-linux-gnu"
  echo "-- $runner (expecting tiers ${cpu_tiers#*:})"
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner" CERA_TEST_RUNNER="$runner"
  export CERA_EXPECT_TIERS="${cpu_tiers#*:}"
  if [ "${cpu_tiers%%:*}" = max ]; then
    # every tier runs here (`max` has them all), so the kernels are tested once, on all tiers
    cargo test -p cera "${arm[@]}" --test kernels
    # (the attention tests take fewer thread counts under the emulator: CERA_TEST_RUNNER)
    cargo test -p cera "${arm[@]}" --lib -- kernels:: backend::attention
    # end to end through the matmul (the i8mm GEMM), prefill against decode included
    cargo test -p cera "${arm[@]}" --test arch_parity -- --exact llama3_q4_0 qwen2_q8_0 lfm2_q4_0
  else
    # a core without `sdot`: what is new here is detection falling back to `neon`
    cargo test -p cera "${arm[@]}" --lib -- kernels::cpu
  fi
done
unset CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER CERA_TEST_RUNNER CERA_EXPECT_TIERS
done_with target/aarch64-unknown-linux-gnu

step "wasm32: clippy, then the simd128 kernel tests under Node's WASI"
# The simd128 tier is built for wasm32-wasip1 and run by Node (scripts/wasi-run.mjs): the kernel
# tests (every format, simd128 against scalar, bit for bit) and the kernel and attention unit
# tests (one thread: no threads in wasm32-wasip1). A WASI program cannot start a process, so the
# CERA_CPU_TIER test runs once per tier from here, with the tier it must get.
command -v node >/dev/null || {
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq nodejs
}
rustup target list --installed | grep -q '^wasm32-wasip1$' || rustup target add wasm32-wasip1
wasi=(-p cera --no-default-features --locked --target wasm32-wasip1)
export CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="-C target-feature=+simd128"
export CARGO_TARGET_WASM32_WASIP1_RUNNER="node --single-threaded-gc $PWD/scripts/wasi-run.mjs"
cargo clippy "${wasi[@]}" --all-targets -- -D warnings
CERA_EXPECT_TIERS=scalar,simd128 cargo test "${wasi[@]}" --test kernels
CERA_EXPECT_TIERS=scalar,simd128 cargo test "${wasi[@]}" --lib -- kernels:: backend::attention
for t in scalar simd128; do
  CERA_CPU_TIER=$t CERA_TEST_EXPECT_TIER=$t \
    cargo test "${wasi[@]}" --test kernels -- --exact cpu_tier_env_override
done
unset CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS CARGO_TARGET_WASM32_WASIP1_RUNNER
done_with target/wasm32-wasip1

step "python venv (numpy and gguf also make the conversion tests' checkpoints), cargo test"
# a virtual environment of its own under target/, so the system Python is left alone
venv=target/pyenv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" 2>/dev/null || {
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq && $sudo apt-get install -y -qq python3-venv
    python3 -m venv "$venv"
  }
fi
"$venv/bin/pip" install -q --disable-pip-version-check openai ollama requests jsonschema pytest numpy gguf
# the workspace builds the core with the `gpu` feature (cera-cli enables it), so its GPU tests
# (tests/gpu_ops.rs, tests/gpu_model.rs) run here, on Mesa's lavapipe (software Vulkan;
# CERA_GPU picks an adapter by index where a machine has several)
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq mesa-vulkan-drivers libvulkan1
fi
# (the GPU parity list of arch_parity runs in its own step below, four models of it)
CERA_TEST_PYTHON="$PWD/$venv/bin/python" cargo test --workspace --locked -- --skip gpu::
# (nothing below builds the test profile: the GPU parity step and the rest are release builds)
done_with target/debug
step "gpu: llama.cpp parity of the architectures through the GPU kernels (lavapipe)"
# one model per feature the kernels add (quantized GEMM, soft-capping, sliding windows,
# convolution and experts); the whole list is `arch_parity gpu::` (minutes each on lavapipe)
cargo test --release --locked -p cera --features gpu --test arch_parity -- \
  gpu::llama3_q4_0 gpu::gemma2_q8_0 gpu::gemma3_swa_f32 gpu::lfm2moe_q4_0
step "server: pytest with the openai client, requests and jsonschema"
# a random-weight BERT reranker (the same generator as the Rust tests) for the /v1/rerank test
cargo run --release --locked -q -p cera --example make_bert_model -- target/pytest-rerank.gguf rerank >/dev/null
CERA_RERANK_MODEL="$PWD/target/pytest-rerank.gguf" CERA_BIN="$PWD/target/release/cera" \
  "$venv/bin/python" -m pytest -q tests/server
step "hub: a local Hugging Face Hub (loopback), cera's client and huggingface_hub on one cache"
"$venv/bin/pip" install -q --disable-pip-version-check huggingface_hub
CERA_BIN="$PWD/target/release/cera" "$venv/bin/python" -m pytest -q tests/hub
step "python: the cera wheel (maturin), pip-installed into a fresh venv, pytest"
"$venv/bin/pip" install -q --disable-pip-version-check maturin
rm -rf target/wheels target/wheel-venv
"$venv/bin/maturin" build --release --locked -m crates/cera-py/Cargo.toml -o target/wheels
python3 -m venv target/wheel-venv
target/wheel-venv/bin/pip install -q --disable-pip-version-check target/wheels/cera-*.whl pytest jsonschema
CERA_BIN="$PWD/target/release/cera" target/wheel-venv/bin/python -m pytest -q tests/python
step "wasm: cera-wasm for wasm32 (scripts/build-wasm.sh), clippy there, node --test"
bash scripts/build-wasm.sh
# with simd128 (the module as built: its kernel tier) and without (the scalar-only build)
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128" \
  cargo clippy -p cera-wasm --target wasm32-unknown-unknown --locked -- -D warnings
cargo clippy -p cera-wasm --target wasm32-unknown-unknown --locked -- -D warnings
# the threads build's exports (abi.rs) compile only there
CARGO_TARGET_WASM32_WASIP1_THREADS_RUSTFLAGS="-C target-feature=+simd128 -C link-arg=--max-memory=4294967296" \
  cargo clippy -p cera-wasm --target wasm32-wasip1-threads --locked -- -D warnings
command -v node >/dev/null || {
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq nodejs
}
model_path() { ./target/release/cera models | awk -v m="$1" '$1 == m { print $NF; exit }'; }
CERA_BIN="$PWD/target/release/cera" CERA_TEST_MODEL="$(model_path smollm2-135m-instruct-q4_1)" \
  CERA_TEST_TOOLS_MODEL="$(model_path qwen2.5-coder-0.5b-instruct-q4_k_m)" \
  node --test crates/cera-wasm/tests/node.test.mjs
# the same tests on the threads build, its kernels on two threads (the simd128 module: Node 20
# has no relaxed SIMD to speak of, so the loader picks that one; Chromium's turn is below)
CERA_WASM_THREADS=2 CERA_BIN="$PWD/target/release/cera" \
  CERA_TEST_MODEL="$(model_path smollm2-135m-instruct-q4_1)" \
  CERA_TEST_TOOLS_MODEL="$(model_path qwen2.5-coder-0.5b-instruct-q4_k_m)" \
  node --test crates/cera-wasm/tests/node.test.mjs
step "browser: the cera-wasm page in headless Chromium (puppeteer-core), screenshot in target/browser"
command -v chromium >/dev/null || {
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq chromium
}
(cd crates/cera-wasm/tests/browser && npm ci --no-audit --no-fund --loglevel=error)
# the simd128 tier built with relaxed SIMD (the threads build's second module, which the page
# loads in Chromium), bit for bit against the scalar tier, in Chromium's engine: Node 20 has
# relaxed SIMD only behind a flag, and there its 8-bit dot product is twice the sum. (Without
# the model file: no file system in a page.)
CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" \
  CARGO_TARGET_WASM32_WASIP1_RUNNER="node $PWD/crates/cera-wasm/tests/browser/wasi-run.mjs" \
  CERA_EXPECT_TIERS=scalar,simd128 cargo test -p cera --no-default-features --locked \
  --target wasm32-wasip1 --target-dir target/wasm-relaxed --test kernels -- --skip real_model_tensors
CERA_BIN="$PWD/target/release/cera" CERA_TEST_MODEL="$(model_path smollm2-135m-instruct-q4_1)" \
  node --test crates/cera-wasm/tests/browser/page.test.mjs
done_with target/wasm-relaxed target/wasm32-wasip1-threads target/wasm32-unknown-unknown
step "kotlin: UniFFI bindings generated, compiled with kotlinc, tests/kotlin/bindings.kts"
bash scripts/kotlin-test.sh
step "parity: the same greedy tokens through Rust, the CLI, Python, Kotlin and WebAssembly (Node)"
bash scripts/parity.sh
step "done"
