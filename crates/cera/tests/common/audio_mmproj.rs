//! Random-weight mmproj files of LFM2-Audio's layout, as llama.cpp's converter names and
//! types them (`clip.projector_type` `lfm2a`; `a.conv1d.{0,2,3,5,6}.*` for the pre-encoder,
//! `a.pre_encode.out.*`, `a.blk.N.*` for the conformer blocks, `mm.a.mlp.{0,1,3}.*` for the
//! adapter, `a.position_embd.weight` for the audio-output codebooks mtmd reads a width from):
//! convolutions, biases and norms in f32, the other matrices in the type asked for.
//! Deterministic in their name.
#![allow(dead_code)]

use cera::gguf::GgufWriter;
use cera::quant::GgmlType;

/// The encoder's and adapter's shape.
pub struct AudioShape {
    pub n_mel: usize,
    pub channels: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_layer: usize,
    pub kernel: usize,
    /// The adapter's hidden width and the language model's embedding width.
    pub mm_hidden: usize,
    pub n_embd_out: usize,
}

/// Small enough for unit tests.
pub const TINY_AUDIO: AudioShape = AudioShape {
    n_mel: 16,
    channels: 16,
    n_embd: 32,
    n_ff: 64,
    n_head: 2,
    n_layer: 2,
    kernel: 9,
    mm_hidden: 64,
    n_embd_out: 40,
};

/// LFM2-Audio-1.5B's: the FastConformer (128 mel bands, 256 pre-encoder channels, 17 blocks
/// of 512, 8 heads, feed-forward 2048, depthwise kernel 9) and the adapter to LFM2-1.2B's
/// 2048 through 2048 (NeMo's FastConformer defaults, which LFM2-Audio's config keeps).
pub const LFM2_AUDIO_1_5B: AudioShape = AudioShape {
    n_mel: 128,
    channels: 256,
    n_embd: 512,
    n_ff: 2048,
    n_head: 8,
    n_layer: 17,
    kernel: 9,
    mm_hidden: 2048,
    n_embd_out: 2048,
};

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

/// GGUF bytes of a random LFM2-Audio mmproj of `shape`, its linear layers in `ty`; `skip`
/// leaves out the tensors whose names contain it, `extra` adds an f32 tensor of that name (for
/// hostile tests).
pub fn build(
    name: &str,
    s: &AudioShape,
    ty: GgmlType,
    skip: Option<&str>,
    extra: Option<&str>,
) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "clip");
    w.set("general.name", "cera random-weight audio mmproj");
    w.set("clip.projector_type", "lfm2a");
    w.set("clip.has_audio_encoder", true);
    let d = s.n_embd;
    w.set("clip.audio.embedding_length", d as u32);
    // (the converter writes d_model here; the feed-forward width is the tensors')
    w.set("clip.audio.feed_forward_length", d as u32);
    w.set("clip.audio.block_count", s.n_layer as u32);
    w.set("clip.audio.attention.head_count", s.n_head as u32);
    w.set("clip.audio.attention.layer_norm_epsilon", 1e-5f32);
    w.set("clip.audio.projection_dim", s.n_embd_out as u32);
    w.set("clip.audio.num_mel_bins", s.n_mel as u32);
    let mut add = |tname: &str, t: GgmlType, dims: &[usize], amp: f32, center: f32| {
        if skip.is_some_and(|x| tname.contains(x)) {
            return;
        }
        let mut r = Rng::new(&format!("{name}/{tname}"));
        let n: usize = dims.iter().product();
        let vals: Vec<f32> = (0..n).map(|_| center + r.sym(amp)).collect();
        let dims: Vec<u64> = dims.iter().map(|&x| x as u64).collect();
        w.add_tensor_f32(tname, t, &dims, &vals).unwrap();
    };
    let f = GgmlType::F32;
    let m = |cols: usize| 1.7 / (cols as f32).sqrt();
    let c = s.channels;
    add("a.conv1d.0.weight", f, &[3, 3, 1, c], m(9), 0.0);
    add("a.conv1d.0.bias", f, &[1, 1, c], 0.05, 0.0);
    for i in [2, 5] {
        add(&format!("a.conv1d.{i}.weight"), f, &[3, 3, 1, c], m(9), 0.0);
        add(&format!("a.conv1d.{i}.bias"), f, &[1, 1, c], 0.05, 0.0);
    }
    for i in [3, 6] {
        add(&format!("a.conv1d.{i}.weight"), f, &[1, 1, c, c], m(c), 0.0);
        add(&format!("a.conv1d.{i}.bias"), f, &[1, 1, c], 0.05, 0.0);
    }
    let flat = c * s.n_mel / 8;
    add("a.pre_encode.out.weight", ty, &[flat, d], m(flat), 0.0);
    add("a.pre_encode.out.bias", f, &[d], 0.05, 0.0);
    let hd = d / s.n_head;
    for il in 0..s.n_layer {
        let t = |x: &str| format!("a.blk.{il}.{x}");
        for norm in ["ffn_norm", "ln1", "norm_conv", "ffn_norm_1", "ln2"] {
            add(&t(&format!("{norm}.weight")), f, &[d], 0.2, 1.0);
            add(&t(&format!("{norm}.bias")), f, &[d], 0.05, 0.0);
        }
        for (up, down) in [("ffn_up", "ffn_down"), ("ffn_up_1", "ffn_down_1")] {
            add(&t(&format!("{up}.weight")), ty, &[d, s.n_ff], m(d), 0.0);
            add(&t(&format!("{up}.bias")), f, &[s.n_ff], 0.05, 0.0);
            add(
                &t(&format!("{down}.weight")),
                ty,
                &[s.n_ff, d],
                m(s.n_ff),
                0.0,
            );
            add(&t(&format!("{down}.bias")), f, &[d], 0.05, 0.0);
        }
        for p in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            add(&t(&format!("{p}.weight")), ty, &[d, d], m(d), 0.0);
            add(&t(&format!("{p}.bias")), f, &[d], 0.05, 0.0);
        }
        add(&t("linear_pos.weight"), ty, &[d, d], m(d), 0.0);
        add(&t("pos_bias_u"), f, &[hd, s.n_head], 0.1, 0.0);
        add(&t("pos_bias_v"), f, &[hd, s.n_head], 0.1, 0.0);
        add(&t("conv_pw1.weight"), f, &[d, 2 * d], m(d), 0.0);
        add(&t("conv_pw1.bias"), f, &[2 * d], 0.05, 0.0);
        add(&t("conv_dw.weight"), f, &[s.kernel, d], m(s.kernel), 0.0);
        add(&t("conv_dw.bias"), f, &[d], 0.05, 0.0);
        // the batch norm as the converter folds it: a scale near 1 and a shift
        add(&t("conv_norm.weight"), f, &[d], 0.2, 1.0);
        add(&t("conv_norm.bias"), f, &[d], 0.05, 0.0);
        add(&t("conv_pw2.weight"), f, &[d, d], m(d), 0.0);
        add(&t("conv_pw2.bias"), f, &[d], 0.05, 0.0);
    }
    add("mm.a.mlp.0.weight", f, &[d], 0.2, 1.0);
    add("mm.a.mlp.0.bias", f, &[d], 0.05, 0.0);
    add("mm.a.mlp.1.weight", ty, &[d, s.mm_hidden], m(d), 0.0);
    add("mm.a.mlp.1.bias", f, &[s.mm_hidden], 0.05, 0.0);
    add(
        "mm.a.mlp.3.weight",
        ty,
        &[s.mm_hidden, s.n_embd_out],
        m(s.mm_hidden),
        0.0,
    );
    add("mm.a.mlp.3.bias", f, &[s.n_embd_out], 0.05, 0.0);
    // the audio-output codebooks: mtmd takes its width as the projector's and asserts it has
    // at least as many rows as the clip has frames after the first halving
    add("a.position_embd.weight", f, &[s.n_embd_out, 1024], 0.5, 0.0);
    if let Some(x) = extra {
        add(x, f, &[d], 0.1, 0.0);
    }
    w.to_bytes().unwrap()
}

/// One mmproj with both halves (as llama.cpp writes a model that reads images and audio):
/// the metadata and tensors of `vision` and `audio` together, each projector under its own key
/// (`clip.vision.projector_type`, `clip.audio.projector_type`).
pub fn combine(vision: Vec<u8>, audio: Vec<u8>) -> Vec<u8> {
    use cera::gguf::GgufFile;
    let (v, a) = (
        GgufFile::from_bytes(vision).unwrap(),
        GgufFile::from_bytes(audio).unwrap(),
    );
    let mut w = GgufWriter::new();
    for (file, half) in [(&v, "vision"), (&a, "audio")] {
        for (k, val) in &file.metadata {
            if k == "clip.projector_type" {
                w.set(format!("clip.{half}.projector_type"), val.clone());
            } else if !k.starts_with("general.alignment") {
                w.set(k.clone(), val.clone());
            }
        }
    }
    w.set("clip.has_vision_encoder", true);
    w.set("clip.has_audio_encoder", true);
    for file in [&v, &a] {
        for t in &file.tensors {
            let data = file.tensor_data(t).to_vec();
            w.add_tensor_raw(t.name.clone(), t.ty, &t.shape, data)
                .unwrap();
        }
    }
    w.to_bytes().unwrap()
}
