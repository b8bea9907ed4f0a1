//! The core's errors as one UniFFI error type: Kotlin sees `CeraException.ModelLoad`, …, Swift
//! `CeraError.ModelLoad`, each carrying the core error's message with its context (which file,
//! which tensor, how many tokens) as the exception's message.

/// An error from the engine, by the kind callers handle differently.
#[derive(Clone, Debug, thiserror::Error, uniffi::Error)]
#[uniffi(flat_error)]
pub enum CeraError {
    /// The model file is missing, unreadable, corrupt or of an unsupported kind.
    #[error("{0}")]
    ModelLoad(String),
    /// The prompt (or prompt and reply) does not fit in the session's context.
    #[error("{0}")]
    ContextOverflow(String),
    /// A LoRA adapter that does not fit the model or cannot be read.
    #[error("{0}")]
    Lora(String),
    /// The operation was cancelled from another thread.
    #[error("{0}")]
    Cancelled(String),
    /// An argument the engine cannot use (a sampling value out of range, bad JSON, …).
    #[error("{0}")]
    InvalidArgument(String),
    /// Anything else the engine reports.
    #[error("{0}")]
    Engine(String),
}

impl From<cera::Error> for CeraError {
    fn from(e: cera::Error) -> CeraError {
        use cera::ErrorKind as K;
        let msg = e.to_string();
        match e.kind() {
            K::ContextOverflow => CeraError::ContextOverflow(msg),
            K::Cancelled => CeraError::Cancelled(msg),
            K::Lora => CeraError::Lora(msg),
            K::ModelLoad => CeraError::ModelLoad(msg),
            _ => CeraError::Engine(msg),
        }
    }
}

pub type Result<T> = std::result::Result<T, CeraError>;

pub fn invalid(msg: impl Into<String>) -> CeraError {
    CeraError::InvalidArgument(msg.into())
}

pub fn poisoned(what: &str) -> CeraError {
    CeraError::Engine(format!("the {what} was poisoned by a panic"))
}
