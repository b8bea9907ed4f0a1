//! The one error type of the core library. Variants carry the file, key, tensor, offset or
//! shape that went wrong, so a message alone tells a user what to fix.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    // ---- GGUF container ----
    #[error("not a GGUF file: magic bytes are {found:02x?}, expected \"GGUF\"")]
    GgufMagic { found: [u8; 4] },
    #[error("unsupported GGUF version {0} (supported: 2 and 3)")]
    GgufVersion(u32),
    #[error("GGUF truncated: {what} at offset {offset} needs {needed} bytes, file has {len}")]
    GgufTruncated {
        what: String,
        offset: u64,
        needed: u64,
        len: u64,
    },
    #[error("GGUF corrupt: {what} at offset {offset}: {reason}")]
    GgufCorrupt {
        what: String,
        offset: u64,
        reason: String,
    },
    #[error("GGUF: unknown metadata value type {type_id} for key '{key}' at offset {offset}")]
    GgufValueType {
        key: String,
        type_id: u32,
        offset: u64,
    },
    #[error("GGUF: duplicate metadata key '{0}'")]
    GgufDuplicateKey(String),
    #[error("GGUF: duplicate tensor name '{0}'")]
    GgufDuplicateTensor(String),
    #[error("GGUF: tensor '{tensor}' has unknown type id {type_id}")]
    GgufTensorType { tensor: String, type_id: u32 },
    #[error("GGUF: tensor '{tensor}': {reason}")]
    GgufTensor { tensor: String, reason: String },

    // ---- metadata access ----
    #[error("metadata key '{0}' is missing")]
    MissingKey(String),
    #[error("metadata key '{key}' has type {found}, expected {expected}")]
    KeyType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("tensor '{0}' is missing")]
    MissingTensor(String),
    #[error("unsupported architecture '{arch}' (supported: {supported})")]
    UnsupportedArch { arch: String, supported: String },
    #[error("model: {0}")]
    Model(String),

    // ---- sessions ----
    #[error("context overflow: {needed} tokens needed but the context holds {n_ctx}")]
    ContextOverflow { n_ctx: usize, needed: usize },
    #[error("token id {id} is out of range (vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange { id: u32, n_vocab: usize },
    #[error("cancelled")]
    Cancelled,
    /// A generation option out of its range (`top_p must be within [0, 1] (got 1.5)`).
    #[error("{0}")]
    BadOption(BadOption),
    /// A checkpoint or prefix-cache entry that cannot be used: truncated, corrupt, of another
    /// format version, another model, another KV cache type or a bigger context.
    #[error("{what}: {reason}")]
    State { what: String, reason: String },
    /// A chat call that its phase does not allow (e.g. `complete` with nothing to answer).
    #[error("chat ({phase}): {reason}")]
    ChatPhase { phase: &'static str, reason: String },
    /// The context shift cannot make room (for example `keep` leaves nothing to discard).
    #[error("context shift: {0}")]
    ContextShift(String),

    // ---- structured output ----
    #[error("grammar: {0}")]
    Grammar(String),
    #[error("JSON schema: {0}")]
    JsonSchema(String),
    #[error("tool calls: {0}")]
    Tools(String),

    // ---- quantization ----
    /// The GPU backend: no usable adapter, a device error, or what its kernels lack.
    #[error("GPU: {0}")]
    Gpu(String),
    #[error("{op} is not implemented for tensor type {ty}")]
    QuantUnsupported { ty: &'static str, op: &'static str },
    #[error("{ty}: {reason}")]
    QuantShape { ty: &'static str, reason: String },

    // ---- tokenizer ----
    #[error("tokenizer: {reason}")]
    Tokenizer { reason: String },
    #[error("tokenizer model '{model}' is not supported (supported: gpt2, gemma4, llama, bert)")]
    TokenizerUnsupported { model: String },

    // ---- model fetching ----
    #[error("model fetch failed for '{model}': {reason}")]
    Fetch { model: String, reason: String },
    #[error("Hugging Face repo '{repo}': {reason}")]
    Hub { repo: String, reason: String },
    #[error("unknown model '{name}'; known models: {known}")]
    UnknownModel { name: String, known: String },

    /// An image or audio clip that cannot be read (`what`: `image`, `audio`): not a format
    /// this build decodes, corrupt, truncated, or over the size limits.
    #[error("{what}: {reason}")]
    Media { what: String, reason: String },

    /// A `.safetensors` file that cannot be read as one.
    #[error("{path}: {reason}")]
    Safetensors { path: PathBuf, reason: String },

    /// A Hugging Face checkpoint that `convert` cannot turn into a GGUF; `path` is its folder.
    #[error("cannot convert {path}: {reason}")]
    Convert { path: PathBuf, reason: String },

    // ---- adapters ----
    /// A LoRA adapter that cannot be read or does not fit the model; `adapter` names the file.
    #[error("LoRA adapter {adapter}: {reason}")]
    Lora { adapter: String, reason: String },

    // ---- chat templates ----
    /// A chat template failed to compile or render; `reason` names the construct this engine
    /// lacks when that is the cause (`unsupported filter: ...`).
    #[error("chat template: {reason}")]
    ChatTemplate { reason: String },
    /// The template itself refused the conversation through `raise_exception(message)`
    /// (e.g. "Conversation roles must alternate user/assistant/...").
    #[error("chat template raised an exception: {message}")]
    ChatTemplateRaised { message: String },
}

/// What an [`Error`] means for a caller, for front ends that map errors to their own types
/// (Python exceptions, Kotlin/Swift error cases) without each listing the variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The model file is missing, unreadable, corrupt or of an unsupported kind.
    ModelLoad,
    /// The prompt (or prompt and reply) does not fit in the context.
    ContextOverflow,
    /// A LoRA adapter that does not fit the model or cannot be read.
    Lora,
    /// Cancelled from another thread.
    Cancelled,
    /// Anything else.
    Other,
}

impl Error {
    /// The kind of failure (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        use Error as E;
        match self {
            E::ContextOverflow { .. } => ErrorKind::ContextOverflow,
            E::Cancelled => ErrorKind::Cancelled,
            E::Lora { .. } => ErrorKind::Lora,
            E::Io { .. }
            | E::GgufMagic { .. }
            | E::GgufVersion(_)
            | E::GgufTruncated { .. }
            | E::GgufCorrupt { .. }
            | E::GgufValueType { .. }
            | E::GgufDuplicateKey(_)
            | E::GgufDuplicateTensor(_)
            | E::GgufTensorType { .. }
            | E::GgufTensor { .. }
            | E::MissingKey(_)
            | E::KeyType { .. }
            | E::MissingTensor(_)
            | E::UnsupportedArch { .. } => ErrorKind::ModelLoad,
            _ => ErrorKind::Other,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// An option out of its range.
#[derive(Clone, Debug, PartialEq)]
pub struct BadOption {
    /// Its snake_case name (`top_p`).
    pub field: &'static str,
    /// What is wrong, after the name (`must be within [0, 1] (got 1.5)`).
    pub reason: String,
}

impl BadOption {
    /// The message with the option's camelCase name (`topP must be …`), as Kotlin, Swift
    /// and JavaScript spell it.
    pub fn camel_case(&self) -> String {
        let mut name = String::new();
        let mut up = false;
        for c in self.field.chars() {
            match c {
                '_' => up = true,
                c if up => {
                    name.extend(c.to_uppercase());
                    up = false;
                }
                c => name.push(c),
            }
        }
        format!("{name} {}", self.reason)
    }
}

impl From<BadOption> for Error {
    fn from(b: BadOption) -> Self {
        Error::BadOption(b)
    }
}

impl std::fmt::Display for BadOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.field, self.reason)
    }
}
