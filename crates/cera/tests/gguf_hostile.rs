//! Corrupt, truncated and hostile GGUF files must give a clear error naming what is wrong,
//! never a panic, a hang or a huge allocation.

use cera::gguf::{GgufFile, GgufWriter};
use cera::quant::GgmlType;

/// Hand-assembles GGUF bytes so that any field can be made wrong.
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, x: u32) -> &mut Self {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }
    fn u64(&mut self, x: u64) -> &mut Self {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A u32 key/value.
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor info.
    fn tensor(&mut self, name: &str, shape: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(shape.len() as u32);
        for &d in shape {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Pads to 32 and appends `n` data bytes.
    fn data(&mut self, n: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(32) {
            self.0.push(0);
        }
        self.0.extend(std::iter::repeat_n(0u8, n));
        self
    }
    fn done(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

fn valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama")
        .set("llama.block_count", 2u32)
        .set(
            "tokenizer.ggml.tokens",
            vec!["a".to_string(), "b".to_string()],
        )
        .set("x.f32s", vec![1.0f32, 2.0]);
    w.add_tensor_f32("t0", GgmlType::F32, &[8, 2], &[0.5; 16])
        .unwrap();
    let mut q8 = vec![0u8; 34];
    q8[0..2].copy_from_slice(&0x3c00u16.to_le_bytes()); // d = 1.0
    w.add_tensor_raw("t1", GgmlType::Q8_0, &[32], q8).unwrap();
    w.to_bytes().unwrap()
}

/// (name, bytes, text the error must contain)
fn corpus() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let mut v = vec![
        ("empty file", vec![], "magic"),
        ("three bytes", b"GGU".to_vec(), "magic"),
        ("bad magic", b"GGML\x03\0\0\0".to_vec(), "not a GGUF file"),
        ("version 1", Raw::header(1, 0, 0).done(), "version 1"),
        ("version 4", Raw::header(4, 0, 0).done(), "version 4"),
        (
            "big-endian",
            {
                let mut r = Raw(b"GGUF".to_vec());
                r.bytes(&3u32.to_be_bytes()).u64(0).u64(0);
                r.done()
            },
            "big-endian",
        ),
        (
            "no counts",
            Raw(b"GGUF\x03\0\0\0".to_vec()).done(),
            "tensor count",
        ),
        (
            "absurd tensor count",
            Raw::header(3, u64::MAX, 0).done(),
            "tensor count",
        ),
        (
            "absurd kv count",
            Raw::header(3, 0, 1 << 60).done(),
            "metadata count",
        ),
        (
            "key length past end",
            {
                let mut r = Raw::header(3, 0, 1);
                r.u64(1 << 40).u32(4).u32(1);
                r.done()
            },
            "metadata key #0",
        ),
        (
            "key not utf-8",
            {
                let mut r = Raw::header(3, 0, 1);
                r.u64(2).bytes(&[0xff, 0xfe]).u32(4).u32(1);
                r.done()
            },
            "UTF-8",
        ),
        (
            "unknown value type",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str("k.v").u32(13).u32(0);
                r.done()
            },
            "unknown metadata value type 13 for key 'k.v'",
        ),
        (
            "value truncated",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str("k.v").u32(10).u32(0);
                r.done()
            },
            "value of 'k.v'",
        ),
        (
            "bool not 0/1",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str("k.b").u32(7).bytes(&[2]);
                r.done()
            },
            "bool byte is 2",
        ),
        (
            "duplicate key",
            {
                let mut r = Raw::header(3, 0, 2);
                r.kv_u32("a.b", 1).kv_u32("a.b", 2);
                r.done()
            },
            "duplicate metadata key 'a.b'",
        ),
        (
            "array count absurd",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str("k.arr").u32(9).u32(6).u64(u64::MAX / 2);
                r.done()
            },
            "array 'k.arr'",
        ),
        (
            "array of unknown type",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str("k.arr").u32(9).u32(99).u64(1);
                r.done()
            },
            "type 99",
        ),
        (
            "string array element past end",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str("k.s").u32(9).u32(8).u64(2).str("ok").u64(1000);
                r.done()
            },
            "element 1",
        ),
        (
            "array nesting bomb",
            {
                let mut r = Raw::header(3, 0, 1);
                r.str("k.deep").u32(9);
                for _ in 0..64 {
                    r.u32(9).u64(1);
                }
                r.u32(4).u64(0);
                r.done()
            },
            "nested deeper",
        ),
        (
            "alignment zero",
            {
                let mut r = Raw::header(3, 0, 1);
                r.kv_u32("general.alignment", 0);
                r.done()
            },
            "general.alignment",
        ),
        (
            "alignment not power of two",
            {
                let mut r = Raw::header(3, 0, 1);
                r.kv_u32("general.alignment", 48);
                r.done()
            },
            "power of two",
        ),
        (
            "tensor info truncated",
            {
                let mut r = Raw::header(3, 1, 0);
                r.str("w").u32(2).u64(4);
                r.done()
            },
            "tensor 'w' info",
        ),
        (
            "zero dims",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("w", &[], 0, 0).data(0);
                r.done()
            },
            "0 dimensions",
        ),
        (
            "five dims",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("w", &[1, 1, 1, 1, 1], 0, 0).data(4);
                r.done()
            },
            "5 dimensions",
        ),
        (
            "unknown tensor type",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("w", &[4], 77, 0).data(16);
                r.done()
            },
            "tensor 'w' has unknown type id 77",
        ),
        (
            "retired tensor type",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("w", &[32], 31, 0).data(64);
                r.done()
            },
            "Q4_0_4_4",
        ),
        (
            "duplicate tensor",
            {
                let mut r = Raw::header(3, 2, 0);
                r.tensor("w", &[4], 0, 0).tensor("w", &[4], 0, 32).data(64);
                r.done()
            },
            "duplicate tensor name 'w'",
        ),
        (
            "tensor past end",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("w", &[1024], 0, 0).data(16);
                r.done()
            },
            "runs past the end",
        ),
        (
            "tensor offset huge",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("w", &[4], 0, u64::MAX - 31).data(16);
                r.done()
            },
            "'w'",
        ),
        (
            "tensor misaligned",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("w", &[4], 0, 4).data(64);
                r.done()
            },
            "alignment",
        ),
        (
            "shape overflow",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("w", &[1 << 32, 1 << 32, 1 << 32], 0, 0).data(16);
                r.done()
            },
            "overflows",
        ),
        (
            "row not whole blocks",
            {
                let mut r = Raw::header(3, 1, 0);
                r.tensor("w", &[33], 2, 0).data(64);
                r.done()
            },
            "not a multiple of the Q4_0 block size 32",
        ),
        (
            "tensor name past end",
            {
                let mut r = Raw::header(3, 1, 0);
                r.u64(500).bytes(&[b'a'; 40]);
                r.done()
            },
            "tensor #0 name",
        ),
    ];
    // a real file cut short inside its data section
    let mut cut = valid_file();
    cut.truncate(cut.len() - 40);
    v.push(("valid file cut in data", cut, "runs past the end"));
    v
}

#[test]
fn hostile_corpus_gives_named_errors() {
    let corpus = corpus();
    assert!(corpus.len() >= 30);
    // CERA_WRITE_HOSTILE=1 writes the corpus out as files (fuzzer seeds, committed fixtures).
    if std::env::var_os("CERA_WRITE_HOSTILE").is_some() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile");
        for (name, bytes, _) in &corpus {
            std::fs::write(
                dir.join(format!(
                    "{}.gguf",
                    name.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
                )),
                bytes,
            )
            .unwrap();
        }
    }
    for (name, bytes, want) in corpus {
        match GgufFile::from_bytes(bytes) {
            Ok(_) => panic!("{name}: accepted a corrupt file"),
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(want),
                    "{name}: error {msg:?} does not mention {want:?}"
                );
            }
        }
    }
}

#[test]
fn committed_hostile_files_are_rejected() {
    // Fuzzer finds and hand-made files; each must be rejected without a panic.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "gguf") {
            let r = GgufFile::open(&path);
            assert!(r.is_err(), "{} was accepted", path.display());
            n += 1;
        }
    }
    assert!(n >= 20, "expected at least 20 hostile files, found {n}");
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let full = valid_file();
    assert!(GgufFile::from_bytes(full.clone()).is_ok());
    for len in 0..full.len() {
        // The data section's last tensor is padded; cuts inside trailing padding are valid.
        let r = GgufFile::from_bytes(full[..len].to_vec());
        if let Ok(g) = r {
            let end = g
                .tensors
                .iter()
                .map(|t| t.offset + t.size)
                .max()
                .unwrap_or(0);
            assert!(
                end <= len as u64,
                "cut at {len} accepted with data past the end"
            );
        }
    }
}

#[test]
fn byte_flips_never_panic() {
    let full = valid_file();
    let mut state = 0x9e3779b97f4a7c15u64;
    for _ in 0..20_000 {
        let mut b = full.clone();
        for _ in 0..3 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let i = (state % b.len() as u64) as usize;
            b[i] = (state >> 32) as u8;
        }
        let _ = GgufFile::from_bytes(b);
    }
}
