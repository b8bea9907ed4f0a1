// The WASI (preview 1) functions the threads build imports, over its shared memory, for the
// browser and Node alike: clocks, random bytes, stdout/stderr to the console, the environment
// the caller gives; no files (every file call fails with ENOSYS or EBADF, which the library
// never makes). Each instance (the engine's and every kernel thread's) gets its own set.
//
// Shared memory cannot back TextDecoder or crypto.getRandomValues in browsers, so bytes pass
// through ordinary copies.

const ESUCCESS = 0;
const EBADF = 8;
const ENOSYS = 52;

export class WasiExit extends Error {
  constructor(code) {
    super(`the WebAssembly program exited with code ${code}`);
    this.code = code;
  }
}

/// `memory`: the instance's memory, or a function returning it (for a module that exports its
/// own, known only once instantiated). `names`: the module's imports from
/// `wasi_snapshot_preview1` (all get a function: the ones below, ENOSYS for the rest). `env`:
/// an object of environment variables; `args`: the program's arguments (a test runner's).
export function wasiImports(memory, names, env = {}, args = []) {
  const mem = typeof memory === "function" ? memory : () => memory;
  const u8 = () => new Uint8Array(mem().buffer);
  const dv = () => new DataView(mem().buffer);
  const enc = new TextEncoder();
  const dec = new TextDecoder();
  const strings = (list) => list.map((s) => enc.encode(`${s}\0`));
  const sizes = (list) => (count, bufSize) => {
    dv().setUint32(count, list.length, true);
    dv().setUint32(bufSize, list.reduce((n, b) => n + b.length, 0), true);
    return ESUCCESS;
  };
  const fill = (list) => (ptrs, buf) => {
    let at = buf;
    list.forEach((b, i) => {
      dv().setUint32(ptrs + 4 * i, at, true);
      u8().set(b, at);
      at += b.length;
    });
    return ESUCCESS;
  };
  const envBytes = strings(Object.entries(env).map(([k, v]) => `${k}=${v}`));
  const argBytes = strings(args);
  const lines = { 1: [], 2: [] };
  const flush = (fd, text) => (fd === 1 ? console.log(text) : console.error(text));
  const impl = {
    args_sizes_get: sizes(argBytes),
    args_get: fill(argBytes),
    environ_sizes_get: sizes(envBytes),
    environ_get: fill(envBytes),
    clock_time_get(id, _precision, out) {
      // realtime from Date; monotonic from performance.timeOrigin + now, which is the same
      // clock in every worker (each worker's performance.now() alone starts at its own origin)
      const ns = id === 0 ? Date.now() * 1e6 : (performance.timeOrigin + performance.now()) * 1e6;
      dv().setBigUint64(out, BigInt(Math.round(ns)), true);
      return ESUCCESS;
    },
    random_get(ptr, len) {
      for (let at = 0; at < len; at += 65536) {
        const chunk = new Uint8Array(Math.min(65536, len - at));
        crypto.getRandomValues(chunk);
        u8().set(chunk, ptr + at);
      }
      return ESUCCESS;
    },
    fd_write(fd, iovs, n, written) {
      if (fd !== 1 && fd !== 2) return EBADF;
      let total = 0;
      for (let i = 0; i < n; i++) {
        const p = dv().getUint32(iovs + 8 * i, true);
        const len = dv().getUint32(iovs + 8 * i + 4, true);
        lines[fd].push(u8().slice(p, p + len));
        total += len;
      }
      // whole lines to the console (a panic's message arrives in several writes)
      const all = new Uint8Array(lines[fd].reduce((s, b) => s + b.length, 0));
      let at = 0;
      for (const b of lines[fd]) {
        all.set(b, at);
        at += b.length;
      }
      const text = dec.decode(all);
      const cut = text.lastIndexOf("\n");
      if (cut >= 0) {
        flush(fd, text.slice(0, cut));
        lines[fd] = [enc.encode(text.slice(cut + 1))];
      } else {
        lines[fd] = [all];
      }
      dv().setUint32(written, total, true);
      return ESUCCESS;
    },
    fd_fdstat_get(fd, out) {
      if (fd > 2) return EBADF;
      const d = dv();
      d.setUint8(out, 2); // a character device
      d.setUint16(out + 2, 0, true);
      d.setBigUint64(out + 8, 0n, true);
      d.setBigUint64(out + 16, 0n, true);
      return ESUCCESS;
    },
    fd_prestat_get: () => EBADF, // no preopened directories
    fd_prestat_dir_name: () => EBADF,
    fd_close: () => EBADF,
    fd_sync: () => EBADF,
    sched_yield: () => ESUCCESS,
    proc_exit(code) {
      throw new WasiExit(code);
    },
  };
  const out = {};
  for (const name of names) out[name] = impl[name] ?? (() => ENOSYS);
  return out;
}
