//! Clocks that work on every target: `std::time` panics on WebAssembly without WASI, where
//! `web-time` reads the JavaScript host's clocks (`performance.now()`, `Date.now()`).

#[cfg(not(target_arch = "wasm32"))]
pub use std::time::Instant;
#[cfg(target_arch = "wasm32")]
pub use web_time::Instant;

/// The wall clock now.
pub fn system_now() -> std::time::SystemTime {
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::time::SystemTime::now()
    }
    #[cfg(target_arch = "wasm32")]
    {
        let since = web_time::SystemTime::now()
            .duration_since(web_time::UNIX_EPOCH)
            .unwrap_or_default();
        std::time::UNIX_EPOCH + since
    }
}
