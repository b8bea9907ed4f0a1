//! A model's fingerprint: what saved state is keyed by, so a checkpoint or cache entry is only
//! ever restored into the model that made it.
//!
//! It hashes (SHA-256, truncated to 128 bits) everything that changes the numbers in a KV
//! cache or a convolution state: the architecture and its `{arch}.*` hyperparameters, every
//! tensor's name, type and shape, and samples of every tensor's bytes (start, middle, end), so
//! two fine-tunes of one shape differ. It leaves out `general.*` (names, licences) and
//! `tokenizer.*`: state holds token ids, and the vocabulary does not change the math. Sampling
//! the data instead of hashing it all keeps it cheap (a few pages per tensor) and lazy: it is
//! computed on first use, not at load.

use sha2::{Digest, Sha256};

use crate::gguf::GgufFile;

/// 128 bits identifying a model's math (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub [u8; 16]);

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Bytes sampled from each of three places of every tensor's data.
const SAMPLE: usize = 64;

impl Fingerprint {
    pub fn of(file: &GgufFile) -> Fingerprint {
        let mut h = Sha256::new();
        h.update(b"cera-fingerprint-v1\0");
        let arch = file.architecture().unwrap_or("");
        h.update(arch.as_bytes());
        h.update([0]);
        for (k, v) in &file.metadata {
            if k.starts_with("general.") || k.starts_with("tokenizer.") {
                continue;
            }
            h.update(k.as_bytes());
            h.update([0]);
            h.update(format!("{v:?}").as_bytes());
            h.update([0]);
        }
        for t in &file.tensors {
            h.update(t.name.as_bytes());
            h.update([0]);
            h.update(t.ty.id().to_le_bytes());
            for d in &t.shape {
                h.update(d.to_le_bytes());
            }
            let data = file.tensor_data(t);
            let n = data.len();
            let s = SAMPLE.min(n);
            h.update(&data[..s]);
            h.update(&data[n / 2 - s.min(n / 2)..n / 2]);
            h.update(&data[n - s..]);
        }
        let d = h.finalize();
        let mut out = [0u8; 16];
        out.copy_from_slice(&d[..16]);
        Fingerprint(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufWriter;

    fn model(name: &str, w: &[f32], layers: u32) -> GgufFile {
        let mut g = GgufWriter::new();
        g.set("general.architecture", "llama");
        g.set("general.name", name);
        g.set("llama.block_count", layers);
        g.add_tensor_f32("token_embd.weight", crate::quant::GgmlType::F32, &[4, 2], w)
            .unwrap();
        GgufFile::from_bytes(g.to_bytes().unwrap()).unwrap()
    }

    #[test]
    fn weights_and_hparams_change_it_names_do_not() {
        let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let a = Fingerprint::of(&model("a", &w, 2));
        assert_eq!(a, Fingerprint::of(&model("renamed", &w, 2)));
        let mut w2 = w;
        w2[7] = 9.0;
        assert_ne!(a, Fingerprint::of(&model("a", &w2, 2)));
        assert_ne!(a, Fingerprint::of(&model("a", &w, 3)));
        assert_eq!(a.to_string().len(), 32);
    }
}
