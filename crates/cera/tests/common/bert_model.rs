//! A random-weight BERT encoder at the bge-small shape (384 wide, 12 layers of 12 heads, FFN
//! 1536, 512 positions) with the vocabulary of llama.cpp's `ggml-vocab-bert-bge.gguf`,
//! deterministic in its name, for the encoder tests against llama-embedding.
#![allow(dead_code)]

use cera::gguf::{GgufFile, GgufWriter};
use cera::quant::GgmlType;

struct Rng(u64);

impl Rng {
    fn new(tag: &str) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in tag.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Rng(h)
    }
    fn unit(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Uniform in [-a, a).
    fn sym(&mut self, a: f32) -> f32 {
        (self.unit() * 2.0 - 1.0) * a
    }
}

/// The model's shape.
pub struct BertShape {
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_ff: usize,
    pub n_pos: usize,
    pub pooling: u32,
    /// A reranker's classifier head (`cls`, `cls.output` with this many outputs); 0: none.
    pub n_cls_out: usize,
}

pub const BGE_SMALL: BertShape = BertShape {
    n_embd: 384,
    n_layer: 12,
    n_head: 12,
    n_ff: 1536,
    n_pos: 512,
    pooling: 2,
    n_cls_out: 0,
};

/// The same shape as a cross-encoder reranker (rank pooling, one score).
pub const BGE_SMALL_RERANK: BertShape = BertShape {
    pooling: 4,
    n_cls_out: 1,
    ..BGE_SMALL
};

/// GGUF bytes of a random BERT of `shape` (matrices in `ty`) with `vocab`'s tokenizer.
pub fn build(name: &str, shape: &BertShape, ty: GgmlType, vocab: &GgufFile) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "bert");
    w.set("general.name", "cera random-weight bert");
    for (k, v) in &vocab.metadata {
        if k.starts_with("tokenizer.") {
            w.set(k.clone(), v.clone());
        }
    }
    let n_vocab = vocab.get_str_array("tokenizer.ggml.tokens").unwrap().len();
    let d = shape.n_embd;
    w.set("bert.context_length", shape.n_pos as u32);
    w.set("bert.embedding_length", d as u32);
    w.set("bert.block_count", shape.n_layer as u32);
    w.set("bert.feed_forward_length", shape.n_ff as u32);
    w.set("bert.attention.head_count", shape.n_head as u32);
    w.set("bert.attention.layer_norm_epsilon", 1e-12f32);
    w.set("bert.attention.causal", false);
    w.set("bert.pooling_type", shape.pooling);
    let mut add = |tname: &str, t: GgmlType, dims: &[usize], amp: f32, center: f32| {
        let mut r = Rng::new(&format!("{name}/{tname}"));
        let n: usize = dims.iter().product();
        let vals: Vec<f32> = (0..n).map(|_| center + r.sym(amp)).collect();
        let dims: Vec<u64> = dims.iter().map(|&x| x as u64).collect();
        w.add_tensor_f32(tname, t, &dims, &vals).unwrap();
    };
    let f32t = GgmlType::F32;
    add("token_embd.weight", ty, &[d, n_vocab], 1.0, 0.0);
    add("token_types.weight", f32t, &[d, 2], 0.5, 0.0);
    add("position_embd.weight", ty, &[d, shape.n_pos], 0.5, 0.0);
    add("token_embd_norm.weight", f32t, &[d], 0.2, 1.0);
    add("token_embd_norm.bias", f32t, &[d], 0.1, 0.0);
    let m = |cols: usize| 1.7 / (cols as f32).sqrt();
    for il in 0..shape.n_layer {
        let t = |s: &str| format!("blk.{il}.{s}");
        for p in ["attn_q", "attn_k", "attn_v", "attn_output"] {
            add(&t(&format!("{p}.weight")), ty, &[d, d], m(d), 0.0);
            add(&t(&format!("{p}.bias")), f32t, &[d], 0.05, 0.0);
        }
        add(&t("attn_output_norm.weight"), f32t, &[d], 0.2, 1.0);
        add(&t("attn_output_norm.bias"), f32t, &[d], 0.05, 0.0);
        add(&t("ffn_up.weight"), ty, &[d, shape.n_ff], m(d), 0.0);
        add(&t("ffn_up.bias"), f32t, &[shape.n_ff], 0.05, 0.0);
        add(
            &t("ffn_down.weight"),
            ty,
            &[shape.n_ff, d],
            m(shape.n_ff),
            0.0,
        );
        add(&t("ffn_down.bias"), f32t, &[d], 0.05, 0.0);
        add(&t("layer_output_norm.weight"), f32t, &[d], 0.2, 1.0);
        add(&t("layer_output_norm.bias"), f32t, &[d], 0.05, 0.0);
    }
    if shape.n_cls_out > 0 {
        add("cls.weight", ty, &[d, d], m(d), 0.0);
        add("cls.bias", f32t, &[d], 0.05, 0.0);
        add(
            "cls.output.weight",
            ty,
            &[d, shape.n_cls_out],
            3.0 * m(d),
            0.0,
        );
        add("cls.output.bias", f32t, &[shape.n_cls_out], 0.05, 0.0);
    }
    w.to_bytes().unwrap()
}
