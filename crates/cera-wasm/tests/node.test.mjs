// cera-wasm in Node (`node --test`), against the native CLI: SmolLM2 loaded from bytes gives
// the CLI's greedy completion, a JSON-Schema turn gives JSON that validates, a tool call comes
// back parsed, an image and an audio clip through an mmproj give the CLI's completion with the
// same files, and bad input is an error naming what is wrong.
//
//   CERA_BIN=target/release/cera CERA_TEST_MODEL=SmolLM2.gguf CERA_TEST_TOOLS_MODEL=Qwen2.5.gguf \
//     CERA_MMPROJ=mmproj.gguf node --test crates/cera-wasm/tests/
//
// (CERA_MMPROJ: a random-weight mmproj as wide as SmolLM2 with a vision and an audio half:
// `make_mmproj OUT 576 f16 tiny+audio`; CERA_WHISPER: the catalog's whisper-tiny.en GGUF)
//
// With CERA_WASM_THREADS=N the same tests run on the threads build (`cera-threads.js`, the
// kernels on N threads), which must give the same results.
//
// (the tool call takes Qwen2.5-Coder-0.5B: SmolLM2 keeps calling tools until its budget ends)
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { png, wav } from "./media-files.mjs";

const threads = Number(process.env.CERA_WASM_THREADS || 0);
const lib = threads ? await import("../pkg/cera-threads.js") : await import("../pkg/cera.js");
const { Engine, ModelLoader } = lib;

const model = process.env.CERA_TEST_MODEL;
const toolsModel = process.env.CERA_TEST_TOOLS_MODEL;
const cli = process.env.CERA_BIN;
const mmprojPath = process.env.CERA_MMPROJ;
const whisperPath = process.env.CERA_WHISPER;
if (!model || !toolsModel || !cli || !mmprojPath || !whisperPath) {
  throw new Error(
    "set CERA_TEST_MODEL, CERA_TEST_TOOLS_MODEL, CERA_MMPROJ, CERA_WHISPER (GGUF files) and CERA_BIN (the cera binary)",
  );
}
let loaded = null;
if (threads) {
  loaded = await lib.default({ threads });
} else {
  lib.initSync({ module: readFileSync(new URL("../pkg/cera_bg.wasm", import.meta.url)) });
}
const bytes = readFileSync(model);
const engine = Engine.fromBytes(bytes);

test("the kernels run on the threads asked for", () => {
  assert.equal(engine.threads, threads || 1);
  assert.equal(engine.backend, "CPU");
  if (threads) {
    // the loader's choice of module follows the engine's (exact) relaxed SIMD
    const relaxed = lib.hasRelaxedSimd();
    assert.equal(loaded.module, relaxed ? "cera_threads_relaxed.wasm" : "cera_threads.wasm");
  }
});

test("the WebGPU loader says what this engine lacks", async () => {
  // Node has neither JavaScript Promise Integration (unflagged) nor navigator.gpu; the browser
  // test runs the WebGPU build itself
  const gpu = await import("../pkg/cera-webgpu.js");
  await assert.rejects(gpu.default(), /needs JavaScript Promise Integration|has no WebGPU/);
});

test("greedy completion equals the CLI's (scalar tier)", () => {
  const prompt = "The capital of France is";
  const n = 12;
  const want = execFileSync(cli, ["run", "-m", model, "--raw", "--temp", "0", "-n", String(n), "-p", prompt], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "ignore"],
    // WebAssembly runs the scalar kernels: the CLI on that tier gives the same logits up to
    // libm's last bits (its SIMD tiers sum in other orders and part at a near-tie sooner)
    env: { ...process.env, CERA_CPU_TIER: "scalar" },
  });
  const pieces = [];
  const r = engine.session({ nCtx: 256 }).generate(prompt, { maxTokens: n, temperature: 0 }, (p) => {
    pieces.push(p);
  });
  assert.equal(r.text, want);
  assert.equal(pieces.join(""), want);
  assert.equal(r.tokens.length, n);
  assert.equal(r.finishReason, "length");
});

test("a chunked load equals a whole one; the callback can stop", () => {
  const loader = new ModelLoader(bytes.length);
  for (let at = 0; at < bytes.length; at += 7 << 20) {
    loader.push(bytes.subarray(at, Math.min(at + (7 << 20), bytes.length)));
  }
  assert.equal(loader.received, bytes.length);
  const e2 = loader.finish();
  assert.equal(e2.nVocab, engine.nVocab);
  assert.equal(e2.architecture, "llama");
  let calls = 0;
  const s2 = e2.session({});
  const r = s2.generate("Once upon a time", { maxTokens: 20, temperature: 0 }, () => ++calls < 3);
  assert.equal(calls, 3);
  assert.equal(r.finishReason, "cancelled");
  assert.deepEqual(
    engine.tokenize("Hello world", false, false),
    e2.tokenize("Hello world", false, false),
  );
  // four engines alive at once, each running: on the threads build engines of one thread
  // count share one kernel pool (three workers were started for two threads: a pool each
  // would need four and hang the next call)
  const more = [Engine.fromBytes(bytes), Engine.fromBytes(bytes)];
  for (const e of [engine, e2, ...more]) {
    assert.equal(e.threads, threads || 1);
    const s = e.session({});
    const g = s.generate("Once upon a time", { maxTokens: 2, temperature: 0 });
    assert.equal(g.text.length > 0, true);
    s.free();
  }
  for (const e of more) e.free();
  s2.free();
  e2.free();
  assert.equal(engine.detokenize(engine.tokenize("Hello world", false, false)), "Hello world");
});

test("a callback's exception stops generation and is rethrown; a callback may call the engine", () => {
  let calls = 0;
  assert.throws(
    () =>
      engine.session({ nCtx: 256 }).generate("Once upon a time", { maxTokens: 20, temperature: 0 }, () => {
        if (++calls === 2) throw new Error("stop here");
      }),
    /stop here/,
  );
  assert.equal(calls, 2);
  const pieces = [];
  const counts = [];
  const r = engine.session({ nCtx: 256 }).generate("Once upon a time", { maxTokens: 6, temperature: 0 }, (p) => {
    pieces.push(p);
    counts.push(engine.tokenize(p, false, false).length);
  });
  // the outer generation kept streaming after each inner call
  assert.equal(pieces.join(""), r.text);
  assert.ok(pieces.length >= 5 && counts.every((n) => n >= 1), JSON.stringify(counts));
});

test("a checkpoint brings a session back; reset empties it", () => {
  const s = engine.session({ nCtx: 256 });
  s.generate("Once upon a time", { maxTokens: 4, temperature: 0 });
  const saved = s.checkpoint();
  const before = Array.from(s.tokens());
  const next = s.generate(" and", { maxTokens: 4, temperature: 0 }).text;
  s.restore(saved);
  assert.deepEqual(Array.from(s.tokens()), before);
  assert.equal(s.generate(" and", { maxTokens: 4, temperature: 0 }).text, next);
  s.reset();
  assert.equal(s.tokens().length, 0);
  assert.throws(() => s.restore(new Uint8Array([1, 2, 3])), /checkpoint|short|magic|truncated/i);
});

test("a JSON Schema reply validates", () => {
  const schema = {
    type: "object",
    properties: { name: { type: "string" }, age: { type: "integer" } },
    required: ["name", "age"],
    additionalProperties: false,
  };
  const chat = engine.chat({ nCtx: 512 });
  chat.ingest("user", "Make up a person with a name and an age, as JSON.");
  const r = chat.complete({ maxTokens: 64, temperature: 0, jsonSchema: schema });
  const v = JSON.parse(r.text);
  assert.deepEqual(Object.keys(v).sort(), ["age", "name"]);
  assert.equal(typeof v.name, "string");
  assert.ok(Number.isInteger(v.age));
});

test("a tool call comes back parsed", () => {
  const qwen = Engine.fromBytes(readFileSync(toolsModel));
  const chat = qwen.chat({ nCtx: 1024 });
  chat.setTools([
    {
      type: "function",
      function: {
        name: "get_weather",
        description: "The current weather in a city",
        parameters: {
          type: "object",
          properties: { city: { type: "string" } },
          required: ["city"],
        },
      },
    },
  ]);
  chat.ingest("user", "What is the weather in Paris?");
  const r = chat.complete({ maxTokens: 64, temperature: 0, toolChoice: "get_weather" });
  assert.equal(r.toolCalls.length, 1, JSON.stringify(r));
  assert.equal(r.toolCalls[0].name, "get_weather");
  assert.equal(typeof r.toolCalls[0].arguments.city, "string");
  // the result goes back in by the call's id, and the model answers in text
  chat.ingestToolResult(r.toolCalls[0].id, JSON.stringify({ temp_c: 18, sky: "clear" }));
  const answer = chat.complete({ maxTokens: 16, temperature: 0 });
  assert.equal(answer.toolCalls.length, 0);
  assert.ok(answer.text.length > 0);
  chat.free();
  qwen.free();
});

test("generateBatch runs several prompts in shared steps, each as it runs alone", async () => {
  const prompts = ["The capital of France is", "Once upon a time", "def fibonacci(n):"];
  const opts = { maxTokens: 8, temperature: 0 };
  const batch = await engine.generateBatch(prompts, opts, { nCtx: 128 });
  assert.equal(batch.length, prompts.length);
  for (let i = 0; i < prompts.length; i++) {
    const alone = await engine.session({ nCtx: 128 }).generate(prompts[i], opts);
    assert.equal(batch[i].text, alone.text, `prompt ${i}`);
    assert.deepEqual(Array.from(batch[i].tokens), Array.from(alone.tokens));
    assert.equal(batch[i].finishReason, "length");
    assert.equal(batch[i].promptTokens, engine.tokenize(prompts[i], true, false).length);
  }
  assert.deepEqual(await engine.generateBatch([], opts, {}), []);
  assert.throws(() => engine.generateBatch(["x", "word ".repeat(40)], opts, { nCtx: 16 }), /context/i);
  assert.throws(() => engine.generateBatch(["x"], { maxTokenz: 2 }, {}), /maxTokenz/);
});

test("bad input is an error naming what is wrong", () => {
  assert.throws(() => Engine.fromBytes(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8])), /GGUF|magic|short|truncated/i);
  assert.throws(() => engine.session({ nCtxx: 5 }), /nCtxx/);
  assert.throws(() => engine.session({}).generate("x", { maxTokens: 1, topP: 2 }), /topP/);
  assert.throws(() => engine.detokenize([engine.nVocab + 5]), /past the vocabulary/);
  assert.throws(() => new ModelLoader(8 * 2 ** 30), /GiB/);
  const small = new ModelLoader(4);
  assert.throws(() => small.push(new Uint8Array(5)), /more than the 4 announced/);
  assert.throws(() => new ModelLoader(4).finish(), /0 of 4 bytes/);
  const s = engine.session({ nCtx: 16 });
  assert.throws(() => s.generate("word ".repeat(40), { maxTokens: 4 }), /context/i);
});

test("an image and an audio clip give the CLI's completion with the same files", () => {
  const dir = mkdtempSync(join(tmpdir(), "cera-wasm-media-"));
  const img = png(80, 60);
  // a second at 22.05 kHz: decoded and resampled to 16 kHz by the module, as by the CLI
  const tone = Array.from({ length: 22050 }, (_, i) => 0.4 * Math.sin((2 * Math.PI * 440 * i) / 22050) * Math.exp(-i / 15000));
  const clip = wav(tone, 22050);
  writeFileSync(join(dir, "img.png"), img);
  writeFileSync(join(dir, "clip.wav"), clip);
  // 4 tokens: the 6th is a near-tie ("is" or "was") that the simd128 module's sums, in
  // another order than the CLI's scalar tier, tip the other way
  const n = 4;
  const want = execFileSync(
    cli,
    ["run", "-m", model, "--mmproj", mmprojPath, "--image", join(dir, "img.png"), "--audio", join(dir, "clip.wav"),
      "--raw", "--temp", "0", "-n", String(n), "-p", "<__media__><__media__>Describe it."],
    { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], env: { ...process.env, CERA_CPU_TIER: "scalar" } },
  );
  const mm = engine.loadMmproj(readFileSync(mmprojPath));
  assert.equal(mm.vision, true);
  assert.equal(mm.audio, true);
  assert.equal(mm.nEmbd, 576);
  const s = engine.session({ nCtx: 1024 });
  const ni = s.appendImage(mm, img);
  const na = s.appendAudio(mm, clip);
  assert.ok(ni > 4 && na > 2, `${ni} image and ${na} audio positions`);
  assert.equal(s.tokens().length, ni + na); // (the first with BOS)
  const r = s.generate("Describe it.", { maxTokens: n, temperature: 0 });
  assert.equal(r.text, want);
  // 16 kHz samples as a Float32Array enter as the same clip written to a 16 kHz WAV file
  // (values k / 32768: exactly what a decoder reads back from the WAV's 16-bit samples)
  const at16 = Float32Array.from({ length: 8000 }, (_, i) => Math.round(0.3 * Math.sin(i / 9) * 32768) / 32768);
  const a = engine.session({ nCtx: 1024 });
  a.appendAudio(mm, at16);
  const b = engine.session({ nCtx: 1024 });
  b.appendAudio(mm, wav(Array.from(at16), 16000));
  assert.equal(a.generate("", { maxTokens: 4, temperature: 0 }).text, b.generate("", { maxTokens: 4, temperature: 0 }).text);
  // bad media: named
  assert.throws(() => s.appendImage(mm, new Uint8Array([0xff, 0xd8, 0xff, 1, 2])), /JPEG|image/i);
  assert.throws(() => s.appendAudio(mm, new Uint8Array([82, 73, 70, 70, 0, 0])), /WAV|audio|RIFF/i);
  assert.throws(() => s.appendAudio(mm, "clip.wav"), /Uint8Array|Float32Array/);
  assert.throws(() => engine.loadMmproj(readFileSync(model)), /clip/);
  mm.free();
  // (wasm-bindgen's classes say "null pointer passed to rust" of a freed object)
  assert.throws(() => s.appendImage(mm, img), /freed|null pointer/);
});

test("Whisper transcribes as whisper.cpp does", () => {
  const jfkPath = new URL("../../cera/tests/fixtures/whisper/jfk.wav", import.meta.url);
  const jfk = new Uint8Array(readFileSync(jfkPath));
  // greedy, no timestamps, no fallback: one pass of the encoder and the decoder, whose text is
  // whisper.cpp's on the same weights (the fixture of crates/cera/tests/whisper.rs). One
  // transcription: without the AVX-512 panel kernels a 30-second window's encoder takes this
  // module tens of seconds on one thread
  const fixture = JSON.parse(
    readFileSync(new URL("../../cera/tests/fixtures/whisper/tiny.en.json", import.meta.url), "utf8"),
  );
  const want = fixture.clips["jfk.wav"].text;
  const w = lib.Whisper.fromBytes(readFileSync(whisperPath));
  assert.equal(w.multilingual, false);
  const greedy = { beamSize: 1, bestOf: 1, timestamps: false, fallback: false };
  const r = w.transcribe(jfk, greedy);
  assert.equal(r.text, want.trim());
  assert.equal(r.language, "en");
  assert.ok(Math.abs(r.duration - 11) < 0.1, `${r.duration}`);
  assert.equal(r.segments.length, 1);
  // what it refuses, by name (before any audio is decoded)
  assert.throws(() => w.transcribe(jfk, { beamSize: 0 }), /beam size/);
  assert.throws(() => w.transcribe(jfk, { beamsize: 1 }), /beamsize/);
  assert.throws(() => w.transcribe(jfk, { ...greedy, responseFormat: "srt" }), /timestamps/);
  assert.throws(() => w.transcribe(jfk, { ...greedy, responseFormat: "docx" }), /docx/);
  assert.throws(() => w.transcribe(new Uint8Array([82, 73, 70, 70, 0, 0]), greedy), /WAV|audio|RIFF/i);
  assert.throws(() => w.transcribe(new Float32Array(0), greedy), /no audio/);
  assert.throws(() => w.transcribe("jfk.wav", greedy), /Uint8Array|Float32Array/);
  assert.throws(() => w.transcribe(jfk, { ...greedy, translate: true }), /English-only/);
  assert.throws(() => lib.Whisper.fromBytes(readFileSync(model)), /whisper/);
  w.free();
});
