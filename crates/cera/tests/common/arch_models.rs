//! Tiny random-weight models, one or more per architecture, for parity tests against llama.cpp.
//!
//! Shared by `examples/make_test_model.rs` (which writes them for `scripts/gen-arch-fixtures.py`)
//! and `tests/arch_parity.rs` (which rebuilds them and checks their sha256 against the fixture).
//! The bytes must not depend on the platform: values come from an integer PRNG and only `+ - * /`
//! and `sqrt` (correctly rounded everywhere), then the reference quantizers.
//!
//! Each model carries the SmolLM2 tokenizer (every `tokenizer.*` key), so llama.cpp can tokenize
//! the prompts; n_embd stays small to keep the 49152-row embedding cheap.
#![allow(dead_code)]

use cera::gguf::{GgufFile, GgufWriter, Value};
use cera::quant::GgmlType;

/// One test model.
#[derive(Clone, Debug)]
pub struct Variant {
    pub name: &'static str,
    pub arch: &'static str,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    /// Type of the layer matrices and the token embedding.
    pub ty: GgmlType,
    /// Type of `ffn_down` (its rows are `n_ff` long, so K-quants fit when n_ff is 256k).
    pub ffn_down_ty: GgmlType,
    /// Type of an untied `output` (None: tied to the token embedding).
    pub output_ty: Option<GgmlType>,
    /// Type of `token_embd`.
    pub embd_ty: GgmlType,
    /// Size of what each block adds to the residual stream, relative to the embedding.
    pub block_scale: f32,
    /// Extra architecture features, see [`build`].
    pub features: &'static [Feature],
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Feature {
    /// Llama 3 `rope_freqs.weight`.
    RopeFreqs,
    /// Q/K/V biases.
    QkvBias,
    /// `rope.scaling.type = yarn` with this factor and original context.
    Yarn(f32, u32),
    /// `rope.scaling.type = linear` with this factor.
    LinearRope(f32),
    /// `attention.sliding_window`.
    Window(u32),
    /// `attention.sliding_window_pattern` as a period.
    SwaPeriod(u32),
    /// `rope.freq_base_swa`.
    SwaBase(f32),
    /// `rope.freq_base`.
    RopeBase(f32),
    /// Gemma soft-capping keys: attention, final.
    Softcap(f32, f32),
    /// Only `final_logit_softcapping` (gemma3).
    FinalSoftcap(f32),
    /// Phi-3 LongRoPE factor tensors and `rope.scaling.attn_factor`.
    LongRope(f32),
    /// Granite multipliers: embedding, residual, attention, logit.
    Granite(f32, f32, f32, f32),
    /// LFM2: the attention layers (the others are short convolutions) and `shortconv.l_cache`.
    Lfm2(&'static [usize], u32),
    /// lfm2moe: experts, experts per token, expert FFN size, leading dense blocks.
    Moe(u32, u32, u32, u32),
    /// The real model's vocabulary size: the tokenizer is padded with unused tokens up to it
    /// (never cut), so the embedding and output have the real shape with any tokenizer.
    Vocab(usize),
}

fn v(
    name: &'static str,
    arch: &'static str,
    n_layer: usize,
    (n_head, n_head_kv, head_dim): (usize, usize, usize),
    n_ff: usize,
    output_ty: Option<GgmlType>,
    features: &'static [Feature],
) -> Variant {
    Variant {
        name,
        arch,
        n_layer,
        n_embd: 64,
        n_head,
        n_head_kv,
        head_dim,
        n_ff,
        ty: GgmlType::F32,
        ffn_down_ty: GgmlType::F32,
        output_ty,
        embd_ty: GgmlType::F32,
        block_scale: 0.7,
        features,
    }
}

use Feature::*;
use GgmlType::{F16, F32, Q4_0, Q4_K, Q8_0};

/// An LFM2-family model of `n_embd` with `n_head` heads of 16 (or 64 from n_embd 1024 up).
fn lfm2(
    name: &'static str,
    arch: &'static str,
    n_layer: usize,
    n_embd: usize,
    (n_head, n_head_kv): (usize, usize),
    n_ff: usize,
    features: &'static [Feature],
) -> Variant {
    Variant {
        name,
        arch,
        n_layer,
        n_embd,
        n_head,
        n_head_kv,
        head_dim: n_embd / n_head,
        n_ff,
        ty: F32,
        ffn_down_ty: F32,
        output_ty: None,
        embd_ty: F32,
        block_scale: 0.7,
        features,
    }
}

/// LFM2-350M's layer pattern (16 layers).
const LFM2_350M_ATTN: &[usize] = &[2, 5, 8, 10, 12, 14];

/// The LFM2 test models: tiny ones (every weight type, a sliding-window one), the LFM2-350M
/// shape (quantized only: F32 would be 1.4 GB), and LFM2-8B-A1B's routing (32 experts, top 4,
/// sigmoid router with selection bias, 2 leading dense blocks) at a small width and 8 layers
/// (6 routed: every routed layer multiplies the chances of a routing near-tie, see
/// `arch_parity.rs`).
pub fn lfm2_variants() -> Vec<Variant> {
    let q8 = |x: Variant| quant(x, Q8_0, Q8_0);
    let q4 = |x: Variant| quant(x, Q4_0, Q4_0);
    let q4k = |x: Variant| quant(x, Q4_K, Q4_K);
    const TINY: &[Feature] = &[Lfm2(&[2, 4], 3), RopeBase(1000000.0)];
    const SWA: &[Feature] = &[Lfm2(&[1, 3, 4], 3), Window(5)];
    const L350M: &[Feature] = &[Lfm2(LFM2_350M_ATTN, 3), RopeBase(1000000.0)];
    const MOE_8: &[Feature] = &[Lfm2(&[2, 5], 3), Moe(32, 4, 64, 2), RopeBase(1000000.0)];
    const MOE_256: &[Feature] = &[Lfm2(&[2, 5], 3), Moe(32, 4, 256, 2), RopeBase(1000000.0)];
    vec![
        lfm2("lfm2_f32", "lfm2", 6, 64, (4, 2), 128, TINY),
        lfm2("lfm2_swa_f32", "lfm2", 5, 64, (4, 2), 128, SWA),
        q8(lfm2("lfm2_q8_0", "lfm2", 6, 64, (4, 2), 128, TINY)),
        q4(lfm2("lfm2_q4_0", "lfm2", 6, 64, (4, 2), 128, TINY)),
        q4k(lfm2("lfm2_q4_k", "lfm2", 6, 256, (4, 2), 512, TINY)),
        q8(lfm2(
            "lfm2_350m_q8_0",
            "lfm2",
            16,
            1024,
            (16, 8),
            4608,
            L350M,
        )),
        q4(lfm2(
            "lfm2_350m_q4_0",
            "lfm2",
            16,
            1024,
            (16, 8),
            4608,
            L350M,
        )),
        q4k(lfm2(
            "lfm2_350m_q4_k",
            "lfm2",
            16,
            1024,
            (16, 8),
            4608,
            L350M,
        )),
        lfm2("lfm2moe_f32", "lfm2moe", 8, 64, (4, 1), 128, MOE_8),
        q8(lfm2("lfm2moe_q8_0", "lfm2moe", 8, 64, (4, 1), 128, MOE_8)),
        q4(lfm2("lfm2moe_q4_0", "lfm2moe", 8, 64, (4, 1), 128, MOE_8)),
        q4k(lfm2(
            "lfm2moe_q4_k",
            "lfm2moe",
            8,
            256,
            (4, 1),
            512,
            MOE_256,
        )),
    ]
}

/// The quantized variant of a model: layer matrices in `ty` (ffn_down in `down`), the token
/// embedding in `ty` unless it is also the output, the output in F32, blocks adding 1/50 of the
/// embedding to the residual stream (F32 variants: 0.7).
///
/// Why: quantizing activations to Q8_0 (as both engines do for these weights) is discontinuous,
/// so the engines' small rounding differences (f16 KV cache, llama.cpp's f16 flash-attention
/// accumulator, summation order) re-round some activations, each by a whole Q8_0 step; the
/// difference grows like the square root of its cause through every quantized matmul. With a
/// Q8_0 output and blocks as large as the embedding, that noise alone reaches ~0.1 std of the
/// logits on these random models. Embedding lookups and F32 matmuls stay exact, so the logits
/// are compared tightly, while a wrong block still moves them far more than the tolerance.
fn quant(mut x: Variant, ty: GgmlType, down: GgmlType) -> Variant {
    x.ty = ty;
    x.ffn_down_ty = down;
    match x.output_ty {
        None => x.embd_ty = F32,
        Some(_) => {
            x.embd_ty = ty;
            x.output_ty = Some(F32);
        }
    }
    x.block_scale = 0.02;
    x
}

/// Language models of media parity pairs (outside the architecture fixtures): LFM2-1.2B's
/// width (LFM2-Audio-1.5B's language model) in 4 layers, the text side of the audio pair, as
/// wide as the audio adapter's output; and a llama as wide as SmolVLM's.
pub fn media_variants() -> Vec<Variant> {
    const WIDE: &[Feature] = &[Lfm2(&[2], 3), RopeBase(1000000.0)];
    // (the tied embeddings in Q4_0 too: at this width and SmolLM2's vocabulary they would be
    // 400 MB in f32)
    let mut wide = quant(
        lfm2("lfm2_2048w_q4_0", "lfm2", 4, 2048, (32, 8), 2048, WIDE),
        Q4_0,
        Q4_0,
    );
    wide.embd_ty = Q4_0;
    // SmolLM2-135M's width (SmolVLM-256M's language model) in 4 layers: the text side of the
    // Idefics3 pair
    let smol = quant(
        Variant {
            n_embd: 576,
            ..v("llama_576w_q8_0", "llama", 4, (9, 3, 64), 1536, None, &[])
        },
        Q8_0,
        Q8_0,
    );
    vec![wide, smol]
}

/// Every test model. Names are fixture folder names.
pub fn variants() -> Vec<Variant> {
    let q8 = |x: Variant| quant(x, Q8_0, Q8_0);
    // Q4_0 matrices and embedding, Q4_K ffn_down (256-long rows), like a mixed Q4 file
    let q4 = |x: Variant| quant(x, Q4_0, Q4_K);
    vec![
        v("llama_f32", "llama", 2, (4, 2, 32), 128, None, &[]),
        q8(v("llama_q8_0", "llama", 2, (4, 2, 32), 128, None, &[])),
        v(
            "llama3_f32",
            "llama",
            2,
            (4, 2, 32),
            128,
            Some(F32),
            &[RopeFreqs, RopeBase(500000.0)],
        ),
        q4(v(
            "llama3_q4_0",
            "llama",
            2,
            (4, 2, 32),
            256,
            Some(F32),
            &[RopeFreqs, RopeBase(500000.0)],
        )),
        v(
            "qwen2_f32",
            "qwen2",
            2,
            (2, 1, 32),
            128,
            None,
            &[QkvBias, RopeBase(1000000.0), Yarn(4.0, 32)],
        ),
        q8(v(
            "qwen2_q8_0",
            "qwen2",
            2,
            (2, 1, 32),
            128,
            None,
            &[QkvBias],
        )),
        v(
            "qwen3_f32",
            "qwen3",
            2,
            (4, 2, 32),
            128,
            None,
            &[RopeBase(1000000.0)],
        ),
        q8(v("qwen3_q8_0", "qwen3", 2, (4, 2, 32), 128, Some(F32), &[])),
        v(
            "granite_f32",
            "granite",
            2,
            (4, 2, 32),
            128,
            None,
            &[Granite(6.0, 0.5, 0.05, 2.0)],
        ),
        q8(v(
            "granite_q8_0",
            "granite",
            2,
            (4, 2, 32),
            128,
            None,
            &[Granite(6.0, 0.5, 0.05, 2.0)],
        )),
        v(
            "gemma2_f32",
            "gemma2",
            2,
            (4, 2, 32),
            128,
            None,
            &[Window(6), Softcap(3.0, 30.0)],
        ),
        // default soft-caps (50, 30)
        q8(v(
            "gemma2_q8_0",
            "gemma2",
            3,
            (4, 2, 32),
            128,
            None,
            &[Window(6)],
        )),
        v(
            "gemma3_f32",
            "gemma3",
            6,
            (4, 2, 32),
            128,
            None,
            &[Window(8), RopeBase(1000000.0), LinearRope(8.0)],
        ),
        // the optional keys: layer pattern, local RoPE base, final soft-cap; untied output
        v(
            "gemma3_swa_f32",
            "gemma3",
            4,
            (4, 2, 32),
            128,
            Some(F32),
            &[
                Window(5),
                SwaPeriod(2),
                SwaBase(20000.0),
                FinalSoftcap(20.0),
            ],
        ),
        q4(v(
            "gemma3_q4_0",
            "gemma3",
            4,
            (4, 2, 32),
            256,
            Some(F32),
            &[
                Window(5),
                SwaPeriod(2),
                SwaBase(20000.0),
                FinalSoftcap(20.0),
            ],
        )),
        v(
            "phi3_f32",
            "phi3",
            2,
            (2, 1, 32),
            128,
            None,
            &[LongRope(1.19)],
        ),
        q8(v("phi3_q8_0", "phi3", 2, (2, 1, 32), 128, None, &[])),
        // with OLMo 3's sliding window (three local layers of four)
        v(
            "olmo2_f32",
            "olmo2",
            4,
            (2, 1, 32),
            128,
            Some(F32),
            &[RopeBase(500000.0), Window(8)],
        ),
        q8(v("olmo2_q8_0", "olmo2", 2, (2, 1, 32), 128, Some(F32), &[])),
    ]
    .into_iter()
    .chain(lfm2_variants())
    .collect()
}

/// Models for benchmarks only (no fixtures): the LFM2-350M shape with every matrix in Q4_0
/// (the tied embedding too, as in a real Q4_0 file), and a wide lfm2moe (LFM2-8B-A1B's 32
/// experts, top 4, expert FFN 896) where grouped expert dispatch has something to show.
pub fn bench_variants() -> Vec<Variant> {
    const L350M: &[Feature] = &[Lfm2(LFM2_350M_ATTN, 3), RopeBase(1000000.0)];
    const MOE: &[Feature] = &[Lfm2(&[2, 5], 3), Moe(32, 4, 896, 2), RopeBase(1000000.0)];
    let all_q4 = |mut x: Variant| {
        x = quant(x, Q4_0, Q4_0);
        x.embd_ty = Q4_0;
        x
    };
    vec![
        all_q4(lfm2(
            "lfm2_350m_bench_q4_0",
            "lfm2",
            16,
            1024,
            (16, 8),
            4608,
            L350M,
        )),
        all_q4(lfm2(
            "lfm2moe_bench_q4_0",
            "lfm2moe",
            6,
            1024,
            (16, 4),
            4608,
            MOE,
        )),
    ]
}

/// Real models' shapes with random F16 weights, for benchmarks on machines that cannot fetch
/// the models (the GPU machine): quantize them with `cera quantize` to the real files' types.
/// Built with the real model's tokenizer (`make_test_model --tokenizer VOCAB.gguf`), the vocab
/// is the real one too, so every matrix has the real model's shape.
pub fn shape_variants() -> Vec<Variant> {
    const SMOL: &[Feature] = &[RopeBase(100000.0)];
    const QWEN: &[Feature] = &[QkvBias, RopeBase(1000000.0)];
    const L350M: &[Feature] = &[Lfm2(LFM2_350M_ATTN, 3), RopeBase(1000000.0)];
    const GEMMA3_1B: &[Feature] = &[
        Window(512),
        SwaPeriod(6),
        RopeBase(1000000.0),
        SwaBase(10000.0),
    ];
    let f16 = |mut x: Variant| {
        x = quant(x, F16, F16);
        x.embd_ty = F16;
        x
    };
    let dense = |name, arch, n_layer, n_embd, heads, n_ff, features| {
        let mut x = lfm2(name, arch, n_layer, n_embd, heads, n_ff, features);
        x.head_dim = 64;
        x
    };
    vec![
        // SmolLM2-135M: 30 layers of 576, 9 heads of 64 (3 KV), FFN 1536, tied output
        f16(dense(
            "smollm2_135m_shape_f16",
            "llama",
            30,
            576,
            (9, 3),
            1536,
            SMOL,
        )),
        // Qwen2.5-0.5B: 24 layers of 896, 14 heads of 64 (2 KV), FFN 4864, QKV biases, tied
        f16(dense(
            "qwen2_5_0_5b_shape_f16",
            "qwen2",
            24,
            896,
            (14, 2),
            4864,
            QWEN,
        )),
        // LFM2-350M: 16 layers of 1024 (6 attention, 10 short convolutions), FFN 4608
        f16(lfm2(
            "lfm2_350m_shape_f16",
            "lfm2",
            16,
            1024,
            (16, 8),
            4608,
            L350M,
        )),
        // Gemma 3 1B: 26 layers of 1152, 4 heads of 256 (1 KV), FFN 6912 (GeGLU), a 512-token
        // window on five layers of six
        f16(Variant {
            head_dim: 256,
            ..lfm2(
                "gemma3_1b_shape_f16",
                "gemma3",
                26,
                1152,
                (4, 1),
                6912,
                GEMMA3_1B,
            )
        }),
    ]
}

/// The CPU benchmark suite (issue #13): every architecture we run, at the shape of a real model
/// people run, with its real vocabulary size (see [`Feature::Vocab`]); random F16 weights,
/// quantized by `scripts/bench-suite.sh` to the `Q4_K_M` mix llama-quantize gives that shape.
/// SmolLM2 and Qwen2.5 are in the suite as the real files.
pub fn suite_variants() -> Vec<Variant> {
    const GEMMA3_270M: &[Feature] = &[
        Window(512),
        SwaPeriod(6),
        RopeBase(1000000.0),
        SwaBase(10000.0),
        Vocab(262144),
    ];
    const GEMMA3_1B: &[Feature] = GEMMA3_270M;
    const GEMMA2_2B: &[Feature] = &[Window(4096), Softcap(50.0, 30.0), Vocab(256000)];
    const PHI3_MINI: &[Feature] = &[RopeBase(10000.0), Vocab(32064)];
    const OLMO2_1B: &[Feature] = &[RopeBase(500000.0), Vocab(100352)];
    const QWEN3_0_6B: &[Feature] = &[RopeBase(1000000.0), Vocab(151936)];
    const GRANITE3_2B: &[Feature] = &[
        Granite(12.0, 0.22, 0.015625, 8.0),
        RopeBase(5000000.0),
        Vocab(49155),
    ];
    const LLAMA32_1B: &[Feature] = &[RopeFreqs, RopeBase(500000.0), Vocab(128256)];
    const LFM2: &[Feature] = &[Lfm2(LFM2_350M_ATTN, 3), RopeBase(1000000.0), Vocab(65536)];
    // LFM2-8B-A1B's widths and routing (32 experts, top 4, expert FFN 1792, dense FFN 7168)
    // over 8 of its 24 layers (2 dense, 6 routed; attention at 2 and 6 as in its pattern)
    const LFM2MOE: &[Feature] = &[
        Lfm2(&[2, 6], 3),
        Moe(32, 4, 1792, 2),
        RopeBase(1000000.0),
        Vocab(65536),
    ];
    const TINY: &[Feature] = &[Lfm2(&[2, 4], 3), RopeBase(1000000.0)];
    // (name, arch, layers, width, (heads, KV heads, head dim), FFN, untied output, features)
    type Row = (
        &'static str,
        &'static str,
        usize,
        usize,
        (usize, usize, usize),
        usize,
        bool,
        &'static [Feature],
    );
    let rows: [Row; 12] = [
        (
            "gemma3_270m_shape_f16",
            "gemma3",
            18,
            640,
            (4, 1, 256),
            2048,
            false,
            GEMMA3_270M,
        ),
        (
            "gemma3_1b_suite_f16",
            "gemma3",
            26,
            1152,
            (4, 1, 256),
            6912,
            false,
            GEMMA3_1B,
        ),
        (
            "gemma2_2b_shape_f16",
            "gemma2",
            26,
            2304,
            (8, 4, 256),
            9216,
            false,
            GEMMA2_2B,
        ),
        (
            "phi3_mini_shape_f16",
            "phi3",
            32,
            3072,
            (32, 32, 96),
            8192,
            true,
            PHI3_MINI,
        ),
        (
            "olmo2_1b_shape_f16",
            "olmo2",
            16,
            2048,
            (16, 16, 128),
            8192,
            true,
            OLMO2_1B,
        ),
        (
            "qwen3_0_6b_shape_f16",
            "qwen3",
            28,
            1024,
            (16, 8, 128),
            3072,
            false,
            QWEN3_0_6B,
        ),
        (
            "granite3_2b_shape_f16",
            "granite",
            40,
            2048,
            (32, 8, 64),
            8192,
            false,
            GRANITE3_2B,
        ),
        (
            "llama3_2_1b_shape_f16",
            "llama",
            16,
            2048,
            (32, 8, 64),
            8192,
            false,
            LLAMA32_1B,
        ),
        (
            "lfm2_350m_suite_f16",
            "lfm2",
            16,
            1024,
            (16, 8, 64),
            4608,
            false,
            LFM2,
        ),
        (
            "lfm2_1_2b_shape_f16",
            "lfm2",
            16,
            2048,
            (32, 8, 64),
            8192,
            false,
            LFM2,
        ),
        (
            "lfm2moe_8b_a1b_8l_shape_f16",
            "lfm2moe",
            8,
            2048,
            (32, 8, 64),
            7168,
            false,
            LFM2MOE,
        ),
        // the tiny model (7.7 M parameters with SmolLM2's 49152 tokens), where fixed cost
        // per op and per token dominates
        (
            "lfm2_tiny_8m_f16",
            "lfm2",
            6,
            128,
            (4, 2, 32),
            512,
            false,
            TINY,
        ),
    ];
    rows.into_iter()
        .map(
            |(name, arch, n_layer, n_embd, (h, hkv, hd), n_ff, untied, features)| {
                let mut x = lfm2(name, arch, n_layer, n_embd, (h, hkv), n_ff, features);
                x.head_dim = hd;
                x = quant(x, F16, F16);
                x.output_ty = untied.then_some(F16);
                x.embd_ty = F16;
                x
            },
        )
        .collect()
}

/// Models for the LoRA tests only (no fixtures of their own): lfm2moe with an untied output,
/// so that llama.cpp can run an adapter on the token embeddings (with a tied output it
/// applies the embedding's pair to the output projection too, whose shapes do not match).
pub fn lora_variants() -> Vec<Variant> {
    const MOE_8: &[Feature] = &[Lfm2(&[2, 5], 3), Moe(32, 4, 64, 2), RopeBase(1000000.0)];
    let mut x = lfm2("lfm2moe_untied_q8_0", "lfm2moe", 8, 64, (4, 1), 128, MOE_8);
    x.output_ty = Some(F32);
    vec![quant(x, Q8_0, Q8_0)]
}

pub fn variant(name: &str) -> Variant {
    variants()
        .into_iter()
        .chain(bench_variants())
        .chain(lora_variants())
        .chain(shape_variants())
        .chain(media_variants())
        .chain(suite_variants())
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no test model {name}"))
}

/// splitmix64, seeded per tensor from its name, so values do not depend on the order of tensors.
struct Rng(u64);

impl Rng {
    fn new(variant: &str, tensor: &str) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in variant.bytes().chain([0]).chain(tensor.bytes()) {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Rng(h)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1), exactly representable.
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Roughly normal (sum of four uniforms), mean 0, standard deviation 1.
    fn normal(&mut self) -> f32 {
        let s = self.unit() + self.unit() + self.unit() + self.unit() - 2.0;
        s * 1.732_050_8
    }
}

struct Builder<'a> {
    v: &'a Variant,
    w: GgufWriter,
}

impl Builder<'_> {
    fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.v.arch)
    }
    fn set(&mut self, suffix: &str, value: impl Into<Value>) {
        let k = self.key(suffix);
        self.w.set(k, value);
    }
    fn tensor(&mut self, name: &str, ty: GgmlType, shape: &[usize], values: Vec<f32>) {
        let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        self.w
            .add_tensor_f32(name, ty, &shape, &values)
            .unwrap_or_else(|e| panic!("{}: {name}: {e}", self.v.name));
    }
    /// `[cols, rows]` matrix with entries of standard deviation `gain / sqrt(cols)`.
    fn matrix(&mut self, name: &str, ty: GgmlType, cols: usize, rows: usize, gain: f32) {
        let mut r = Rng::new(self.v.name, name);
        let s = gain / (cols as f32).sqrt();
        let vals = (0..cols * rows).map(|_| r.normal() * s).collect();
        self.tensor(name, ty, &[cols, rows], vals);
    }
    /// `n` stacked `[cols, rows]` matrices (MoE experts), ggml shape `[cols, rows, n]`.
    fn stacked(&mut self, name: &str, ty: GgmlType, cols: usize, rows: usize, n: usize, gain: f32) {
        let mut r = Rng::new(self.v.name, name);
        let s = gain / (cols as f32).sqrt();
        let vals = (0..cols * rows * n).map(|_| r.normal() * s).collect();
        self.tensor(name, ty, &[cols, rows, n], vals);
    }
    /// Vector of `center ± spread` (norm weights, biases).
    fn vector(&mut self, name: &str, n: usize, center: f32, spread: f32) {
        let mut r = Rng::new(self.v.name, name);
        let vals = (0..n)
            .map(|_| center + spread * (2.0 * r.unit() - 1.0))
            .collect();
        self.tensor(name, F32, &[n], vals);
    }
    /// A `[n_embd, n_vocab]` embedding whose rows have different norms (a few large ones), so
    /// the top logits stand apart and greedy decoding has few near-ties.
    fn embedding(&mut self, name: &str, ty: GgmlType, n_embd: usize, n_vocab: usize, std: f32) {
        let mut r = Rng::new(self.v.name, name);
        let mut vals = Vec::with_capacity(n_embd * n_vocab);
        for _ in 0..n_vocab {
            let u = r.unit();
            let row = std * (0.5 + 2.0 * u * u * u * u);
            vals.extend((0..n_embd).map(|_| r.normal() * row));
        }
        self.tensor(name, ty, &[n_embd, n_vocab], vals);
    }
    fn has(&self, f: fn(&Feature) -> bool) -> bool {
        self.v.features.iter().any(f)
    }
}

/// Builds the GGUF of `v` with the tokenizer of `tokenizer` (every `tokenizer.*` key).
pub fn build(v: &Variant, tokenizer: &GgufFile) -> Vec<u8> {
    let mut b = Builder {
        v,
        w: GgufWriter::new(),
    };
    let arch = v.arch;
    b.w.set("general.architecture", arch);
    // not the arch: llama.cpp changes special-token attributes of models named "phi3"
    b.w.set("general.name", "cera random-weight test model");
    let d = v.n_embd;
    let n_vocab = tokenizer
        .get_str_array("tokenizer.ggml.tokens")
        .expect("tokenizer tokens")
        .len();
    let (qd, kd) = (v.n_head * v.head_dim, v.n_head_kv * v.head_dim);
    let gemma = arch.starts_with("gemma");
    b.set("context_length", 4096u32);
    b.set("embedding_length", d as u32);
    b.set("block_count", v.n_layer as u32);
    b.set("feed_forward_length", v.n_ff as u32);
    b.set("attention.head_count", v.n_head as u32);
    let lfm2_attn = v.features.iter().find_map(|f| match f {
        Lfm2(attn, _) => Some(*attn),
        _ => None,
    });
    match lfm2_attn {
        // one entry per layer, 0 for convolution layers
        Some(attn) => b.set(
            "attention.head_count_kv",
            (0..v.n_layer)
                .map(|il| {
                    if attn.contains(&il) {
                        v.n_head_kv as u32
                    } else {
                        0
                    }
                })
                .collect::<Vec<u32>>(),
        ),
        None => b.set("attention.head_count_kv", v.n_head_kv as u32),
    }
    if v.head_dim != d / v.n_head {
        b.set("attention.key_length", v.head_dim as u32);
        b.set("attention.value_length", v.head_dim as u32);
    }
    b.set("rope.dimension_count", v.head_dim as u32);
    b.set(
        "attention.layer_norm_rms_epsilon",
        if gemma { 1e-6f32 } else { 1e-5f32 },
    );
    for f in v.features {
        match *f {
            RopeBase(base) => b.set("rope.freq_base", base),
            Yarn(factor, orig) => {
                b.set("rope.scaling.type", "yarn");
                b.set("rope.scaling.factor", factor);
                b.set("rope.scaling.original_context_length", orig);
            }
            LinearRope(factor) => {
                b.set("rope.scaling.type", "linear");
                b.set("rope.scaling.factor", factor);
            }
            Window(w) => b.set("attention.sliding_window", w),
            SwaPeriod(p) => b.set("attention.sliding_window_pattern", p),
            SwaBase(base) => b.set("rope.freq_base_swa", base),
            Softcap(attn, fin) => {
                b.set("attn_logit_softcapping", attn);
                b.set("final_logit_softcapping", fin);
            }
            FinalSoftcap(fin) => b.set("final_logit_softcapping", fin),
            LongRope(attn_factor) => {
                b.set("context_length", 131072u32);
                b.set("rope.scaling.original_context_length", 4096u32);
                b.set("rope.scaling.attn_factor", attn_factor);
            }
            Granite(embd, resid, attn, logit) => {
                b.set("embedding_scale", embd);
                b.set("residual_scale", resid);
                b.set("attention.scale", attn);
                b.set("logit_scale", logit);
            }
            Lfm2(_, l_cache) => b.set("shortconv.l_cache", l_cache),
            Moe(n_expert, n_used, n_ff_exp, lead) => {
                b.set("expert_count", n_expert);
                b.set("expert_used_count", n_used);
                b.set("expert_feed_forward_length", n_ff_exp);
                b.set("leading_dense_block_count", lead);
                b.set("expert_gating_func", 2u32);
            }
            RopeFreqs | QkvBias | Vocab(_) => {}
        }
    }
    let pad_to = v.features.iter().find_map(|f| match f {
        Vocab(n) => Some(*n),
        _ => None,
    });
    let n_vocab = pad_to.map_or(n_vocab, |n| n.max(n_vocab));
    for (k, val) in &tokenizer.metadata {
        if k.starts_with("tokenizer.") {
            b.w.set(k.clone(), pad_vocab(k, val, n_vocab));
        }
    }

    // The embedded token has RMS ~1 in the residual stream (after gemma's sqrt(n_embd) or
    // granite's multiplier); each block adds `block_scale` of that (see `quant`).
    let input_scale = match (arch, v.features.iter().find(|f| matches!(f, Granite(..)))) {
        ("gemma2" | "gemma3", _) => (d as f32).sqrt(),
        (_, Some(Granite(e, ..))) => *e,
        _ => 1.0,
    };
    let tied = v.output_ty.is_none();
    let embd_std = 1.0 / input_scale;
    b.embedding("token_embd.weight", v.embd_ty, d, n_vocab, embd_std);
    if let Some(ty) = v.output_ty {
        b.embedding("output.weight", ty, d, n_vocab, 1.0);
    }
    // The final norm's weight sets the logit scale: about 6 standard deviations (before
    // granite's divisor; rows have RMS scale ~1.046, see `embedding`). With a tied output its
    // signs are random: the stream carries the input token, and positive weights would score
    // that token highest, so greedy decoding would repeat it forever.
    let out_std = if tied { embd_std } else { 1.0 };
    let logit_div = match v.features.iter().find(|f| matches!(f, Granite(..))) {
        Some(Granite(.., l)) => *l,
        _ => 1.0,
    };
    let g = 6.0 * logit_div / ((d as f32).sqrt() * out_std * 1.046);
    let mut r = Rng::new(v.name, "output_norm.weight");
    let norm: Vec<f32> = (0..d)
        .map(|_| {
            let m = g * (0.75 + 0.5 * r.unit());
            if tied && r.unit() < 0.5 { -m } else { m }
        })
        .collect();
    let out_norm = if lfm2_attn.is_some() {
        "token_embd_norm.weight"
    } else {
        "output_norm.weight"
    };
    b.tensor(out_norm, F32, &[d], norm);
    if b.has(|f| *f == RopeFreqs) {
        // Llama 3 style: 1 for the fast dimensions rising to 8 for the slow ones
        let n = v.head_dim / 2;
        let vals = (0..n)
            .map(|i| 1.0 + 7.0 * ((i as f32 - n as f32 / 4.0) / (n as f32 / 2.0)).clamp(0.0, 1.0))
            .collect();
        b.tensor("rope_freqs.weight", F32, &[n], vals);
    }
    if b.has(|f| matches!(f, LongRope(_))) {
        let n = v.head_dim / 2;
        let short = (0..n).map(|i| 1.0 + 0.05 * i as f32).collect();
        let long = (0..n).map(|i| 1.0 + 3.0 * i as f32).collect();
        b.tensor("rope_factors_short.weight", F32, &[n], short);
        b.tensor("rope_factors_long.weight", F32, &[n], long);
    }
    let residual_scale = match v.features.iter().find(|f| matches!(f, Granite(..))) {
        Some(Granite(_, r, ..)) => *r,
        _ => 1.0,
    };
    if let Some(attn) = lfm2_attn {
        lfm2_layers(&mut b, attn);
        return b.w.to_bytes().expect("serialise test model");
    }
    let olmo = arch == "olmo2";
    let phi = arch == "phi3";
    for il in 0..v.n_layer {
        let t = |s: &str| format!("blk.{il}.{s}");
        if !olmo {
            b.vector(&t("attn_norm.weight"), d, 1.0, 0.2);
        }
        if phi {
            b.matrix(&t("attn_qkv.weight"), v.ty, d, qd + 2 * kd, 1.0);
        } else {
            b.matrix(&t("attn_q.weight"), v.ty, d, qd, 1.0);
            b.matrix(&t("attn_k.weight"), v.ty, d, kd, 1.0);
            b.matrix(&t("attn_v.weight"), v.ty, d, kd, 1.0);
        }
        if b.has(|f| *f == QkvBias) {
            b.vector(&t("attn_q.bias"), qd, 0.0, 0.5);
            b.vector(&t("attn_k.bias"), kd, 0.0, 0.5);
            // a large V bias is a constant direction in every output: greedy would repeat
            b.vector(&t("attn_v.bias"), kd, 0.0, 0.1);
        }
        match arch {
            "qwen3" | "gemma3" => {
                b.vector(&t("attn_q_norm.weight"), v.head_dim, 1.0, 0.3);
                b.vector(&t("attn_k_norm.weight"), v.head_dim, 1.0, 0.3);
            }
            "olmo2" => {
                b.vector(&t("attn_q_norm.weight"), qd, 1.0, 0.3);
                b.vector(&t("attn_k_norm.weight"), kd, 1.0, 0.3);
            }
            _ => {}
        }
        // each block adds `block_scale` of the embedding (post-norm archs: through the
        // post-norm weight)
        let post = gemma || olmo;
        // granite's residual multiplier scales the blocks down: compensate
        let bs = v.block_scale / residual_scale;
        b.matrix(
            &t("attn_output.weight"),
            v.ty,
            qd,
            d,
            if post { 1.0 } else { 1.2 * bs },
        );
        if post {
            b.vector(&t("post_attention_norm.weight"), d, bs, 0.2 * bs);
        }
        if !olmo {
            b.vector(&t("ffn_norm.weight"), d, 1.0, 0.2);
        }
        if phi {
            b.matrix(&t("ffn_up.weight"), v.ty, d, 2 * v.n_ff, 1.0);
        } else {
            b.matrix(&t("ffn_gate.weight"), v.ty, d, v.n_ff, 1.0);
            b.matrix(&t("ffn_up.weight"), v.ty, d, v.n_ff, 1.0);
        }
        b.matrix(
            &t("ffn_down.weight"),
            v.ffn_down_ty,
            v.n_ff,
            d,
            if post { 1.0 } else { 1.6 * bs },
        );
        if post {
            b.vector(&t("post_ffw_norm.weight"), d, bs, 0.2 * bs);
        }
    }
    b.w.to_bytes().expect("serialise test model")
}

/// The layers of an LFM2-family model: short convolutions except at `attn`, SwiGLU FFNs, routed
/// after the leading dense ones when the model has experts.
fn lfm2_layers(b: &mut Builder, attn: &[usize]) {
    let v = b.v;
    let d = v.n_embd;
    let kd = v.n_head_kv * v.head_dim;
    let l_cache = v
        .features
        .iter()
        .find_map(|f| match f {
            Lfm2(_, l) => Some(*l as usize),
            _ => None,
        })
        .unwrap();
    let moe = v.features.iter().find_map(|f| match f {
        Moe(ne, _, ff, lead) => Some((*ne as usize, *ff as usize, *lead as usize)),
        _ => None,
    });
    let bs = v.block_scale;
    for il in 0..v.n_layer {
        let t = |s: &str| format!("blk.{il}.{s}");
        b.vector(&t("attn_norm.weight"), d, 1.0, 0.2);
        if attn.contains(&il) {
            b.matrix(&t("attn_q.weight"), v.ty, d, d, 1.0);
            b.matrix(&t("attn_k.weight"), v.ty, d, kd, 1.0);
            b.matrix(&t("attn_v.weight"), v.ty, d, kd, 1.0);
            b.vector(&t("attn_q_norm.weight"), v.head_dim, 1.0, 0.3);
            b.vector(&t("attn_k_norm.weight"), v.head_dim, 1.0, 0.3);
            b.matrix(&t("attn_output.weight"), v.ty, d, d, 1.2 * bs);
        } else {
            // B, C and x of RMS ~1; the taps keep B⊙x's scale
            b.matrix(&t("shortconv.in_proj.weight"), v.ty, d, 3 * d, 1.0);
            b.matrix(&t("shortconv.conv.weight"), F32, l_cache, d, 1.0);
            b.matrix(&t("shortconv.out_proj.weight"), v.ty, d, d, 1.2 * bs);
        }
        b.vector(&t("ffn_norm.weight"), d, 1.0, 0.2);
        match moe {
            Some((ne, ff, lead)) if il >= lead => {
                // the router stays F32, as llama-quantize leaves it
                b.matrix(&t("ffn_gate_inp.weight"), F32, d, ne, 1.0);
                b.vector(&t("exp_probs_b.bias"), ne, 0.0, 0.1);
                b.stacked(&t("ffn_gate_exps.weight"), v.ty, d, ff, ne, 1.0);
                b.stacked(&t("ffn_up_exps.weight"), v.ty, d, ff, ne, 1.0);
                b.stacked(
                    &t("ffn_down_exps.weight"),
                    v.ffn_down_ty,
                    ff,
                    d,
                    ne,
                    1.6 * bs,
                );
            }
            _ => {
                b.matrix(&t("ffn_gate.weight"), v.ty, d, v.n_ff, 1.0);
                b.matrix(&t("ffn_up.weight"), v.ty, d, v.n_ff, 1.0);
                b.matrix(&t("ffn_down.weight"), v.ffn_down_ty, v.n_ff, d, 1.6 * bs);
            }
        }
    }
}

/// `val` of tokenizer key `key`, its per-token arrays padded to `n_vocab` entries: tokens
/// `<cera_pad_N>` of type UNUSED (5) and score 0, which no text tokenizes to.
fn pad_vocab(key: &str, val: &Value, n_vocab: usize) -> Value {
    use cera::gguf::Array;
    let Value::Array(a) = val else {
        return val.clone();
    };
    let have = a.len();
    if have >= n_vocab {
        return val.clone();
    }
    let extra = have..n_vocab;
    match (key, a) {
        ("tokenizer.ggml.tokens", Array::String(t)) => {
            let mut t = t.clone();
            t.extend(extra.map(|i| format!("<cera_pad_{i}>")));
            Value::Array(Array::String(t))
        }
        ("tokenizer.ggml.token_type", Array::I32(t)) => {
            let mut t = t.clone();
            t.extend(extra.map(|_| 5));
            Value::Array(Array::I32(t))
        }
        ("tokenizer.ggml.scores", Array::F32(t)) => {
            let mut t = t.clone();
            t.extend(extra.map(|_| 0.0));
            Value::Array(Array::F32(t))
        }
        _ => val.clone(),
    }
}

/// Hex sha256 of a model's bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
