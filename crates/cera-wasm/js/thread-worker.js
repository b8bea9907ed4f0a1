// A kernel thread of the threads build: a Web Worker (or a Node worker) holding its own
// instance of the module over the engine's shared memory. `init` instantiates it; `run`
// starts the thread the library asked for (`wasi_thread_start`, which sets up the thread's
// stack and thread-locals and runs it); when it returns, the worker is free for the next one.
import { wasiImports } from "./wasi.js";

const isNode = typeof process === "object" && typeof process.versions?.node === "string";
const port = isNode ? (await import("node:worker_threads")).parentPort : self;
const listen = (f) => (isNode ? port.on("message", f) : (port.onmessage = (e) => f(e.data)));

let instance = null;
let busy = null;
let index = -1;

listen(async (m) => {
  if (m.type === "init") {
    busy = new Int32Array(m.busy);
    index = m.index;
    const wasiNames = WebAssembly.Module.imports(m.module)
      .filter((i) => i.module === "wasi_snapshot_preview1")
      .map((i) => i.name);
    instance = await WebAssembly.instantiate(m.module, {
      env: { memory: m.memory },
      wasi_snapshot_preview1: wasiImports(m.memory, wasiNames, m.env),
      // a kernel thread starts no threads of its own (the engine's thread starts them all)
      wasi: { "thread-spawn": () => -6 },
      cera: {
        emit: () => {
          throw new Error("cera: a kernel thread cannot stream text");
        },
      },
    });
    port.postMessage({ type: "ready", index });
  } else if (m.type === "run") {
    try {
      instance.exports.wasi_thread_start(m.tid, m.arg);
    } catch (e) {
      console.error(`cera: kernel thread ${m.tid} failed: ${e && e.stack ? e.stack : e}`);
    }
    Atomics.store(busy, index, 0);
  }
});
