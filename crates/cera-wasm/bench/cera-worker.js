// cera-wasm's side of bench.html, in a Web Worker (the threads build's engine thread waits on
// its kernel threads, which a page's main thread may not do): { url, threads, relaxed, prompt,
// n } in, the timings out. One thread runs the one-thread build (cera.js), more the threads
// build (its relaxed-SIMD module where the engine has it, unless `relaxed` is false).
self.onmessage = async (e) => {
  const { url, threads, relaxed, prompt, n } = e.data;
  try {
    const lib = threads > 1 ? await import("../pkg/cera-threads.js") : await import("../pkg/cera.js");
    const info = await (threads > 1 ? lib.default({ threads, relaxed }) : lib.default());
    const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
    const engine = lib.Engine.fromBytes(bytes);
    engine.session({ nCtx: 1024 }).generate(prompt, { maxTokens: 4, temperature: 0 });
    const r = engine.session({ nCtx: 1024 }).generate(prompt, { maxTokens: n, temperature: 0, ignoreEos: true });
    self.postMessage({
      promptTokens: r.promptTokens,
      promptTps: r.promptTokens / (r.promptMs / 1000),
      decodeTokens: r.tokens.length,
      decodeTps: r.tokens.length / (r.decodeMs / 1000),
      text: r.text,
      threads: engine.threads,
      module: info?.module ?? "cera_bg.wasm",
    });
  } catch (err) {
    self.postMessage({ error: String(err && err.stack ? err.stack : err) });
  }
};
