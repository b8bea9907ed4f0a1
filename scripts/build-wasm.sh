#!/usr/bin/env bash
# Builds cera-wasm's npm package into crates/cera-wasm/pkg/ (cera.js, cera.d.ts, cera_bg.wasm,
# package.json) from a clean checkout: the wasm32 target and wasm-bindgen-cli (the version the
# crate pins, under target/tools) are installed when missing. The module is built with WASM
# SIMD (`simd128`, every current browser and Node has it).
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
rustup target list --installed | grep -q '^wasm32-unknown-unknown$' ||
  rustup target add wasm32-unknown-unknown
WB_VERSION=$(sed -n 's/^wasm-bindgen = "=\(.*\)"$/\1/p' crates/cera-wasm/Cargo.toml)
WB=target/tools/bin/wasm-bindgen
if ! [ -x "$WB" ] || [ "$("$WB" --version | awk '{print $2}')" != "$WB_VERSION" ]; then
  echo "-- installing wasm-bindgen-cli $WB_VERSION into target/tools"
  # (not --locked: the registry may lack an exact version its lock file names; no TLS and
  # only the one binary: a third less to compile)
  cargo install -q wasm-bindgen-cli --version "$WB_VERSION" --root target/tools \
    --no-default-features --bin wasm-bindgen
fi
echo "-- cargo build (wasm32-unknown-unknown, simd128) at $((SECONDS - T0)) s"
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128" \
  CARGO_PROFILE_RELEASE_DEBUG=0 \
  cargo build --release --locked -p cera-wasm --target wasm32-unknown-unknown
out=crates/cera-wasm/pkg
rm -rf "$out"
"$WB" --target web --out-dir "$out" --out-name cera \
  target/wasm32-unknown-unknown/release/cera_wasm.wasm
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
  "files": ["cera.js", "cera.d.ts", "cera_bg.wasm", "cera_bg.wasm.d.ts"],
  "sideEffects": false
}
JSON
echo "-- $out: $(du -h "$out/cera_bg.wasm" | cut -f1) module, built in $((SECONDS - T0)) s"
