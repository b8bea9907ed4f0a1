// The page in headless Chromium (Debian's `chromium`, driven by puppeteer-core): served with
// COOP/COEP by web/serve.mjs on loopback, it loads SmolLM2 from a URL in its worker, streams a
// raw greedy completion equal to the CLI's, stops a generation with the stop button, and leaves
// a screenshot (target/browser/page.png) showing the reply. Then the page on WebGPU
// (`?device=gpu`: Chromium's software adapter, SwiftShader, headless) streams the completion
// the CLI's GPU backend gives (`--device gpu`, on Mesa's lavapipe here): the same kernels.
//
//   CERA_BIN=target/release/cera CERA_TEST_MODEL=SmolLM2.gguf node --test crates/cera-wasm/tests/browser/
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdirSync, existsSync, statSync, readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";
import { wav } from "../media-files.mjs";

const model = process.env.CERA_TEST_MODEL;
const cli = process.env.CERA_BIN;
const mmproj = process.env.CERA_MMPROJ;
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
if (!model || !cli || !mmproj) {
  throw new Error("set CERA_TEST_MODEL, CERA_MMPROJ (GGUF files: the model, an mmproj as wide) and CERA_BIN (the cera binary)");
}
if (!existsSync(chromium)) throw new Error(`${chromium} missing: apt-get install chromium (or set CHROMIUM)`);
const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../../../..");
const shots = resolve(repo, "target/browser");
mkdirSync(shots, { recursive: true });

// the server on a free loopback port
const server = spawn(process.execPath, [resolve(here, "../../web/serve.mjs"), "0", dirname(resolve(model))], {
  stdio: ["ignore", "pipe", "inherit"],
});
const base = await new Promise((ok, fail) => {
  server.stdout.on("data", (d) => {
    const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(String(d));
    if (m) ok(m[1]);
  });
  server.on("exit", (c) => fail(new Error(`serve.mjs exited with ${c}`)));
});
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  // (WebGPU on the software adapter: headless Chromium's GPU process runs SwiftShader)
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--enable-unsafe-webgpu"],
});
after(async () => {
  await browser.close();
  server.kill();
});

const page = await browser.newPage();
await page.setViewport({ width: 1000, height: 800 });
const errors = [];
page.on("pageerror", (e) => errors.push(String(e)));

test("the page loads the model in its worker, cross-origin isolated", { timeout: 180_000 }, async () => {
  await page.goto(`${base}/web/?model=/models/${encodeURIComponent(basename(model))}`);
  await page.waitForFunction(() => ["loaded", "error"].includes(document.body.dataset.state), { timeout: 170_000 });
  const state = await page.evaluate(() => [document.body.dataset.state, document.getElementById("status").textContent]);
  assert.equal(state[0], "loaded", state[1]);
  assert.match(state[1], /^llama, 49152 tokens/);
  assert.equal(await page.evaluate(() => self.crossOriginIsolated), true);
  // cross-origin isolated on a machine with several cores: the threads build, on all of them
  const cores = await page.evaluate(() => navigator.hardwareConcurrency);
  const want = Math.min(cores, 16);
  assert.match(state[1], new RegExp(`, ${want} threads? \\(`), `${cores} cores`);
  // Chromium's relaxed SIMD is exact: the loader picks the relaxed-SIMD module
  if (want > 1) assert.match(state[1], /\(relaxed SIMD\)/);
});

async function send(prompt, { raw, temp, max }) {
  await page.evaluate(
    (raw, temp, max) => {
      document.getElementById("raw").checked = raw;
      document.getElementById("temp").value = String(temp);
      document.getElementById("max").value = String(max);
    },
    raw,
    temp,
    max,
  );
  await page.type("#prompt", prompt);
  await page.click("#send");
}

test("a raw greedy completion streams the CLI's text (scalar tier)", { timeout: 180_000 }, async () => {
  const prompt = "The capital of France is";
  // 12 tokens, as the Node test: the 16th is a near-tie ("311" or "321" million) that the
  // simd128 build's vector exponentials (not libm's) can tip either way
  const n = 12;
  const want = execFileSync(cli, ["run", "-m", model, "--raw", "--temp", "0", "-n", String(n), "-p", prompt], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "ignore"],
    // WebAssembly runs the scalar kernels: the CLI on that tier gives the same logits up to
    // libm's last bits (its SIMD tiers sum in other orders and part at a near-tie sooner)
    env: { ...process.env, CERA_CPU_TIER: "scalar" },
  });
  await send(prompt, { raw: true, temp: 0, max: n });
  await page.waitForFunction(() => ["done", "error"].includes(document.body.dataset.state), { timeout: 170_000 });
  const [state, reply, speed] = await page.evaluate(() => {
    const r = [...document.querySelectorAll(".assistant")].pop();
    return [document.body.dataset.state, r.textContent, document.getElementById("speed").textContent];
  });
  assert.equal(state, "done", await page.evaluate(() => document.getElementById("status").textContent));
  assert.equal(reply, want);
  assert.match(speed, new RegExp(`^${n} tokens, [0-9.]+ tokens/s \\(length\\)`));
  console.log(`browser: ${speed}`);
  // the reply is on screen: a visible box with the text, captured in the screenshot
  const box = await page.evaluate(() => {
    const r = [...document.querySelectorAll(".assistant")].pop().getBoundingClientRect();
    return { w: r.width, h: r.height, top: r.top, bottom: r.bottom };
  });
  assert.ok(box.w > 100 && box.h > 10 && box.top >= 0 && box.bottom <= 800, JSON.stringify(box));
  const shot = resolve(shots, "page.png");
  await page.screenshot({ path: shot });
  assert.ok(statSync(shot).size > 10_000, "the screenshot is nearly empty");
});

test("the stop button stops a generation", { timeout: 180_000 }, async () => {
  await send("Write a long story about a lighthouse keeper.", { raw: false, temp: 0.8, max: 400 });
  await page.waitForFunction(() => ([...document.querySelectorAll(".assistant")].pop().textContent.length > 20), {
    timeout: 170_000,
  });
  await page.click("#stop");
  await page.waitForFunction(() => ["done", "error"].includes(document.body.dataset.state), { timeout: 170_000 });
  const speed = await page.evaluate(() => document.getElementById("speed").textContent);
  assert.match(speed, /\(cancelled\)$/);
  assert.deepEqual(errors, []);
});

test("on WebGPU the page streams the CLI's GPU completion", { timeout: 300_000 }, async () => {
  const prompt = "The capital of France is";
  // few tokens: SwiftShader runs a SmolLM2 token in seconds on two cores
  const n = 6;
  const want = execFileSync(
    cli,
    ["run", "-m", model, "--device", "gpu", "--raw", "--temp", "0", "-n", String(n), "-p", prompt],
    { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] },
  );
  const gpu = await browser.newPage();
  const gpuErrors = [];
  gpu.on("pageerror", (e) => gpuErrors.push(String(e)));
  await gpu.goto(`${base}/web/?device=gpu&model=/models/${encodeURIComponent(basename(model))}`);
  await gpu.waitForFunction(() => ["loaded", "error"].includes(document.body.dataset.state), { timeout: 120_000 });
  const status = await gpu.evaluate(() => [document.body.dataset.state, document.getElementById("status").textContent]);
  assert.equal(status[0], "loaded", status[1]);
  assert.match(status[1], /^llama, 49152 tokens, GPU \(WebGPU\)/);
  await gpu.evaluate((n) => {
    document.getElementById("raw").checked = true;
    document.getElementById("temp").value = "0";
    document.getElementById("max").value = String(n);
  }, n);
  await gpu.type("#prompt", prompt);
  await gpu.click("#send");
  // the text streams: a piece is on screen before the reply is done
  await gpu.waitForFunction(() => [...document.querySelectorAll(".assistant")].pop()?.textContent.length > 0, {
    timeout: 240_000,
  });
  const streamed = await gpu.evaluate(() => document.body.dataset.state);
  await gpu.waitForFunction(() => ["done", "error"].includes(document.body.dataset.state), { timeout: 240_000 });
  const [state, reply, speed] = await gpu.evaluate(() => [
    document.body.dataset.state,
    [...document.querySelectorAll(".assistant")].pop().textContent,
    document.getElementById("speed").textContent,
  ]);
  assert.equal(state, "done", await gpu.evaluate(() => document.getElementById("status").textContent));
  assert.equal(streamed, "generating");
  assert.equal(reply, want);
  assert.match(speed, new RegExp(`^${n} tokens, [0-9.]+ tokens/s \\(length\\)`));
  console.log(`browser, WebGPU (SwiftShader): ${speed}`);
  await gpu.screenshot({ path: resolve(shots, "page-webgpu.png") });
  assert.deepEqual(gpuErrors, []);
  await gpu.close();
});

test("in a page, an image the browser drew and an audio clip enter through an mmproj as the CLI reads them", {
  timeout: 240_000,
}, async () => {
  const p = await browser.newPage();
  const pageErrors = [];
  p.on("pageerror", (e) => pageErrors.push(String(e)));
  await p.goto(`${base}/web/index.html`);
  const clip = wav(
    Array.from({ length: 12000 }, (_, i) => 0.3 * Math.sin(i / 7) * Math.exp(-i / 9000)),
    24000,
  );
  const n = 6;
  // the module on the page's thread: the model fetched, the mmproj and clip handed in, the
  // image drawn on a canvas and encoded by the browser's own PNG encoder
  const out = await p.evaluate(
    async (modelUrl, mmB64, clipB64, n) => {
      const lib = await import("/pkg/cera.js");
      await lib.default();
      const bytes = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      const engine = lib.Engine.fromBytes(new Uint8Array(await (await fetch(modelUrl)).arrayBuffer()));
      const mm = engine.loadMmproj(bytes(mmB64));
      const canvas = new OffscreenCanvas(96, 64);
      const g = canvas.getContext("2d");
      const grad = g.createLinearGradient(0, 0, 96, 64);
      grad.addColorStop(0, "#1060c0");
      grad.addColorStop(1, "#f0a020");
      g.fillStyle = grad;
      g.fillRect(0, 0, 96, 64);
      g.fillStyle = "#ffffff";
      g.fillRect(20, 16, 30, 30);
      const png = new Uint8Array(await (await canvas.convertToBlob({ type: "image/png" })).arrayBuffer());
      const s = engine.session({ nCtx: 1024 });
      const positions = [s.appendImage(mm, png), s.appendAudio(mm, bytes(clipB64))];
      const r = s.generate("Describe it.", { maxTokens: n, temperature: 0 });
      let b = "";
      for (const x of png) b += String.fromCharCode(x);
      return { png: btoa(b), text: r.text, positions };
    },
    `/models/${encodeURIComponent(basename(model))}`,
    Buffer.from(readFileSync(mmproj)).toString("base64"),
    Buffer.from(clip).toString("base64"),
    n,
  );
  const dir = mkdtempSync(join(tmpdir(), "cera-page-media-"));
  writeFileSync(join(dir, "drawn.png"), Buffer.from(out.png, "base64"));
  writeFileSync(join(dir, "clip.wav"), clip);
  const want = execFileSync(
    cli,
    ["run", "-m", model, "--mmproj", mmproj, "--image", join(dir, "drawn.png"), "--audio", join(dir, "clip.wav"),
      "--raw", "--temp", "0", "-n", String(n), "-p", "<__media__><__media__>Describe it."],
    { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], env: { ...process.env, CERA_CPU_TIER: "scalar" } },
  );
  assert.ok(out.positions[0] > 4 && out.positions[1] > 2, JSON.stringify(out.positions));
  assert.equal(out.text, want);
  assert.deepEqual(pageErrors, []);
  await p.close();
});
