// The WebGPU build: cera.js's classes, whose methods that may wait for the GPU return promises.
// (options and results are the plain objects cera.js takes and gives)
type SessionOptions = Record<string, unknown>;
type GenerateOptions = Record<string, unknown>;
type TurnOptions = Record<string, unknown>;
type GenerateResult = any;
type TurnResult = any;

export interface InitOptions {
  /** The module: a compiled WebAssembly.Module, a Response, or a URL (default: cera_bg.wasm beside this file). */
  module_or_path?: WebAssembly.Module | Response | URL | string;
  /** Where models load: "gpu" (WebGPU, the default), "auto" or "cpu". */
  device?: "gpu" | "auto" | "cpu";
}

/** Whether this engine has JavaScript Promise Integration (needed, with WebGPU). */
export function hasJspi(): boolean;

/** Loads the module with its GPU waits suspending; call once, before anything else. */
export default function init(options?: InitOptions): Promise<{ device: string }>;

export class ModelLoader {
  constructor(totalBytes: number);
  push(chunk: Uint8Array): void;
  readonly received: number;
  finish(): Promise<Engine>;
  finishWhisper(): Whisper;
  free(): void;
}

export class Engine {
  static fromBytes(bytes: Uint8Array): Promise<Engine>;
  session(opts?: SessionOptions): Session;
  chat(opts?: SessionOptions): Chat;
  generateBatch(prompts: string[], opts?: GenerateOptions, sessionOpts?: SessionOptions): Promise<GenerateResult[]>;
  tokenize(text: string, addSpecial: boolean, parseSpecial: boolean): Uint32Array;
  detokenize(ids: Uint32Array | number[]): string;
  embed(texts: string[]): Promise<Float32Array[]>;
  /** This model's multimodal projector (an mmproj GGUF's bytes). */
  loadMmproj(bytes: Uint8Array): Mmproj;
  readonly nVocab: number;
  readonly nCtxTrain: number;
  readonly architecture: string;
  readonly backend: string;
  readonly threads: number;
  free(): void;
}

export class Mmproj {
  readonly vision: boolean;
  readonly audio: boolean;
  readonly nEmbd: number;
  free(): void;
}

export class Session {
  /** An image file's bytes (JPEG, PNG, WebP, GIF) into the context; the positions it took. */
  appendImage(mmproj: Mmproj, image: Uint8Array): Promise<number>;
  /** An audio file's bytes (WAV, MP3, FLAC, Ogg Vorbis) or 16 kHz mono samples. */
  appendAudio(mmproj: Mmproj, audio: Uint8Array | Float32Array): Promise<number>;
  generate(prompt: string, opts?: GenerateOptions, onToken?: (piece: string) => boolean | void): Promise<GenerateResult>;
  tokens(): Uint32Array;
  readonly nCtx: number;
  readonly engine: Engine;
  reset(): Promise<void>;
  checkpoint(): Promise<Uint8Array>;
  restore(bytes: Uint8Array): Promise<void>;
  free(): void;
}

export class Chat {
  ingest(role: string, content: string): Promise<void>;
  ingestToolResult(id: string, content: string): Promise<void>;
  setTools(tools: unknown[]): void;
  complete(opts?: TurnOptions, onToken?: (piece: string) => boolean | void): Promise<TurnResult>;
  reset(): Promise<void>;
  checkpoint(): Promise<Uint8Array>;
  restore(bytes: Uint8Array): Promise<void>;
  free(): void;
}

/** Speech to text on the CPU (`cera pull whisper-tiny.en`'s GGUF): not awaited. */
export class Whisper {
  static fromBytes(bytes: Uint8Array): Whisper;
  readonly multilingual: boolean;
  transcribe(audio: Uint8Array | Float32Array, opts?: Record<string, unknown>): unknown;
  detectLanguage(audio: Uint8Array | Float32Array): [string, number][];
  free(): void;
}

export function version(): string;
