// Runs a wasm32-wasip1 program (a test binary, an example) under Node's WASI, as cargo's runner:
//
//   CARGO_TARGET_WASM32_WASIP1_RUNNER="node --single-threaded-gc $PWD/scripts/wasi-run.mjs" \
//     cargo test --target wasm32-wasip1 ...
//
// (`--single-threaded-gc`: Node 20 crashed at exit, now and then, after a program had read a
// model of a few hundred MB into its memory; with the collector on the main thread it never did.)
// The program sees the host's file system at `/` (tests read fixtures by absolute path, as
// `env!("CARGO_MANIFEST_DIR")` gives them), the environment (CERA_CPU_TIER and the like), its
// arguments (libtest's filters), and its exit code goes back to cargo.
import { readFile } from "node:fs/promises";
import { argv, cwd, env, exit } from "node:process";

// Node 20 flags WASI as experimental on every start; that line would land in every test log.
process.removeAllListeners("warning");
const { WASI } = await import("node:wasi");

const [file, ...args] = argv.slice(2);
if (!file) {
  console.error("usage: wasi-run.mjs PROGRAM.wasm [ARGS...]");
  exit(2);
}
const wasi = new WASI({
  version: "preview1",
  args: [file, ...args],
  // wasi-libc resolves relative paths against PWD
  env: { ...env, PWD: cwd() },
  preopens: { "/": "/" },
  returnOnExit: true,
});
const module = await WebAssembly.compile(await readFile(file));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
process.exitCode = wasi.start(instance);
