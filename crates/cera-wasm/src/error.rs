//! Errors of both JavaScript faces: a message naming what is wrong (the core's message, or
//! which option or argument was invalid). wasm-bindgen's classes throw it as an `Error`; the
//! threads build's functions hand it to their JavaScript wrapper, which throws it the same way.

/// A message for JavaScript's `Error`.
#[derive(Debug)]
pub struct Error(pub String);

pub type Result<T> = std::result::Result<T, Error>;

/// An invalid argument or option.
pub fn invalid(msg: impl std::fmt::Display) -> Error {
    Error(msg.to_string())
}

/// The core's error, with its message.
pub fn core(e: cera::Error) -> Error {
    Error(e.to_string())
}

impl From<Error> for wasm_bindgen::JsValue {
    fn from(e: Error) -> Self {
        wasm_bindgen::JsError::new(&e.0).into()
    }
}

impl From<cera::Error> for Error {
    fn from(e: cera::Error) -> Self {
        core(e)
    }
}
