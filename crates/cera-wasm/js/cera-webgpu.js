// cera-wasm on WebGPU: the one-thread module (cera_bg.wasm, the module cera.js loads) with the
// core's GPU backend on the browser's WebGPU. The classes are cera.js's, but the methods that
// may wait for the GPU return promises (`finish`, `fromBytes`, `generate`, `complete`,
// `ingest`, `ingestToolResult`, `embed`, `reset`, `checkpoint`, `restore`).
//
//   import init, { Engine } from "cera-wasm/cera-webgpu.js";
//   await init();                                   // once, before anything else
//   const engine = await Engine.fromBytes(bytes);   // on the GPU
//   const r = await engine.session().generate("The sky is", { maxTokens: 32 }, (p) => …);
//
// How: the engine's steps are synchronous, and WebGPU answers (the adapter, a buffer mapped
// for reading the logits back) only once the event loop runs. JavaScript Promise Integration
// (`WebAssembly.Suspending` / `WebAssembly.promising`, Chrome 137 and later) lets a synchronous
// WebAssembly call wait for a promise: the module imports a function that returns after one
// turn of the event loop (instantiated as `Suspending`), the GPU backend calls it while it
// waits, and the waiting methods enter through `promising`. Needs WebGPU (`navigator.gpu`).
import initBindgen from "./cera.js";
import { argBytes, makeClasses } from "./classes.js";

const enc = new TextEncoder();
const dec = new TextDecoder();
/// The methods that may wait for the GPU (the others never suspend, and stay synchronous).
const ASYNC = new Set([
  "finish",
  "generate",
  "complete",
  "ingest",
  "ingestToolResult",
  "embed",
  "reset",
  "checkpoint",
  "restore",
  "appendImage",
  "appendAudio",
]);

let W = null; // { x: the exports, promisingCall, device, info }
let running = null; // the waiting call's method, while one is suspended or settling
let emitTo = null; // the running call's onToken
let emitError = null; // what it threw
let inEmit = 0; // depth of token callbacks running (calls from inside one may run)

/// Whether this engine has JavaScript Promise Integration.
export function hasJspi() {
  return typeof WebAssembly.Suspending === "function" && typeof WebAssembly.promising === "function";
}

/// A promise settled by the next task (a message to ourselves: timers are clamped to 4 ms
/// when nested, and a decode step waits several times).
const nextTask = (() => {
  let channel = null;
  const waiting = [];
  return () =>
    new Promise((resolve) => {
      if (!channel) {
        channel = new MessageChannel();
        channel.port1.onmessage = () => waiting.shift()?.(0);
      }
      waiting.push(resolve);
      channel.port2.postMessage(0);
    });
})();

/// Loads the module with its GPU waits suspending, and opens nothing yet (the adapter is
/// requested when a model loads). Options: `module_or_path` (default `cera_bg.wasm` beside this
/// file), `device` (where models load: "gpu", the default, "auto" or "cpu").
export default async function init(options = {}) {
  if (W) return W.info;
  if (!hasJspi()) {
    throw new Error(
      "cera: the WebGPU build needs JavaScript Promise Integration (WebAssembly.Suspending, " +
        "Chrome 137 or later); use cera.js (the CPU) here",
    );
  }
  const device = options.device ?? "gpu";
  if (device !== "cpu" && !globalThis.navigator?.gpu) {
    throw new Error("cera: this browser has no WebGPU (navigator.gpu); use cera.js (the CPU) here");
  }
  let source = options.module_or_path ?? new URL("./cera_bg.wasm", import.meta.url);
  if (!(source instanceof WebAssembly.Module)) {
    const r = source instanceof Response ? source : await fetch(source);
    if (!r.ok) throw new Error(`cera: ${r.url}: HTTP ${r.status}`);
    source = await WebAssembly.compile(await r.arrayBuffer());
  }
  // wasm-bindgen's loader builds the imports; the host-yield import is swapped for a
  // suspending one on the way to instantiation (the only way to reach it)
  const instantiate = WebAssembly.instantiate;
  let swapped = false;
  WebAssembly.instantiate = (module, imports) => {
    // (wasm-bindgen's import module is named after the glue file: `./cera_bg.js`)
    for (const ns of Object.values(imports)) {
      for (const k of Object.keys(ns)) {
        if (k.startsWith("__wbg___ceraHostYield")) {
          ns[k] = new WebAssembly.Suspending(nextTask);
          swapped = true;
        }
      }
    }
    return instantiate.call(WebAssembly, module, imports);
  };
  let x;
  try {
    x = await initBindgen({ module_or_path: source });
  } finally {
    WebAssembly.instantiate = instantiate;
  }
  if (!swapped) {
    throw new Error("cera: the module was already loaded by cera.js; load it through cera-webgpu.js first");
  }
  globalThis.__ceraEmit = (piece) => {
    if (!emitTo) return 1;
    inEmit++;
    try {
      return emitTo(piece) === false ? 0 : 1;
    } catch (e) {
      emitError = e; // stops the generation; thrown once the call returns
      return 0;
    } finally {
      inEmit--;
    }
  };
  x.cera_init();
  W = { x, promisingCall: WebAssembly.promising(x.cera_call), device, info: { device } };
  return W.info;
}

function check() {
  if (!W) throw new Error("cera: call `await init()` from cera-webgpu.js first");
  return W;
}

/// Copies the method and arguments in, calls `invoke(mp, ml, ap, al)` (the synchronous export
/// or its promising wrapper), then reads the result out.
function call(h, method, args, raw, onToken) {
  const w = check();
  if (running && inEmit === 0) {
    // (a call from inside a token callback runs inside the waiting call, and may)
    throw new Error(`cera: ${method} while ${running} waits for the GPU: await it first`);
  }
  const { x } = w;
  const m = enc.encode(method);
  const a = argBytes(method, args, raw);
  const mp = x.cera_alloc(m.length) >>> 0;
  const ap = x.cera_alloc(a.length) >>> 0;
  new Uint8Array(x.memory.buffer, mp, m.length).set(m);
  new Uint8Array(x.memory.buffer, ap, a.length).set(a);
  const finish = (code) => {
    x.cera_dealloc(mp, m.length);
    x.cera_dealloc(ap, a.length);
    const p = x.cera_result_ptr() >>> 0;
    const len = x.cera_result_len() >>> 0;
    const bytes = new Uint8Array(x.memory.buffer, p, len).slice();
    if (code === 1) throw new Error(dec.decode(bytes));
    if (code === 2) return bytes;
    return len ? JSON.parse(dec.decode(bytes)) : null;
  };
  if (!ASYNC.has(method)) return finish(x.cera_call(h, mp, m.length, ap, a.length));
  const outer = [emitTo, emitError, running];
  emitTo = onToken ?? null;
  emitError = null;
  running = method;
  const restore = () => {
    const thrown = emitError;
    [emitTo, emitError, running] = outer;
    return thrown;
  };
  let pending;
  try {
    pending = w.promisingCall(h, mp, m.length, ap, a.length);
  } catch (e) {
    restore();
    throw e;
  }
  return pending.then(
    (code) => {
      // (read before anything else runs: the result buffer is the next call's too)
      const thrown = restore();
      const r = finish(code);
      if (thrown) throw thrown;
      return r;
    },
    (e) => {
      restore();
      throw new Error(`cera: ${method} failed inside the module (${e?.message ?? e})`);
    },
  );
}

const api = makeClasses(call, () => check().x.memory, () => [1, W.device]);
export const { ModelLoader, Engine, Mmproj, Session, Chat, Whisper, version } = api;
