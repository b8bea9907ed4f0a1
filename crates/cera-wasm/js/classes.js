// The classes of cera-threads.js and cera-webgpu.js, over their module's JSON call interface
// (src/abi.rs): `call(handle, method, args, raw, onToken)` gives a method's result, or a
// promise of it where the module may wait for the GPU (cera-webgpu.js: its `ASYNC` methods).
// Every method here hands back what `call` gives, mapped: a value in the threads build, a
// promise for those methods in the WebGPU build. They are the classes cera.js (wasm-bindgen's,
// the one-thread build) has.

/// `f(v)`, or a promise of it when `v` is a promise.
const then = (v, f) => (v instanceof Promise ? v.then(f) : f(v));

const utf8 = new TextEncoder();

/// A call's argument bytes: the JSON of `args`, then, after a NUL byte (which JSON text never
/// holds), the `raw` bytes a call takes (a file's); `restore` takes its checkpoint alone.
export function argBytes(method, args, raw) {
  if (method === "restore") return raw ?? new Uint8Array(0);
  const json = args === undefined ? new Uint8Array(0) : utf8.encode(JSON.stringify(args));
  if (!raw) return json;
  const a = new Uint8Array(json.length + 1 + raw.length);
  a.set(json);
  a[json.length] = 0;
  a.set(raw, json.length + 1);
  return a;
}

/// The classes over `call`; `memory()` is the module's memory (loaders write chunks straight
/// into it) and `loadArgs()` what a loader's `finish` passes after the byte count ([threads,
/// device]).
export function makeClasses(call, memory, loadArgs) {
  const registry = new FinalizationRegistry((h) => {
    try {
      call(h, "free");
    } catch {
      // already freed, or the instance is gone
    }
  });

  class Handle {
    constructor(h) {
      this.__h = h;
      registry.register(this, h, this);
    }
    get __handle() {
      if (!this.__h) throw new Error("cera: this object was freed");
      return this.__h;
    }
    /// Frees the object now (the garbage collector would, later).
    free() {
      if (!this.__h) return;
      registry.unregister(this);
      const h = this.__h;
      this.__h = 0;
      call(h, "free");
    }
  }

  /// The engine on handle `h`, its constant facts read once.
  const engine = (h) => then(call(h, "info"), (info) => new Engine(h, info));

  /// A GGUF file received in chunks (`push` each, then `finish`): the memory is reserved once,
  /// up front, and each chunk is copied straight into it.
  class ModelLoader extends Handle {
    constructor(totalBytes) {
      const r = call(0, "loaderNew", [totalBytes]);
      super(r.handle);
      this.__ptr = r.ptr;
      this.__total = totalBytes;
      this.__received = 0;
    }
    /// Appends the next chunk of the file.
    push(chunk) {
      void this.__handle; // (throws once finished or freed)
      if (this.__received + chunk.length > this.__total) {
        throw new Error(
          `ModelLoader: ${this.__received + chunk.length} bytes pushed, more than the ${this.__total} announced`,
        );
      }
      new Uint8Array(memory().buffer, this.__ptr + this.__received, chunk.length).set(chunk);
      this.__received += chunk.length;
    }
    /// Bytes received so far.
    get received() {
      return this.__received;
    }
    /// The engine on the whole file (the loader is used up).
    finish() {
      const h = this.__handle;
      registry.unregister(this);
      this.__h = 0;
      return then(call(h, "finish", [this.__received, ...loadArgs()]), engine);
    }
    /// A Whisper model on the whole file (the loader is used up).
    finishWhisper() {
      const h = this.__handle;
      registry.unregister(this);
      this.__h = 0;
      return then(call(h, "finishWhisper", [this.__received, loadArgs()[0]]), (r) => new Whisper(r));
    }
  }

  /// Audio as a call passes it: [samples?, raw bytes].
  const audioArg = (audio) => {
    if (audio instanceof Float32Array) {
      return [true, new Uint8Array(audio.buffer, audio.byteOffset, audio.byteLength)];
    }
    if (!(audio instanceof Uint8Array)) {
      throw new TypeError("audio is a file's bytes (Uint8Array) or 16 kHz mono samples (Float32Array)");
    }
    return [false, audio];
  };

  /// A Whisper model (speech to text).
  class Whisper extends Handle {
    constructor(r) {
      super(r.handle);
      this.__info = r.info;
    }
    /// The model on a whole GGUF file's bytes (copied into WebAssembly memory).
    static fromBytes(bytes) {
      const l = new ModelLoader(bytes.length);
      l.push(bytes);
      return l.finishWhisper();
    }
    /// Transcribes a file's bytes (Uint8Array) or 16 kHz mono samples (Float32Array): OpenAI's
    /// verbose_json object, `{ text }`, or a string (`responseFormat` text, srt, vtt).
    transcribe(audio, opts) {
      const [samples, raw] = audioArg(audio);
      return call(this.__handle, "transcribe", [samples, opts ?? null], raw);
    }
    /// `[[code, p], ...]`, likeliest first (multilingual models).
    detectLanguage(audio) {
      const [samples, raw] = audioArg(audio);
      return call(this.__handle, "detectLanguage", [samples], raw);
    }
    get multilingual() {
      return this.__info.multilingual;
    }
  }

  /// A loaded model.
  class Engine extends Handle {
    constructor(h, info) {
      super(h);
      this.__info = info;
    }
    /// The engine on a whole GGUF file's bytes (copied into WebAssembly memory).
    static fromBytes(bytes) {
      const l = new ModelLoader(bytes.length);
      l.push(bytes);
      return l.finish();
    }
    /// A new session (its own context): `{ nCtx, cacheTypeK, cacheTypeV }`.
    session(opts) {
      return new Session(call(this.__handle, "session", [opts]));
    }
    /// Several prompts at once, in batched steps: `generateBatch(prompts, opts, sessionOpts)`,
    /// one result per prompt as `Session.generate` returns.
    generateBatch(prompts, opts, sessionOpts) {
      return call(this.__handle, "generateBatch", [prompts, opts, sessionOpts]);
    }
    /// A conversation with the model's chat template over a new session (same options).
    chat(opts) {
      return new Chat(call(this.__handle, "chat", [opts]));
    }
    tokenize(text, addSpecial, parseSpecial) {
      return Uint32Array.from(call(this.__handle, "tokenize", [text, addSpecial, parseSpecial]));
    }
    detokenize(ids) {
      return call(this.__handle, "detokenize", [Array.from(ids)]);
    }
    /// One pooled, normalized embedding per text, as Float32Arrays.
    embed(texts) {
      return then(call(this.__handle, "embed", [texts]), (r) => r.map((v) => Float32Array.from(v)));
    }
    /// Loads this model's multimodal projector (an mmproj GGUF's bytes: llama.cpp's
    /// `--mmproj` file), for `Session.appendImage` and `appendAudio`.
    loadMmproj(bytes) {
      return new Mmproj(call(this.__handle, "loadMmproj", [], bytes));
    }
    get nVocab() {
      return this.__info.nVocab;
    }
    get nCtxTrain() {
      return this.__info.nCtxTrain;
    }
    get architecture() {
      return this.__info.architecture;
    }
    /// The backend the model runs on: "CPU", or the GPU's ("WebGPU").
    get backend() {
      return this.__info.backend;
    }
    /// Threads the kernels run on.
    get threads() {
      return this.__info.threads;
    }
  }

  /// A loaded multimodal projector: images and audio go into sessions through it.
  class Mmproj extends Handle {
    constructor(r) {
      super(r.handle);
      this.__info = r.info;
    }
    /// Whether it reads images.
    get vision() {
      return this.__info.vision;
    }
    /// Whether it reads audio.
    get audio() {
      return this.__info.audio;
    }
    /// The width of the embeddings it hands the model.
    get nEmbd() {
      return this.__info.nEmbd;
    }
  }

  /// What sessions and chats share: emptying them, and their state as bytes and back.
  class Stateful extends Handle {
    /// Empties the context (forgets the conversation).
    reset() {
      return call(this.__handle, "reset");
    }
    /// The state as bytes (tokens, KV cache, recurrent state; a chat's messages too).
    checkpoint() {
      return call(this.__handle, "checkpoint");
    }
    /// Back to a state from `checkpoint` (of this model).
    restore(bytes) {
      return call(this.__handle, "restore", undefined, bytes);
    }
  }

  /// A sequence's context: append text, generate.
  class Session extends Stateful {
    /// As cera.js: `generate(prompt, { maxTokens, temperature, … }, (piece) => …)`; `false`
    /// from the callback stops, and what it throws stops generation and is rethrown here.
    generate(prompt, opts, onToken) {
      return call(this.__handle, "generate", [prompt, opts], undefined, onToken);
    }
    /// Appends an image (the file's bytes: JPEG, PNG, WebP, GIF) as `mmproj`'s model reads
    /// it; returns the positions it took. A later `generate` continues after it.
    appendImage(mmproj, image) {
      if (!(image instanceof Uint8Array)) throw new TypeError("an image is the file's bytes (Uint8Array)");
      return call(this.__handle, "appendImage", [mmproj.__handle], image);
    }
    /// Appends an audio clip: a file's bytes (Uint8Array: WAV, MP3, FLAC, Ogg Vorbis) or 16 kHz
    /// mono samples (Float32Array); returns the positions it took.
    appendAudio(mmproj, audio) {
      if (audio instanceof Float32Array) {
        const raw = new Uint8Array(audio.buffer, audio.byteOffset, audio.byteLength);
        return call(this.__handle, "appendAudio", [mmproj.__handle, true], raw);
      }
      if (!(audio instanceof Uint8Array)) {
        throw new TypeError("audio is a file's bytes (Uint8Array) or 16 kHz mono samples (Float32Array)");
      }
      return call(this.__handle, "appendAudio", [mmproj.__handle, false], audio);
    }
    tokens() {
      return Uint32Array.from(call(this.__handle, "tokens"));
    }
    get nCtx() {
      return call(this.__handle, "nCtx");
    }
    get engine() {
      return engine(call(this.__handle, "engine"));
    }
  }

  /// A conversation with the model's chat template.
  class Chat extends Stateful {
    ingest(role, content) {
      return call(this.__handle, "ingest", [role, content]);
    }
    ingestToolResult(id, content) {
      return call(this.__handle, "ingestToolResult", [id, content]);
    }
    setTools(tools) {
      call(this.__handle, "setTools", [tools]);
    }
    complete(opts, onToken) {
      return call(this.__handle, "complete", [opts], undefined, onToken);
    }
  }

  const version = () => call(0, "version");
  return { ModelLoader, Engine, Mmproj, Session, Chat, Whisper, version };
}
