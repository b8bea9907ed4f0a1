// Runs a wasm32-wasip1 program (a test binary, an example) in headless Chromium, as cargo's
// runner, for what Node's engine cannot run: the relaxed-SIMD kernels (Node 20 has relaxed SIMD
// only behind a flag, and there its 8-bit dot product returns twice the sum).
//
//   CARGO_TARGET_WASM32_WASIP1_RUNNER="node $PWD/crates/cera-wasm/tests/browser/wasi-run.mjs" \
//     cargo test --target wasm32-wasip1 ...
//
// The program gets its arguments (libtest's filters), the CERA_* environment variables, the
// console as stdout/stderr (through the WASI shim of the threads build, js/wasi.js), and no
// files; its exit code goes back to cargo. The page is served on loopback, cross-origin
// isolated.
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";

const [file, ...args] = process.argv.slice(2);
if (!file) {
  console.error("usage: wasi-run.mjs PROGRAM.wasm [ARGS...]");
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const shim = await readFile(resolve(here, "../../js/wasi.js"));
const program = await readFile(file);
const server = createServer((req, res) => {
  const body = { "/": "<!doctype html><title>wasi</title>", "/wasi.js": shim, "/program.wasm": program }[req.url];
  const type = { "/": "text/html", "/wasi.js": "text/javascript", "/program.wasm": "application/wasm" }[req.url];
  if (body === undefined) {
    res.writeHead(404).end();
    return;
  }
  // cross-origin isolated: Chromium's clock then ticks in 5 µs, not 100 µs (bench_dot's timings)
  res
    .writeHead(200, {
      "content-type": type,
      "cross-origin-opener-policy": "same-origin",
      "cross-origin-embedder-policy": "require-corp",
    })
    .end(body);
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const base = `http://127.0.0.1:${server.address().port}`;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
let code = 1;
try {
  const page = await browser.newPage();
  page.on("console", (m) => (m.type() === "error" ? process.stderr : process.stdout).write(m.text() + "\n"));
  page.on("pageerror", (e) => process.stderr.write(`page error: ${e}\n`));
  await page.goto(base);
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith("CERA_")));
  code = await page.evaluate(
    async (args, env) => {
      const { wasiImports, WasiExit } = await import("/wasi.js");
      const module = await WebAssembly.compileStreaming(fetch("/program.wasm"));
      const names = WebAssembly.Module.imports(module)
        .filter((i) => i.module === "wasi_snapshot_preview1")
        .map((i) => i.name);
      let instance = null;
      const wasi = wasiImports(() => instance.exports.memory, names, env, ["program.wasm", ...args]);
      instance = await WebAssembly.instantiate(module, { wasi_snapshot_preview1: wasi });
      try {
        instance.exports._start();
        return 0;
      } catch (e) {
        if (e instanceof WasiExit) return e.code;
        console.error(String(e && e.stack ? e.stack : e));
        return 101;
      }
    },
    args,
    env,
  );
} finally {
  await browser.close();
  server.close();
}
process.exit(code);
