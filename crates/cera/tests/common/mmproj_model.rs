//! Random-weight mmproj files of LFM2-VL's layout (llama.cpp's converter's tensor and key
//! names: `clip.projector_type` `lfm2`, `v.patch_embd.weight` `[ps, ps, 3, d]`, `v.blk.N.*`,
//! `v.post_ln.*`, `mm.input_norm.*`, `mm.1.*`, `mm.2.*`) or Idefics3's (`idefics3`: the same
//! tower, `clip.vision.preproc_image_size`, `mm.model.fc.weight` without a bias),
//! deterministic in their name.
#![allow(dead_code)]

use cera::gguf::GgufWriter;
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
    fn sym(&mut self, a: f32) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a
    }
}

/// The tower's and projector's shape.
#[derive(Clone)]
pub struct VisionShape {
    pub image_size: usize,
    pub patch: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_layer: usize,
    pub scale: usize,
    /// The projector's hidden width and the language model's embedding width.
    pub mm_hidden: usize,
    pub n_embd_out: usize,
    /// `clip.projector_type`: `lfm2` or `idefics3`.
    pub projector: &'static str,
    /// Idefics3's `preproc_image_size` (the longest edge before slicing).
    pub longest_edge: usize,
}

/// Small enough for unit tests: a 4 x 4 grid of 16-pixel patches.
pub const TINY: VisionShape = VisionShape {
    image_size: 64,
    patch: 16,
    n_embd: 32,
    n_ff: 64,
    n_head: 2,
    n_layer: 2,
    scale: 2,
    mm_hidden: 64,
    n_embd_out: 40,
    projector: "lfm2",
    longest_edge: 0,
};

/// LFM2-VL-450M's: the SigLIP2 NaFlex base tower (12 blocks of 768, 12 heads, FFN 3072,
/// 16 x 16 trained positions of 16-pixel patches) and the projector to LFM2-350M's 1024
/// through 2560.
pub const LFM2_VL_450M: VisionShape = VisionShape {
    image_size: 256,
    patch: 16,
    n_embd: 768,
    n_ff: 3072,
    n_head: 12,
    n_layer: 12,
    scale: 2,
    mm_hidden: 2560,
    n_embd_out: 1024,
    projector: "lfm2",
    longest_edge: 0,
};

/// SmolVLM-256M's: SigLIP base at 512 x 512 (32 x 32 patches of 16; 12 blocks of 768, 12
/// heads, FFN 3072), pixel shuffle by 4 (64 tokens per slice), the projector to SmolLM2-135M's
/// 576; images resized to 2048 on their longer side before slicing.
pub const SMOLVLM_256M: VisionShape = VisionShape {
    image_size: 512,
    patch: 16,
    n_embd: 768,
    n_ff: 3072,
    n_head: 12,
    n_layer: 12,
    scale: 4,
    mm_hidden: 0,
    n_embd_out: 576,
    projector: "idefics3",
    longest_edge: 2048,
};

/// Idefics3's layout small enough for unit tests: 64-pixel slices of 4 x 4 patches, 4 tokens
/// each, images to 128 on their longer side (up to 2 x 2 slices).
pub const TINY_IDEFICS3: VisionShape = VisionShape {
    image_size: 64,
    patch: 16,
    n_embd: 32,
    n_ff: 64,
    n_head: 2,
    n_layer: 2,
    scale: 2,
    mm_hidden: 0,
    n_embd_out: 40,
    projector: "idefics3",
    longest_edge: 128,
};

/// GGUF bytes of a random mmproj of `shape` with matrices in `ty`; `skip` leaves out the
/// tensors whose names contain it (for hostile tests).
pub fn build(name: &str, shape: &VisionShape, ty: GgmlType, skip: Option<&str>) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "clip");
    w.set("general.name", "cera random-weight mmproj");
    w.set("clip.projector_type", shape.projector);
    w.set("clip.has_vision_encoder", true);
    w.set("clip.use_gelu", true);
    let d = shape.n_embd;
    w.set("clip.vision.image_size", shape.image_size as u32);
    w.set("clip.vision.patch_size", shape.patch as u32);
    w.set("clip.vision.embedding_length", d as u32);
    w.set("clip.vision.feed_forward_length", shape.n_ff as u32);
    w.set("clip.vision.block_count", shape.n_layer as u32);
    w.set("clip.vision.attention.head_count", shape.n_head as u32);
    w.set("clip.vision.attention.layer_norm_epsilon", 1e-6f32);
    w.set("clip.vision.projection_dim", shape.n_embd_out as u32);
    w.set("clip.vision.image_mean", vec![0.5f32, 0.5, 0.5]);
    w.set("clip.vision.image_std", vec![0.5f32, 0.5, 0.5]);
    w.set("clip.vision.projector.scale_factor", shape.scale as u32);
    if shape.longest_edge > 0 {
        w.set("clip.vision.preproc_image_size", shape.longest_edge as u32);
    }
    let mut add = |tname: &str, t: GgmlType, dims: &[usize], amp: f32, center: f32| {
        if skip.is_some_and(|s| tname.contains(s)) {
            return;
        }
        let mut r = Rng::new(&format!("{name}/{tname}"));
        let n: usize = dims.iter().product();
        let vals: Vec<f32> = (0..n).map(|_| center + r.sym(amp)).collect();
        let dims: Vec<u64> = dims.iter().map(|&x| x as u64).collect();
        w.add_tensor_f32(tname, t, &dims, &vals).unwrap();
    };
    let f32t = GgmlType::F32;
    let m = |cols: usize| 1.7 / (cols as f32).sqrt();
    let ps = shape.patch;
    // (the patch convolution stays f16 or f32, as the converter writes it)
    let conv_ty = if ty == GgmlType::F32 {
        f32t
    } else {
        GgmlType::F16
    };
    add(
        "v.patch_embd.weight",
        conv_ty,
        &[ps, ps, 3, d],
        m(3 * ps * ps),
        0.0,
    );
    add("v.patch_embd.bias", f32t, &[d], 0.05, 0.0);
    let side = shape.image_size / ps;
    add("v.position_embd.weight", f32t, &[d, side * side], 0.5, 0.0);
    for il in 0..shape.n_layer {
        let t = |s: &str| format!("v.blk.{il}.{s}");
        for p in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            add(&t(&format!("{p}.weight")), ty, &[d, d], m(d), 0.0);
            add(&t(&format!("{p}.bias")), f32t, &[d], 0.05, 0.0);
        }
        for ln in ["ln1", "ln2"] {
            add(&t(&format!("{ln}.weight")), f32t, &[d], 0.2, 1.0);
            add(&t(&format!("{ln}.bias")), f32t, &[d], 0.05, 0.0);
        }
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
    }
    add("v.post_ln.weight", f32t, &[d], 0.2, 1.0);
    add("v.post_ln.bias", f32t, &[d], 0.05, 0.0);
    let merged = d * shape.scale * shape.scale;
    if shape.projector == "idefics3" {
        add(
            "mm.model.fc.weight",
            ty,
            &[merged, shape.n_embd_out],
            m(merged),
            0.0,
        );
        return w.to_bytes().unwrap();
    }
    add("mm.input_norm.weight", f32t, &[merged], 0.2, 1.0);
    add("mm.input_norm.bias", f32t, &[merged], 0.05, 0.0);
    add(
        "mm.1.weight",
        ty,
        &[merged, shape.mm_hidden],
        m(merged),
        0.0,
    );
    add("mm.1.bias", f32t, &[shape.mm_hidden], 0.05, 0.0);
    add(
        "mm.2.weight",
        ty,
        &[shape.mm_hidden, shape.n_embd_out],
        m(shape.mm_hidden),
        0.0,
    );
    add("mm.2.bias", f32t, &[shape.n_embd_out], 0.05, 0.0);
    w.to_bytes().unwrap()
}

/// The marker tokens LFM2-VL's vocabulary has and mtmd looks up (`<|image_start|>`,
/// `<|image_end|>`, `<|img_thumbnail|>`, `<|img_row_R_col_C|>` for grids up to 10 x 10).
pub fn lfm2_vl_tokens() -> Vec<String> {
    let mut t: Vec<String> = ["<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"]
        .map(String::from)
        .to_vec();
    for r in 1..=10 {
        for c in 1..=10 {
            t.push(format!("<|img_row_{r}_col_{c}|>"));
        }
    }
    t
}

/// The marker tokens Idefics3's (SmolVLM's) vocabulary has and mtmd uses
/// (`<fake_token_around_image>`, `<global-img>`, `<row_R_col_C>` for grids up to 6 x 6,
/// `<image>`).
pub fn idefics3_tokens() -> Vec<String> {
    let mut t: Vec<String> = ["<fake_token_around_image>", "<image>", "<global-img>"]
        .map(String::from)
        .to_vec();
    for r in 1..=6 {
        for c in 1..=6 {
            t.push(format!("<row_{r}_col_{c}>"));
        }
    }
    t
}

/// A tokenizer-only GGUF: every `tokenizer.*` key of `base` with `extra` appended as control
/// tokens (type 3, score 0), as a vocabulary that has a model's special tokens has them.
pub fn with_control_tokens(base: &cera::gguf::GgufFile, extra: &[String]) -> Vec<u8> {
    use cera::gguf::{Array, Value};
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    for (k, val) in &base.metadata {
        if !k.starts_with("tokenizer.") {
            continue;
        }
        let v = match (k.as_str(), val) {
            ("tokenizer.ggml.tokens", Value::Array(Array::String(t))) => {
                Value::Array(Array::String(t.iter().chain(extra).cloned().collect()))
            }
            ("tokenizer.ggml.token_type", Value::Array(Array::I32(t))) => Value::Array(Array::I32(
                t.iter().copied().chain(extra.iter().map(|_| 3)).collect(),
            )),
            ("tokenizer.ggml.scores", Value::Array(Array::F32(t))) => Value::Array(Array::F32(
                t.iter().copied().chain(extra.iter().map(|_| 0.0)).collect(),
            )),
            _ => val.clone(),
        };
        w.set(k.clone(), v);
    }
    w.to_bytes().unwrap()
}
