//! Encoded media kept by the hash of what went in (an image's pixels, a clip's samples), so a
//! repeated image or clip is not encoded again: a server that sees the same picture in every
//! turn of a conversation encodes it once. (The prefill it becomes is reused apart from this:
//! media positions hold ids made from their rows' hash, which prefix matching and the prefix
//! cache compare.) Least recently used first out past a byte budget.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::engine::Engine;
use crate::error::Result;
use crate::media::MediaInput;
use crate::models::Mmproj;
use crate::models::common::media::{EncodedMedia, MediaPart};

/// Encoded media by input, shared by the threads that encode (see the module docs).
pub struct MediaCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// key -> (the encoding, its bytes, when it was last used)
    map: HashMap<u64, (Arc<EncodedMedia>, usize, u64)>,
    clock: u64,
    bytes: usize,
    hits: u64,
}

impl MediaCache {
    /// A cache of at most `budget` bytes of embeddings.
    pub fn new(budget: usize) -> MediaCache {
        MediaCache {
            budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// `input` through `mmproj` on `engine` ([`Engine::encode_media`]), or the encoding kept
    /// from an earlier call with the same mmproj and the same pixels or samples.
    pub fn encode(
        &self,
        engine: &Engine,
        mmproj: &Arc<Mmproj>,
        input: &MediaInput,
    ) -> Result<Arc<EncodedMedia>> {
        let key = key(mmproj, input);
        {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            g.clock += 1;
            let now = g.clock;
            if let Some(e) = g.map.get_mut(&key) {
                e.2 = now;
                let hit = Arc::clone(&e.0);
                g.hits += 1;
                return Ok(hit);
            }
        }
        // encoded outside the lock: other requests' media go on meanwhile
        let enc = Arc::new(engine.encode_media(mmproj, input)?);
        let size: usize = enc
            .parts
            .iter()
            .map(|p| match p {
                MediaPart::Embeddings(r) => 4 * r.len(),
                MediaPart::Text(t) => t.len(),
            })
            .sum();
        if size <= self.budget {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            while g.bytes + size > self.budget {
                let Some((&old, _)) = g.map.iter().min_by_key(|(_, e)| e.2) else {
                    break;
                };
                let (_, b, _) = g.map.remove(&old).expect("present");
                g.bytes -= b;
            }
            g.clock += 1;
            let now = g.clock;
            if g.map.insert(key, (Arc::clone(&enc), size, now)).is_none() {
                g.bytes += size;
            }
        }
        Ok(enc)
    }

    /// Encodings answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).hits
    }
}

/// A 64-bit FNV-1a hash of the mmproj (by address: one loaded file) and the input's kind,
/// size and values.
fn key(mmproj: &Arc<Mmproj>, input: &MediaInput) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h = (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(&(Arc::as_ptr(mmproj) as usize).to_le_bytes());
    match input {
        MediaInput::Image(img) => {
            eat(b"image");
            eat(&(img.width as u64).to_le_bytes());
            eat(&(img.height as u64).to_le_bytes());
            eat(&img.data);
        }
        MediaInput::Audio(s) => {
            eat(b"audio");
            eat(&(s.len() as u64).to_le_bytes());
            for v in s {
                eat(&v.to_bits().to_le_bytes());
            }
        }
    }
    h
}
