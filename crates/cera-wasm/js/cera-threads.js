// cera-wasm's threads build: the same classes as `cera.js` (the one-thread build that
// wasm-bindgen makes), over the module built for `wasm32-wasip1-threads`, whose kernels run on
// several threads through shared memory and WebAssembly atomics.
//
//   import init, { Engine } from "cera-wasm/cera-threads.js";
//   await init({ threads: navigator.hardwareConcurrency });   // once, before anything else
//   const engine = Engine.fromBytes(bytes);
//
// Needs SharedArrayBuffer: in a browser a cross-origin isolated page (COOP/COEP headers), and
// the engine called from a Web Worker (its thread waits on the kernel threads with
// Atomics.wait, which a page's main thread may not do). Node needs nothing. The kernel threads
// are workers started by `init` (`threads` − 1 of them, plus spares): a browser (and Node)
// starts a worker only when the thread creating it is idle, so they cannot be started on
// demand while the engine's thread waits for them. Engines and models of one thread count share
// one kernel pool; the spares serve pools of other counts, and a pool finding none free runs on
// fewer threads.
import { argBytes, makeClasses } from "./classes.js";
import { wasiImports } from "./wasi.js";

const isNode = typeof process === "object" && typeof process.versions?.node === "string";
const enc = new TextEncoder();
const dec = new TextDecoder();

let W = null; // the instance, once `init` is done
let emitTo = null; // the running call's onToken
let emitError = null; // what it threw

/// The module's memory import limits (pages), read from its import section: the memory the
/// instances share must be created with them.
function memoryLimits(bytes) {
  let at = 8;
  const leb = () => {
    let v = 0;
    let shift = 0;
    for (;;) {
      const b = bytes[at++];
      v += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if (b < 0x80) return v;
    }
  };
  const name = () => {
    const n = leb();
    at += n;
  };
  while (at < bytes.length) {
    const id = bytes[at++];
    const size = leb();
    const end = at + size;
    if (id === 2) {
      for (let n = leb(); n > 0; n--) {
        name();
        name();
        const kind = bytes[at++];
        if (kind === 0) leb();
        else if (kind === 1) {
          at++;
          const f = bytes[at++];
          leb();
          if (f & 1) leb();
        } else if (kind === 2) {
          const flags = bytes[at++];
          const initial = leb();
          const maximum = flags & 1 ? leb() : undefined;
          return { initial, maximum };
        } else if (kind === 3) at += 2;
        else break;
      }
    }
    at = end;
  }
  throw new Error("cera: the module imports no memory (is it the threads build?)");
}

async function moduleBytes(source) {
  if (source instanceof Uint8Array || source instanceof ArrayBuffer) return new Uint8Array(source);
  if (typeof Response !== "undefined" && source instanceof Response) {
    return new Uint8Array(await source.arrayBuffer());
  }
  const url = source instanceof URL ? source : new URL(source, import.meta.url);
  if (isNode && url.protocol === "file:") {
    const { readFile } = await import("node:fs/promises");
    return new Uint8Array(await readFile(url));
  }
  const r = await fetch(url);
  if (!r.ok) throw new Error(`cera: ${url}: HTTP ${r.status}`);
  return new Uint8Array(await r.arrayBuffer());
}

/// Whether the engine has relaxed SIMD with an exact 8-bit dot product: a module of one
/// function computing `i32x4.relaxed_dot_i8x16_i7x16_add_s` of known bytes, run. (Validating
/// alone is not enough: Node 20's experimental relaxed SIMD, `--experimental-wasm-relaxed-simd`,
/// returns twice the dot product.)
export function hasRelaxedSimd() {
  const section = (id, bytes) => [id, bytes.length, ...bytes];
  const zero = [0xfd, 0x0c, ...new Array(16).fill(0)];
  const load = (at) => [0x41, at, 0xfd, 0x00, 0x00, 0x00];
  // mem[32..48] = relaxed_dot(mem[0..16], mem[16..32], 0)
  const body = [0x00, 0x41, 32, ...load(0), ...load(16), ...zero, 0xfd, 0x93, 0x02, 0xfd, 0x0b, 0x00, 0x00, 0x0b];
  const bytes = new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    ...section(1, [1, 0x60, 0, 0]), // a type: () -> ()
    ...section(3, [1, 0]), // one function of it
    ...section(5, [1, 0, 1]), // one page of memory
    ...section(7, [2, 1, 0x66, 0, 0, 1, 0x6d, 2, 0]), // exports "f", "m"
    ...section(10, [1, body.length, ...body]),
  ]);
  if (!WebAssembly.validate(bytes)) return false;
  try {
    const { exports } = new WebAssembly.Instance(new WebAssembly.Module(bytes));
    const a = [-128, 127, -3, 5, 1, 2, 3, 4, -1, -2, -3, -4, 10, -10, 20, -20];
    const b = [127, 127, 7, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
    const m = new Int8Array(exports.m.buffer);
    m.set(a, 0);
    m.set(b, 16);
    exports.f();
    const got = Array.from(new Int32Array(exports.m.buffer, 32, 4));
    const want = [0, 1, 2, 3].map((i) => [0, 1, 2, 3].reduce((s, j) => s + a[4 * i + j] * b[4 * i + j], 0));
    return got.join() === want.join();
  } catch {
    return false;
  }
}

function defaultThreads() {
  const n = typeof navigator !== "undefined" ? navigator.hardwareConcurrency : undefined;
  return Math.max(1, Math.min(n || 4, 16));
}

/// Loads the module and starts its kernel threads. Options: `module_or_path` (the .wasm's
/// bytes, a Response or a URL; default beside this file `cera_threads_relaxed.wasm` where the
/// engine has relaxed SIMD, else `cera_threads.wasm`; `relaxed: false` picks the latter), `threads` (the
/// kernels' threads, the engine's own included; default the machine's cores, at most 16),
/// `spares` (workers for kernel pools of other thread counts, default `threads`), `env` (environment
/// variables the library reads, such as CERA_CPU_TIER).
export default async function init(options = {}) {
  if (W) return W.info;
  if (typeof SharedArrayBuffer === "undefined") {
    throw new Error(
      "cera: the threads build needs SharedArrayBuffer (serve the page cross-origin isolated: " +
        "COOP same-origin and COEP require-corp), or use cera.js",
    );
  }
  const { module_or_path, env = {} } = options;
  const threads = Math.max(1, Math.floor(options.threads ?? defaultThreads()));
  const spares = Math.max(0, Math.floor(options.spares ?? threads));
  const relaxed = (options.relaxed ?? true) && hasRelaxedSimd();
  const file = relaxed ? "./cera_threads_relaxed.wasm" : "./cera_threads.wasm";
  const bytes = await moduleBytes(module_or_path ?? new URL(file, import.meta.url));
  const limits = memoryLimits(bytes);
  const module = await WebAssembly.compile(bytes);
  const memory = new WebAssembly.Memory({ ...limits, shared: true });
  const NodeWorker = isNode ? (await import("node:worker_threads")).Worker : null;
  const workerUrl = new URL("./thread-worker.js", import.meta.url);
  const n = threads - 1 + spares;
  const busy = new Int32Array(new SharedArrayBuffer(4 * 64));
  const workers = [];
  const startWorker = () => {
    const index = workers.length;
    if (index >= busy.length) throw new Error("cera: more than 64 kernel threads");
    const w = isNode ? new NodeWorker(workerUrl) : new Worker(workerUrl, { type: "module" });
    if (isNode) w.unref(); // the threads wait forever for work; they must not keep Node alive
    const ready = new Promise((resolve, reject) => {
      const onMessage = (m) => (m.type === "ready" ? resolve() : undefined);
      if (isNode) {
        w.once("message", onMessage);
        w.once("error", reject);
      } else {
        w.addEventListener("message", (e) => onMessage(e.data));
        w.addEventListener("error", (e) => reject(new Error(`cera: a kernel thread's worker failed: ${e.message}`)));
      }
    });
    w.postMessage({ type: "init", module, memory, env, busy: busy.buffer, index });
    workers.push(w);
    return ready;
  };
  let nextTid = 1;
  const spawn = (arg) => {
    let i = workers.findIndex((_, j) => Atomics.compareExchange(busy, j, 0, 1) === 0);
    // none free: EAGAIN, and the kernel pool asking runs on the threads it got. A new worker
    // would not do: neither Node nor a browser starts one while this thread waits inside the
    // call, which it does until the pool's threads are up (a hang, seen in Node)
    if (i < 0) return -6;
    const tid = nextTid++;
    workers[i].postMessage({ type: "run", tid, arg });
    return tid;
  };
  const wasiNames = WebAssembly.Module.imports(module)
    .filter((i) => i.module === "wasi_snapshot_preview1")
    .map((i) => i.name);
  const instance = await WebAssembly.instantiate(module, {
    env: { memory },
    wasi_snapshot_preview1: wasiImports(memory, wasiNames, env),
    wasi: { "thread-spawn": spawn },
    cera: {
      emit(ptr, len) {
        if (!emitTo) return 1;
        const piece = dec.decode(new Uint8Array(memory.buffer, ptr >>> 0, len >>> 0).slice());
        try {
          return emitTo(piece) === false ? 0 : 1;
        } catch (e) {
          emitError = e; // stops the generation; thrown once the call returns
          return 0;
        }
      },
    },
  });
  instance.exports.cera_init();
  await Promise.all(Array.from({ length: n }, startWorker));
  const info = { threads, workers: n, module: module_or_path ? "given" : file.slice(2) };
  W = { exports: instance.exports, memory, threads, info, trapped: null };
  return W.info;
}

function check() {
  if (!W) throw new Error("cera: call `await init()` from cera-threads.js first");
  return W;
}

/// Calls `method` of object `h` (0: none) with `args` (JSON-encoded) or `raw` bytes. A call
/// made from inside a callback (a token callback asking `engine.tokenize`) keeps the outer
/// call's callback for the rest of it.
function call(h, method, args, raw, onToken) {
  const w = check();
  if (w.trapped) {
    throw new Error(`cera: the module stopped at an earlier failure (${w.trapped}); load it again`);
  }
  const { exports: x, memory } = w;
  const m = enc.encode(method);
  const a = argBytes(method, args, raw);
  const mp = x.cera_alloc(m.length) >>> 0;
  const ap = x.cera_alloc(a.length) >>> 0;
  const [outerEmit, outerError] = [emitTo, emitError];
  let code;
  let thrown = null;
  try {
    new Uint8Array(memory.buffer, mp, m.length).set(m);
    new Uint8Array(memory.buffer, ap, a.length).set(a);
    emitTo = onToken ?? null;
    emitError = null;
    code = x.cera_call(h, mp, m.length, ap, a.length);
  } catch (e) {
    // a trap (a panic aborts in WebAssembly): the library's state is lost
    w.trapped = String(e && e.message ? e.message : e);
    throw new Error(`cera: ${method} failed inside the module (${w.trapped}); load it again`);
  } finally {
    thrown = emitError;
    [emitTo, emitError] = [outerEmit, outerError];
    if (!w.trapped) {
      x.cera_dealloc(mp, m.length);
      x.cera_dealloc(ap, a.length);
    }
  }
  const p = x.cera_result_ptr() >>> 0;
  const len = x.cera_result_len() >>> 0;
  const bytes = new Uint8Array(memory.buffer, p, len).slice();
  if (thrown) throw thrown;
  if (code === 1) throw new Error(dec.decode(bytes));
  if (code === 2) return bytes;
  return len ? JSON.parse(dec.decode(bytes)) : null;
}

const api = makeClasses(call, () => check().memory, () => [W.threads, "cpu"]);
export const { ModelLoader, Engine, Mmproj, Session, Chat, Whisper, version } = api;
