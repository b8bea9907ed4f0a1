//! GGUF container: reader (mmap or in-memory), typed metadata access, and writer.
//!
//! Layout (little-endian): magic `GGUF`, u32 version, u64 tensor count, u64 metadata count,
//! the metadata key/values, the tensor infos (name, dims, type, offset relative to the data
//! section), padding to `general.alignment` (default 32), then the tensor data, each tensor at
//! an aligned offset.

mod fingerprint;
mod meta;
mod reader;
mod value;
mod writer;

pub mod mix;
pub mod requantize;
pub mod split;

pub use fingerprint::Fingerprint;
pub use meta::FromValue;
pub use reader::{DEFAULT_ALIGNMENT, GgufFile, MAX_DIMS, TensorInfo};
pub use value::{Array, Value, ValueType};
pub use writer::{GgufWriter, TensorSpec, write_streaming};
