//! The engine: one loaded model (immutable, mmap-backed, `Send + Sync`) with its tokenizer and
//! chat template, serving any number of sessions, alone or several in one step (`Engine::batch`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::{Backend, Cpu, Device, KvType};
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::models::Model;
use crate::tokenizer::Tokenizer;

#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct EngineOptions {
    /// Compute threads (default: one per physical core of the fastest class, see
    /// [`CpuTopology`](crate::runtime::topology::CpuTopology)).
    pub n_threads: Option<usize>,
    /// Threads of one-token (decode) steps, at most `n_threads` (default: `CERA_DECODE_THREADS`,
    /// else `n_threads`).
    pub decode_threads: Option<usize>,
    /// Which backend runs the model (default: the CPU).
    pub device: DeviceKind,
    /// Sequences the engine expects to step together (llama.cpp's `n_seq_max`, a server's
    /// parallel slots; 0 or 1: one). On a GPU each attention layer's caches of that many
    /// sessions share one buffer, made whole with the first session, so that a batched decode
    /// step stores and attends for all of them in one dispatch per layer; the CPU ignores it.
    pub n_seq_max: usize,
}

/// `--device`: where the model runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceKind {
    #[default]
    Cpu,
    /// The GPU backend (wgpu); an error when there is no usable adapter or the model needs
    /// what the GPU path lacks.
    Gpu,
    /// A hardware GPU when one is usable, else the CPU (saying why; a software renderer such
    /// as lavapipe is slower than the CPU backend, so only `Gpu` takes it).
    Auto,
}

impl std::str::FromStr for DeviceKind {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> Result<DeviceKind> {
        match s {
            "cpu" => Ok(DeviceKind::Cpu),
            "gpu" => Ok(DeviceKind::Gpu),
            "auto" => Ok(DeviceKind::Auto),
            _ => Err(crate::error::Error::Model(format!(
                "unknown device '{s}' (expected cpu, gpu or auto)"
            ))),
        }
    }
}

#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Context length in tokens (0: the model's training context, capped at 4096).
    pub n_ctx: usize,
    /// Prefill batch size: the prompt is processed in chunks of this many tokens.
    pub n_ubatch: usize,
    /// Element type of the cached keys (f16 by default, as llama.cpp).
    pub kv_type: KvType,
    /// Element type of the cached values; `None`: the same as the keys.
    pub kv_type_v: Option<KvType>,
    /// Store quantized keys and values after a Walsh–Hadamard rotation where the head size is a
    /// multiple of 64 (as llama.cpp does by default); TurboQuant types always rotate.
    pub kv_rotate: bool,
    /// When the context fills, drop half of the tokens after the first `n_keep` (plus BOS) and
    /// go on, as llama.cpp's `--context-shift`; off: an overflow is an error.
    pub context_shift: bool,
    /// Tokens the context shift keeps at the start (after BOS).
    pub n_keep: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            n_ctx: 0,
            n_ubatch: 512,
            kv_type: KvType::F16,
            kv_type_v: None,
            kv_rotate: true,
            context_shift: false,
            n_keep: 0,
        }
    }
}

pub(crate) struct EngineInner {
    pub(crate) file: Arc<GgufFile>,
    pub(crate) path: PathBuf,
    pub(crate) model: Model,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) dev: Device,
    /// Threads of the CPU work (all of it on the CPU backend; sampling and grammars on a GPU).
    pub(crate) n_threads: usize,
    /// Why `--device auto` chose the CPU, when it did.
    pub(crate) fallback: Option<String>,
    pub(crate) n_ctx_train: usize,
    /// The vocabulary as a prefix tree for grammar masks, built on first use.
    pub(crate) token_trie: std::sync::OnceLock<crate::grammar::TokenTrie>,
    /// What saved state is keyed by, computed on first use.
    pub(crate) fingerprint: std::sync::OnceLock<crate::state::Fingerprint>,
    /// Working buffers of batched steps, reused from step to step.
    pub(crate) workspaces: std::sync::Mutex<Vec<crate::models::Workspace>>,
}

impl EngineInner {
    pub(crate) fn fingerprint(&self) -> crate::state::Fingerprint {
        *self
            .fingerprint
            .get_or_init(|| crate::state::Fingerprint::of(&self.file))
    }

    pub(crate) fn token_trie(&self) -> &crate::grammar::TokenTrie {
        self.token_trie
            .get_or_init(|| crate::grammar::TokenTrie::new(&self.tokenizer))
    }
}

/// A loaded model. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<EngineInner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Engine({})", self.inner.path.display())
    }
}

impl Engine {
    pub fn load(path: impl AsRef<Path>, opts: EngineOptions) -> Result<Engine> {
        let path = path.as_ref();
        Self::with_file(GgufFile::open(path)?, path, opts)
    }

    /// A model from a GGUF file's bytes in memory (where there is no file system: WebAssembly;
    /// or a model received over a connection). [`Engine::path`] is `<memory>`.
    pub fn from_bytes(bytes: Vec<u8>, opts: EngineOptions) -> Result<Engine> {
        Self::with_file(GgufFile::from_bytes(bytes)?, Path::new("<memory>"), opts)
    }

    fn with_file(file: GgufFile, path: &Path, opts: EngineOptions) -> Result<Engine> {
        let file = Arc::new(file);
        let model = Model::load(Arc::clone(&file))?;
        let arch = file.architecture()?.to_owned();
        let n_ctx_train = file
            .get_opt::<usize>(&crate::keys::arch_key(
                &arch,
                crate::keys::arch::CONTEXT_LENGTH,
            ))?
            .unwrap_or(4096);
        let n_threads = opts
            .n_threads
            .unwrap_or_else(|| crate::runtime::topology::CpuTopology::get().default_threads());
        let (dev, fallback) = open_device(opts.device, &file, n_threads)?;
        if let (Device::Cpu(c), Some(n)) = (&dev, opts.decode_threads) {
            c.set_decode_threads(n);
        }
        #[cfg(feature = "gpu")]
        if let Device::Gpu(g) = &dev {
            g.set_kv_sequences(opts.n_seq_max.max(1));
        }
        let tokenizer = build_tokenizer_and_pack(&file, &model, &dev)?;
        Ok(Engine {
            inner: Arc::new(EngineInner {
                file,
                path: path.to_path_buf(),
                model,
                tokenizer,
                dev,
                n_threads,
                fallback,
                n_ctx_train,
                token_trie: std::sync::OnceLock::new(),
                fingerprint: std::sync::OnceLock::new(),
                workspaces: Default::default(),
            }),
        })
    }

    /// Loads a LoRA adapter for this model: a llama.cpp GGUF adapter or a PEFT directory
    /// (`adapter_config.json` + `adapter_model.safetensors`). Attach it to sessions with
    /// `Session::attach_lora`; one loaded adapter can serve any number of sessions.
    pub fn load_lora(&self, path: impl AsRef<Path>) -> Result<Arc<crate::lora::LoraAdapter>> {
        let a = crate::lora::LoraAdapter::open(path, &self.inner.model, &self.inner.file)?;
        Ok(Arc::new(a))
    }

    /// Whether the model is a reranker (has a classifier head: rank pooling).
    pub fn has_rank_head(&self) -> bool {
        self.inner.model.has_rank_head()
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.tokenizer
    }

    pub fn gguf(&self) -> &GgufFile {
        &self.inner.file
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn n_vocab(&self) -> usize {
        self.inner.model.n_vocab()
    }

    pub fn n_ctx_train(&self) -> usize {
        self.inner.n_ctx_train
    }

    /// The model's fingerprint (see [`crate::state::Fingerprint`]).
    pub fn fingerprint(&self) -> crate::state::Fingerprint {
        self.inner.fingerprint()
    }

    pub fn n_threads(&self) -> usize {
        self.inner.n_threads
    }

    /// Whether sessions of this engine can hold keys of `k` and values of `v` (a GPU holds
    /// f32 and f16): an error naming the type when not.
    pub fn check_kv(&self, k: KvType, v: KvType) -> Result<()> {
        let spec = crate::backend::KvSpec::new(k, v);
        if self.inner.dev.kv_supported(spec, 64, 64) {
            Ok(())
        } else {
            Err(crate::error::Error::Gpu(format!(
                "KV cache type {}/{} is not supported on {} (the GPU holds f32, f16 and q8_0; or use --device cpu)",
                k.name(),
                v.name(),
                self.device_description()
            )))
        }
    }

    /// The backend's name as `cera bench` reports it (`CPU`, `Vulkan`, ...).
    pub fn backend_name(&self) -> &'static str {
        self.inner.dev.name()
    }

    /// What runs the model, in words (the GPU adapter's name, or the CPU).
    pub fn device_description(&self) -> String {
        match &self.inner.dev {
            Device::Cpu(c) => format!("CPU ({} threads)", c.n_threads()),
            #[cfg(feature = "gpu")]
            Device::Gpu(g) => format!("GPU: {} ({})", g.info().name, g.info().api),
        }
    }

    /// Why `--device auto` fell back to the CPU (None: it did not, or was not asked).
    pub fn device_fallback(&self) -> Option<&str> {
        self.inner.fallback.as_deref()
    }
}

/// The backend for `kind`: the GPU when asked (an error when it cannot run the model), or the
/// CPU; `auto` tries the GPU and falls back with the reason.
/// The tokenizer, and on the CPU every weight in the kernels' packed layout, side by side:
/// building a large vocabulary's tables is one thread's work (Qwen2.5's 151k tokens and merges:
/// a fifth of a cold `cera run -n 1`), and packing, which the first forward pass would
/// otherwise do, keeps the other cores busy meanwhile, so a cold start pays for the longer of
/// the two, not their sum.
fn build_tokenizer_and_pack(file: &GgufFile, model: &Model, dev: &Device) -> Result<Tokenizer> {
    let cpu = match dev {
        Device::Cpu(c) if c.n_threads() > 1 && cfg!(not(target_arch = "wasm32")) => c,
        // one thread (WebAssembly has no others): packing stays lazy, at the first product
        _ => return Tokenizer::from_gguf(file),
    };
    std::thread::scope(|s| {
        let tok = s.spawn(|| Tokenizer::from_gguf(file));
        model.prepack(cpu);
        tok.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

fn open_device(
    kind: DeviceKind,
    file: &GgufFile,
    n_threads: usize,
) -> Result<(Device, Option<String>)> {
    let cpu = || Device::Cpu(Cpu::new(n_threads));
    match kind {
        DeviceKind::Cpu => Ok((cpu(), None)),
        DeviceKind::Gpu => Ok((gpu_device(file, true)?, None)),
        // a software rasterizer (lavapipe) is slower than the CPU backend: only when asked
        DeviceKind::Auto => match gpu_device(file, false) {
            Ok(d) => Ok((d, None)),
            Err(e) => Ok((cpu(), Some(e.to_string()))),
        },
    }
}

#[cfg(feature = "gpu")]
fn gpu_device(file: &GgufFile, allow_software: bool) -> Result<Device> {
    if let Some(t) = file
        .tensors
        .iter()
        .find(|t| t.shape.len() >= 2 && !crate::backend::gpu::reads_type(t.ty))
    {
        return Err(crate::error::Error::Gpu(format!(
            "tensor {} has type {}, which the GPU kernels do not read",
            t.name, t.ty
        )));
    }
    let gpu = crate::backend::gpu::Gpu::new()?;
    if !allow_software && gpu.info().device_type == "Cpu" {
        return Err(crate::error::Error::Gpu(format!(
            "the only adapter is {}, a software renderer slower than the CPU backend \
             (--device gpu uses it anyway)",
            gpu.info().name
        )));
    }
    Ok(Device::Gpu(gpu))
}

#[cfg(not(feature = "gpu"))]
fn gpu_device(_file: &GgufFile, _allow_software: bool) -> Result<Device> {
    Err(crate::error::Error::Gpu(
        "this build of cera has no GPU backend (build with the `gpu` feature)".into(),
    ))
}

impl EngineInner {
    /// A step workspace from the pool (or a new one): batched steps reuse their buffers.
    pub(crate) fn take_workspace(&self) -> crate::models::Workspace {
        self.workspaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    }

    pub(crate) fn put_workspace(&self, ws: crate::models::Workspace) {
        self.workspaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ws);
    }
}
