//! Errors cross into JavaScript as `Error` objects whose message names what is wrong (the
//! core's message, or which option or argument was invalid).

use wasm_bindgen::JsError;

pub type Result<T> = std::result::Result<T, JsError>;

/// An invalid argument or option.
pub fn invalid(msg: impl std::fmt::Display) -> JsError {
    JsError::new(&msg.to_string())
}

/// The core's error, with its message.
pub fn core(e: cera::Error) -> JsError {
    JsError::new(&e.to_string())
}
