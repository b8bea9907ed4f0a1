#!/usr/bin/env bash
# The whole test suite, from a fresh clone: formatting, lints, the models the tests need
# (fetched through the project's own fetch step), then every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "error: cargo (Rust 1.95+) is required" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 with pip is required to fetch models" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== fetching test models"
cargo build --release --locked -p cera-cli
for m in smollm2-135m-instruct-q4_1 qwen2.5-coder-0.5b-instruct-q4_k_m; do
  ./target/release/cera pull "$m"
done
cargo run --release --locked -q -p cera --example fetch_test_data
echo "== cargo test"
cargo test --workspace --locked
