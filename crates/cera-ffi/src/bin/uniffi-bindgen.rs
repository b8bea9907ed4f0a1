//! `cargo run -p cera-ffi --bin uniffi-bindgen -- generate --library target/release/libcera_ffi.so
//! --language kotlin --out-dir OUT`: the bindings generator, pinned to the UniFFI version the
//! library was built with (the foreign code and the library must agree on the ABI).

fn main() {
    uniffi::uniffi_bindgen_main()
}
