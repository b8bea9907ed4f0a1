//! The core's errors as Python exceptions: `cera.CeraError` (a `RuntimeError`) carries the
//! message with its context; subclasses name the kinds callers handle differently.

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

create_exception!(
    cera,
    CeraError,
    PyRuntimeError,
    "An error from the Cera engine."
);
create_exception!(
    cera,
    ModelLoadError,
    CeraError,
    "The model file is missing, unreadable, corrupt or of an unsupported kind."
);
create_exception!(
    cera,
    ContextOverflowError,
    CeraError,
    "The prompt (or prompt and reply) does not fit in the session's context."
);
create_exception!(
    cera,
    LoraError,
    CeraError,
    "A LoRA adapter that does not fit the model or cannot be read."
);
create_exception!(
    cera,
    CancelledError,
    CeraError,
    "The operation was cancelled from another thread."
);

/// The Python exception for a core error.
pub fn to_py(e: cera::Error) -> PyErr {
    use cera::ErrorKind as K;
    let msg = e.to_string();
    match e.kind() {
        K::ContextOverflow => ContextOverflowError::new_err(msg),
        K::Cancelled => CancelledError::new_err(msg),
        K::Lora => LoraError::new_err(msg),
        K::ModelLoad => ModelLoadError::new_err(msg),
        _ => CeraError::new_err(msg),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CeraError", py.get_type::<CeraError>())?;
    m.add("ModelLoadError", py.get_type::<ModelLoadError>())?;
    m.add(
        "ContextOverflowError",
        py.get_type::<ContextOverflowError>(),
    )?;
    m.add("LoraError", py.get_type::<LoraError>())?;
    m.add("CancelledError", py.get_type::<CancelledError>())?;
    Ok(())
}
