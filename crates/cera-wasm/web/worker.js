// The engine's thread: the page posts { type: "load", url | file }, { type: "generate", … }
// and { type: "reset" }; this worker answers with progress, pieces of text, and the result.
// A stop from the page sets a flag in shared memory that the token callback reads (the page is
// cross-origin isolated, so SharedArrayBuffer exists); without it, stop waits for the reply.
// A cross-origin isolated page asking for more than one thread gets the threads build
// (cera-threads.js: the kernels on several workers), any other the one-thread build; asked for
// the GPU, the one-thread build on WebGPU (cera-webgpu.js, whose waiting methods return
// promises: every call below is awaited, which the other builds' plain values allow).

let lib = null;
let kernels = "SIMD"; // the module's kernels: simd128, or with relaxed SIMD as well

let engine = null;
let chat = null;
let stopFlag = null;

const post = (m) => self.postMessage(m);

async function readAll(source) {
  // a URL is streamed in chunks into a loader sized from Content-Length; a File likewise
  let total;
  let reader;
  if (source.url) {
    const r = await fetch(source.url);
    if (!r.ok) throw new Error(`${source.url}: HTTP ${r.status}`);
    total = Number(r.headers.get("content-length"));
    reader = r.body.getReader();
  } else {
    total = source.file.size;
    reader = source.file.stream().getReader();
  }
  if (!(total > 0)) throw new Error("the model's size is unknown (no Content-Length)");
  const loader = new lib.ModelLoader(total);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    loader.push(value);
    post({ type: "progress", received: loader.received, total });
  }
  return await loader.finish();
}

self.onmessage = async (e) => {
  const m = e.data;
  try {
    if (m.type === "load") {
      if (!lib) {
        const threads = Math.max(1, Math.min(m.threads || 1, 16));
        if (m.device === "gpu") {
          lib = await import("../pkg/cera-webgpu.js");
          await lib.default({ device: "gpu" });
          kernels = "WebGPU";
        } else if (self.crossOriginIsolated && threads > 1) {
          lib = await import("../pkg/cera-threads.js");
          kernels = (await lib.default({ threads })).module.includes("relaxed") ? "relaxed SIMD" : "SIMD";
        } else {
          lib = await import("../pkg/cera.js");
          await lib.default();
        }
      }
      stopFlag = m.stop ? new Int32Array(m.stop) : null;
      const t0 = performance.now();
      engine = await readAll(m);
      chat = engine.chat({ nCtx: 2048 });
      post({
        type: "loaded",
        architecture: engine.architecture,
        threads: engine.threads,
        kernels,
        nVocab: engine.nVocab,
        ms: performance.now() - t0,
      });
    } else if (m.type === "generate") {
      if (!engine) throw new Error("load a model first");
      if (stopFlag) Atomics.store(stopFlag, 0, 0);
      const onToken = (piece) => {
        post({ type: "piece", piece });
        return !(stopFlag && Atomics.load(stopFlag, 0) === 1);
      };
      const t0 = performance.now();
      let result;
      if (m.raw) {
        // a raw completion of the prompt alone (no chat template), as `cera run --raw`
        const s = engine.session({ nCtx: 2048 });
        result = await s.generate(m.prompt, m.opts, onToken);
        s.free();
        result.completionTokens = result.tokens.length;
      } else {
        await chat.ingest("user", m.prompt);
        result = await chat.complete(m.opts, onToken);
      }
      post({ type: "done", result, ms: performance.now() - t0 });
    } else if (m.type === "reset") {
      if (chat) await chat.reset();
      post({ type: "reset" });
    }
  } catch (err) {
    post({ type: "error", message: String(err && err.message ? err.message : err) });
  }
};
post({ type: "ready" });
