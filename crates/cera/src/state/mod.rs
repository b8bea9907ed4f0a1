//! Saved sequence state: model fingerprints, checkpoints of sessions and chats, and the prefix
//! cache.
//!
//! * [`Fingerprint`] names a model's math; every saved state carries it and is only restored
//!   into the same model.
//! * Checkpoints ([`crate::session::Session::checkpoint`], [`crate::chat::Chat::checkpoint`])
//!   are versioned byte strings (see [`checkpoint`]) written atomically ([`atomic_write`]).
//! * [`PrefixCache`] keeps snapshots of sequence state keyed by token prefix, in memory and
//!   optionally on disk, so a new prompt that starts like an old one prefills only the rest.

pub mod checkpoint;
mod checksum;
pub(crate) mod codec;
mod file;
pub mod prefix;
pub(crate) mod snapshot;

pub use crate::gguf::Fingerprint;
pub use checksum::checksum;
pub use file::atomic_write;
pub use prefix::{PrefixCache, PrefixCacheOptions, PrefixStats};
