// The threads build has the classes of the one-thread build (cera.d.ts); only `init` differs.
export { Chat, Engine, Mmproj, ModelLoader, Session, Whisper, version } from "./cera.js";

export interface InitOptions {
  /** The module: its bytes, a Response, or a URL (default: cera_threads.wasm beside this file). */
  module_or_path?: Uint8Array | ArrayBuffer | Response | URL | string;
  /** Threads the kernels run on, the engine's own included (default: the cores, at most 16). */
  threads?: number;
  /** false: the plain simd128 module even where the engine has relaxed SIMD. */
  relaxed?: boolean;
  /** Workers started for kernel pools of other thread counts (default: `threads`; engines of
   * one thread count share a pool, and a pool finding no free worker runs on fewer threads). */
  spares?: number;
  /** Environment variables the library reads (CERA_CPU_TIER, …). */
  env?: Record<string, string>;
}

/** Loads the module and starts the kernel threads' workers; call once, before anything else. */
export default function init(
  options?: InitOptions,
): Promise<{ threads: number; workers: number; module: string }>;
