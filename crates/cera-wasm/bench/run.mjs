// cera-wasm against wllama (@wllama/wllama, llama.cpp in WebAssembly) in the same headless
// Chromium, same model, greedy, interleaved rounds: prefill and decode tokens/s, medians.
// Each runs on one thread and on THREADS (the page is cross-origin isolated): cera-wasm's
// one-thread build (cera.js) and its threads build (cera-threads.js), wllama with n_threads.
//
//   cd crates/cera-wasm/bench && npm ci && node run.mjs MODEL.gguf [ROUNDS] [THREADS]
import { spawn } from "node:child_process";
import { basename, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";

const [model, roundsArg, threadsArg] = process.argv.slice(2);
if (!model) throw new Error("usage: run.mjs MODEL.gguf [ROUNDS] [THREADS]");
const rounds = Number(roundsArg || 3);
const mt = Number(threadsArg || 2);
const here = dirname(fileURLToPath(import.meta.url));
const server = spawn(process.execPath, [resolve(here, "../web/serve.mjs"), "0", dirname(resolve(model))], {
  stdio: ["ignore", "pipe", "inherit"],
});
const base = await new Promise((ok) => server.stdout.on("data", (d) => {
  const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d));
  if (m) ok(m[1]);
}));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
// ~128 prompt tokens
const prompt = "The history of the lighthouse begins in the ancient world, where fires were lit on hills to guide ships. ".repeat(6);
async function one(engine, threads, relaxed) {
  const page = await browser.newPage();
  const q = new URLSearchParams({ engine, model: `/models/${basename(model)}`, threads, relaxed, prompt, n: 64 });
  await page.goto(`${base}/bench/bench.html?${q}`);
  await page.waitForFunction(() => window.result, { timeout: 600_000 });
  const r = await page.evaluate(() => window.result);
  await page.close();
  if (r.error) throw new Error(`${engine}: ${r.error}`);
  return r;
}
// cera-N-plain: the threads build's simd128 module where the engine has relaxed SIMD as well
const runs = { "cera-1": [], [`cera-${mt}`]: [], [`cera-${mt}-plain`]: [], "wllama-1": [], [`wllama-${mt}`]: [] };
for (let i = 0; i < rounds; i++) {
  for (const k of Object.keys(runs)) {
    const [engine, t, plain] = k.split("-");
    runs[k].push(await one(engine, Number(t), plain ? "0" : "1"));
  }
  console.error(`round ${i + 1}: ` + Object.entries(runs).map(([k, v]) => `${k} pp ${v.at(-1).promptTps.toFixed(1)} tg ${v.at(-1).decodeTps.toFixed(1)}`).join(", "));
}
const median = (a) => {
  const s = a.slice().sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
console.log(`| engine | threads | prompt tokens | prefill t/s | decode t/s |`);
console.log(`| --- | ---: | ---: | ---: | ---: |`);
for (const [k, v] of Object.entries(runs)) {
  const [engine, t] = k.split("-");
  const name = engine === "cera" ? `cera-wasm (${v[0].module})` : "wllama";
  console.log(`| ${name} | ${t} | ${v[0].promptTokens} | ${median(v.map((r) => r.promptTps)).toFixed(1)} | ${median(v.map((r) => r.decodeTps)).toFixed(1)} |`);
}
await browser.close();
server.kill();
