#!/usr/bin/env bash
# Builds cera-wasm's npm package into crates/cera-wasm/pkg/ (cera.js, cera.d.ts, cera_bg.wasm,
# package.json) from a clean checkout: the wasm32 target and wasm-bindgen-cli (the version the
# crate pins, under target/tools) are installed when missing. The module is built with WASM
# SIMD (`simd128`, every current browser and Node has it).
#
# The one-thread module also runs models on WebGPU through `cera-webgpu.js` (the core's GPU
# backend; see that file).
#
# Beside it, the threads build: the same crate for `wasm32-wasip1-threads` (stable Rust's one
# target whose standard library has threads over shared memory; wasm-bindgen does not build
# there, so `crates/cera-wasm/js/cera-threads.js` wraps its exports in the same classes) as
# cera_threads.wasm, with its kernel-thread worker and WASI shim. Its memory may grow to 4 GiB
# (the target's default maximum is 1 GiB). And that once more with relaxed SIMD
# (cera_threads_relaxed.wasm: exact 8-bit dot products in one instruction), which
# cera-threads.js loads where the engine validates relaxed SIMD.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
for t in wasm32-unknown-unknown wasm32-wasip1-threads; do
  rustup target list --installed | grep -q "^$t\$" || rustup target add "$t"
done
WB_VERSION=$(sed -n 's/^wasm-bindgen = "=\(.*\)"$/\1/p' crates/cera-wasm/Cargo.toml)
WB=target/tools/bin/wasm-bindgen
if ! [ -x "$WB" ] || [ "$("$WB" --version | awk '{print $2}')" != "$WB_VERSION" ]; then
  echo "-- installing wasm-bindgen-cli $WB_VERSION into target/tools"
  # (not --locked: the registry may lack an exact version its lock file names; no TLS and
  # only the one binary: a third less to compile)
  # A tool, not what we ship: unoptimized it compiles in 110 CPU-seconds where level 1 took
  # 240 (and level 3 twice that), and binds our module in 3.7 s instead of 1.2 (the same
  # bytes out). Never linted (scripts/test.sh's clippy wrapper is for our crates).
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
    cargo install -q wasm-bindgen-cli --version "$WB_VERSION" --root target/tools \
    --no-default-features --bin wasm-bindgen
fi
echo "-- cargo build (wasm32-unknown-unknown, simd128) at $((SECONDS - T0)) s"
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128" \
  CARGO_PROFILE_RELEASE_DEBUG=0 \
  cargo build --release --locked -p cera-wasm --target wasm32-unknown-unknown
echo "-- cargo build (wasm32-wasip1-threads, simd128) at $((SECONDS - T0)) s"
CARGO_TARGET_WASM32_WASIP1_THREADS_RUSTFLAGS="-C target-feature=+simd128 -C link-arg=--max-memory=4294967296" \
  CARGO_PROFILE_RELEASE_DEBUG=0 \
  cargo build --release --locked -p cera-wasm --target wasm32-wasip1-threads
out=crates/cera-wasm/pkg
rm -rf "$out"
"$WB" --target web --out-dir "$out" --out-name cera \
  target/wasm32-unknown-unknown/release/cera_wasm.wasm
echo "-- cargo build (wasm32-wasip1-threads, simd128 + relaxed-simd) at $((SECONDS - T0)) s"
# (its own target dir: other flags, and switching one dir between them rebuilds everything)
CARGO_TARGET_WASM32_WASIP1_THREADS_RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd -C link-arg=--max-memory=4294967296" \
  CARGO_PROFILE_RELEASE_DEBUG=0 \
  cargo build --release --locked -p cera-wasm --target wasm32-wasip1-threads --target-dir target/wasm-relaxed
cp target/wasm32-wasip1-threads/release/cera_wasm.wasm "$out/cera_threads.wasm"
cp target/wasm-relaxed/wasm32-wasip1-threads/release/cera_wasm.wasm "$out/cera_threads_relaxed.wasm"
cp crates/cera-wasm/js/cera-threads.js crates/cera-wasm/js/cera-threads.d.ts \
  crates/cera-wasm/js/thread-worker.js crates/cera-wasm/js/wasi.js crates/cera-wasm/js/classes.js \
  crates/cera-wasm/js/cera-webgpu.js crates/cera-wasm/js/cera-webgpu.d.ts "$out/"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
cat > "$out/package.json" <<JSON
{
  "name": "cera-wasm",
  "version": "$version",
  "description": "Cera LLM inference in the browser and in Node (WebAssembly)",
  "license": "Apache-2.0",
  "type": "module",
  "main": "cera.js",
  "types": "cera.d.ts",
  "exports": {
    ".": { "types": "./cera.d.ts", "default": "./cera.js" },
    "./threads": { "types": "./cera-threads.d.ts", "default": "./cera-threads.js" },
    "./webgpu": { "types": "./cera-webgpu.d.ts", "default": "./cera-webgpu.js" },
    "./*": "./*"
  },
  "files": ["cera.js", "cera.d.ts", "cera_bg.wasm", "cera_bg.wasm.d.ts", "cera-threads.js",
    "cera-threads.d.ts", "cera_threads.wasm", "cera_threads_relaxed.wasm", "thread-worker.js",
    "wasi.js", "classes.js", "cera-webgpu.js", "cera-webgpu.d.ts"],
  "sideEffects": false
}
JSON
echo "-- $out: $(du -h "$out/cera_bg.wasm" | cut -f1) module, $(du -h "$out/cera_threads.wasm" | cut -f1) threads build, built in $((SECONDS - T0)) s"
