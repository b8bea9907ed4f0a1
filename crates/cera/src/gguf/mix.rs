//! llama-quantize's file types ("mixes") and the type each tensor gets under one.
//!
//! A mix such as `Q4_K_M` is a base type plus rules that give some tensors more bits: the
//! output (and a tied token embedding) Q6_K, half of the `attn_v` and `ffn_down` layers (the
//! first and last eighths and every third between) Q6_K, and so on. The rules below are
//! llama.cpp's (`llama_tensor_get_type` in `src/llama-quant.cpp`), restated per category, so a
//! file we write has the types llama-quantize would give it; `crates/cera-cli/tests/quantize.rs`
//! checks that against llama-quantize's own output.

use crate::quant::GgmlType;

/// llama.cpp's `llama_ftype`: what `general.file_type` holds and llama-quantize's type names
/// choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[allow(non_camel_case_types)]
pub enum FileType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q2_K_S,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
    IQ3_XXS,
    IQ3_XS,
    IQ3_S,
    IQ3_M,
    IQ2_XXS,
    IQ2_XS,
    IQ2_S,
    IQ2_M,
    IQ1_S,
    IQ1_M,
    TQ1_0,
    TQ2_0,
}

/// (name, file type, `general.file_type` id, base tensor type). The names are llama-quantize's,
/// its aliases (`Q3_K` = `Q3_K_M`, `Q4_K` = `Q4_K_M`, `Q5_K` = `Q5_K_M`) included.
const TABLE: &[(&str, FileType, u32, GgmlType)] = &[
    ("F32", FileType::F32, 0, GgmlType::F32),
    ("F16", FileType::F16, 1, GgmlType::F16),
    ("BF16", FileType::BF16, 32, GgmlType::BF16),
    ("Q4_0", FileType::Q4_0, 2, GgmlType::Q4_0),
    ("Q4_1", FileType::Q4_1, 3, GgmlType::Q4_1),
    ("Q5_0", FileType::Q5_0, 8, GgmlType::Q5_0),
    ("Q5_1", FileType::Q5_1, 9, GgmlType::Q5_1),
    ("Q8_0", FileType::Q8_0, 7, GgmlType::Q8_0),
    ("Q2_K", FileType::Q2_K, 10, GgmlType::Q2_K),
    ("Q2_K_S", FileType::Q2_K_S, 21, GgmlType::Q2_K),
    ("Q3_K_S", FileType::Q3_K_S, 11, GgmlType::Q3_K),
    ("Q3_K_M", FileType::Q3_K_M, 12, GgmlType::Q3_K),
    ("Q3_K", FileType::Q3_K_M, 12, GgmlType::Q3_K),
    ("Q3_K_L", FileType::Q3_K_L, 13, GgmlType::Q3_K),
    ("Q4_K_S", FileType::Q4_K_S, 14, GgmlType::Q4_K),
    ("Q4_K_M", FileType::Q4_K_M, 15, GgmlType::Q4_K),
    ("Q4_K", FileType::Q4_K_M, 15, GgmlType::Q4_K),
    ("Q5_K_S", FileType::Q5_K_S, 16, GgmlType::Q5_K),
    ("Q5_K_M", FileType::Q5_K_M, 17, GgmlType::Q5_K),
    ("Q5_K", FileType::Q5_K_M, 17, GgmlType::Q5_K),
    ("Q6_K", FileType::Q6_K, 18, GgmlType::Q6_K),
    ("IQ4_NL", FileType::IQ4_NL, 25, GgmlType::IQ4_NL),
    ("IQ4_XS", FileType::IQ4_XS, 30, GgmlType::IQ4_XS),
    ("IQ3_XXS", FileType::IQ3_XXS, 23, GgmlType::IQ3_XXS),
    ("IQ3_XS", FileType::IQ3_XS, 22, GgmlType::IQ3_S),
    ("IQ3_S", FileType::IQ3_S, 26, GgmlType::IQ3_S),
    ("IQ3_M", FileType::IQ3_M, 27, GgmlType::IQ3_S),
    ("IQ2_XXS", FileType::IQ2_XXS, 19, GgmlType::IQ2_XXS),
    ("IQ2_XS", FileType::IQ2_XS, 20, GgmlType::IQ2_XS),
    ("IQ2_S", FileType::IQ2_S, 28, GgmlType::IQ2_XS),
    ("IQ2_M", FileType::IQ2_M, 29, GgmlType::IQ2_S),
    ("IQ1_S", FileType::IQ1_S, 24, GgmlType::IQ1_S),
    ("IQ1_M", FileType::IQ1_M, 31, GgmlType::IQ1_M),
    ("TQ1_0", FileType::TQ1_0, 36, GgmlType::TQ1_0),
    ("TQ2_0", FileType::TQ2_0, 37, GgmlType::TQ2_0),
];

impl FileType {
    /// A llama-quantize type name (case-insensitive).
    pub fn from_name(name: &str) -> Option<FileType> {
        TABLE
            .iter()
            .find(|e| e.0.eq_ignore_ascii_case(name))
            .map(|e| e.1)
    }

    fn entry(self) -> &'static (&'static str, FileType, u32, GgmlType) {
        TABLE
            .iter()
            .find(|e| e.1 == self)
            .expect("every file type is in the table")
    }

    /// llama-quantize's (first) name for it.
    pub fn name(self) -> &'static str {
        self.entry().0
    }

    /// The `general.file_type` value.
    pub fn id(self) -> u32 {
        self.entry().2
    }

    /// The type most tensors get.
    pub fn base(self) -> GgmlType {
        self.entry().3
    }

    /// Every name [`FileType::from_name`] takes.
    pub fn names() -> impl Iterator<Item = &'static str> {
        TABLE.iter().map(|e| e.0)
    }
}

/// The broad role of a tensor, from its name (what the rules look at).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Category {
    TokenEmbd,
    AttnQ,
    AttnK,
    AttnV,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

impl Category {
    pub(crate) fn of(name: &str) -> Category {
        use Category::*;
        if name == "output.weight" {
            return Output;
        }
        if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
            return TokenEmbd;
        }
        // The order matters: `attn_qkv` before `attn_q`, and so on.
        let table = [
            ("attn_qkv.weight", AttnQkv),
            ("attn_kv_b.weight", AttnKvB),
            ("attn_v.weight", AttnV),
            ("attn_k.weight", AttnK),
            ("attn_q.weight", AttnQ),
            ("attn_output.weight", AttnOutput),
            ("ffn_up", FfnUp),
            ("ffn_gate", FfnGate),
            ("ffn_down", FfnDown),
        ];
        table
            .iter()
            .find(|(pat, _)| name.contains(pat))
            .map_or(Other, |&(_, c)| c)
    }

    /// `attn_v`-like tensors (the values), the most sensitive to quantization.
    fn is_attn_v(self) -> bool {
        matches!(
            self,
            Category::AttnV | Category::AttnQkv | Category::AttnKvB
        )
    }
}

/// Whether llama-quantize would quantize a tensor at all: matrices (two or more dimensions
/// above 1) named `*weight`, except norms, MoE routers, LFM2's and Mamba's convolution kernels,
/// BERT's position and token-type embeddings and a few small special tensors; the output only
/// when `quantize_output` (not `--leave-output-tensor`); Whisper's convolutions stay.
pub(crate) fn allows_quantization(name: &str, shape: &[u64], quantize_output: bool) -> bool {
    let dims = shape.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1);
    if dims < 2 || !name.ends_with("weight") {
        return false;
    }
    if name == "output.weight" && !quantize_output {
        return false;
    }
    const KEEP: &[&str] = &[
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "attn_rel_b.weight",
        ".position_embd",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        // Whisper's convolutions (whisper.cpp's quantizer keeps them too)
        "encoder.conv",
    ];
    if KEEP.iter().any(|k| name.contains(k)) || name.contains("time_mix_") {
        return false;
    }
    !matches!(name, "position_embd.weight" | "token_types.weight")
}

/// The model facts the rules use.
#[derive(Clone, Debug, Default)]
pub(crate) struct ModelShape {
    pub arch: String,
    pub n_layer: usize,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub n_expert: u64,
}

impl ModelShape {
    fn n_gqa(&self) -> u64 {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(1)
    }

    /// llama.cpp's `LLM_TYPE_70B`: an 80-layer llama with grouped-query attention.
    fn is_70b(&self) -> bool {
        self.arch == "llama" && self.n_layer == 80 && self.n_head != self.n_head_kv
    }
}

/// Picks types tensor by tensor, in llama-quantize's order (by layer, then name): the
/// `attn_v` and `ffn_*` rules count the tensors seen so far.
pub(crate) struct MixState<'a> {
    pub shape: &'a ModelShape,
    pub ftype: FileType,
    /// No `output.weight`: the token embedding is the output too.
    pub tied: bool,
    n_attn_v: usize,
    i_attn_v: usize,
    i_ffn_down: usize,
    i_ffn_gate: usize,
    i_ffn_up: usize,
}

/// The first and last eighths of the layers and every third layer between them.
fn use_more_bits(i: usize, n: usize) -> bool {
    let (i, n) = (i as i64, n as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The layer of a `blk.N.` tensor.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

impl<'a> MixState<'a> {
    /// `names`: every tensor of the file (to count the `attn_v` tensors and see whether the
    /// embedding is tied).
    pub(crate) fn new<'n>(
        shape: &'a ModelShape,
        ftype: FileType,
        names: impl Iterator<Item = &'n str>,
    ) -> Self {
        let mut n_attn_v = 0;
        let mut tied = true;
        for n in names {
            let c = Category::of(n);
            if c.is_attn_v() {
                n_attn_v += 1;
            }
            if c == Category::Output {
                tied = false;
            }
        }
        MixState {
            shape,
            ftype,
            tied,
            n_attn_v,
            i_attn_v: 0,
            i_ffn_down: 0,
            i_ffn_gate: 0,
            i_ffn_up: 0,
        }
    }

    /// The (layer, layer count) an `ffn_*` rule uses: the running count, or the layer in the
    /// name for MoE models (whose expert tensors are not one per layer in order).
    fn layer_info(&self, counter: usize, name: &str) -> (usize, usize) {
        let n = self.shape.n_layer;
        if self.shape.n_expert > 1 {
            (layer_of(name).unwrap_or(counter), n)
        } else {
            (counter, n)
        }
    }

    /// The type the mix gives a quantizable tensor (before the row-length fallback), starting
    /// from the base type. Advances the counters as llama-quantize does.
    pub(crate) fn choose(&mut self, name: &str, cols: u64) -> GgmlType {
        use FileType as F;
        use GgmlType as T;
        let ft = self.ftype;
        let mut t = ft.base();
        let cat = Category::of(name);
        let s = self.shape;
        let n_expert = s.n_expert;
        let iq_low = matches!(
            ft,
            F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M
        );
        if cat == Category::Output || (self.tied && cat == Category::TokenEmbd) {
            let fits = t
                .block_elems()
                .is_some_and(|b| cols.is_multiple_of(b as u64));
            if s.arch == "falcon" || !fits {
                t = T::Q8_0;
            } else if matches!(
                ft,
                F::IQ2_XXS | F::IQ2_XS | F::IQ3_XXS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M
            ) {
                t = T::Q5_K;
            } else if t != T::Q8_0 {
                t = T::Q6_K;
            }
        } else if cat == Category::TokenEmbd {
            match ft {
                F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ1_M => t = T::Q2_K,
                F::IQ2_S | F::IQ2_M | F::IQ3_XXS => t = T::IQ3_S,
                F::TQ1_0 | F::TQ2_0 => t = T::Q4_K,
                _ => {}
            }
        } else if iq_low {
            let iq3_or_q2 = if matches!(ft, F::IQ2_S | F::IQ2_M) {
                T::IQ3_S
            } else {
                T::Q2_K
            };
            if cat.is_attn_v() {
                t = if s.n_gqa() >= 4 || n_expert >= 4 {
                    T::Q4_K
                } else {
                    iq3_or_q2
                };
                self.i_attn_v += 1;
            } else if n_expert == 8 && cat == Category::AttnK {
                t = T::Q4_K;
            } else if cat == Category::FfnDown {
                if self.i_ffn_down < s.n_layer / 8 {
                    t = iq3_or_q2;
                }
                self.i_ffn_down += 1;
            } else if cat == Category::AttnOutput {
                if n_expert == 8 {
                    t = T::Q5_K;
                } else if matches!(ft, F::IQ1_S | F::IQ1_M) {
                    t = T::IQ2_XXS;
                } else if matches!(ft, F::IQ2_S | F::IQ2_M) {
                    t = T::IQ3_S;
                }
            }
        } else if cat.is_attn_v() {
            let gqa4 = s.n_gqa() >= 4;
            match ft {
                F::Q2_K => t = if gqa4 { T::Q4_K } else { T::Q3_K },
                F::Q2_K_S if gqa4 => t = T::Q4_K,
                // No importance matrix here, so IQ3_S rather than IQ3_XXS.
                F::IQ3_XXS => t = if gqa4 { T::Q4_K } else { T::IQ3_S },
                F::IQ3_XS | F::IQ3_S if gqa4 => t = T::Q4_K,
                F::IQ3_M => t = T::Q4_K,
                F::Q3_K_M => t = if self.i_attn_v < 2 { T::Q5_K } else { T::Q4_K },
                F::Q3_K_L => t = T::Q5_K,
                F::IQ4_NL | F::IQ4_XS if gqa4 => t = T::Q5_K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(self.i_attn_v, self.n_attn_v) => t = T::Q6_K,
                F::Q4_K_S if self.i_attn_v < 4 => t = T::Q5_K,
                _ => {}
            }
            if s.is_70b() && matches!(t, T::Q3_K | T::Q4_K) {
                t = T::Q5_K;
            }
            if n_expert == 8 {
                t = T::Q8_0;
            }
            self.i_attn_v += 1;
        } else if cat == Category::AttnK {
            if n_expert == 8 {
                t = T::Q8_0;
            } else if ft == F::IQ3_XS {
                t = T::IQ3_XXS;
            } else if ft == F::IQ3_XXS {
                t = T::IQ2_S;
            }
        } else if cat == Category::AttnQ {
            if ft == F::IQ3_XS {
                t = T::IQ3_XXS;
            } else if ft == F::IQ3_XXS {
                t = T::IQ2_S;
            }
        } else if cat == Category::FfnDown {
            let (i, n) = self.layer_info(self.i_ffn_down, name);
            let falcon = s.arch == "falcon";
            match ft {
                F::Q2_K => t = T::Q3_K,
                F::Q2_K_S if i < n / 8 => t = T::Q4_K,
                F::IQ3_XXS => t = if i < n / 8 { T::Q4_K } else { T::Q3_K },
                F::Q3_K_M => {
                    t = if i < n / 16 {
                        T::Q5_K
                    } else if !falcon || use_more_bits(i, n) {
                        T::Q4_K
                    } else {
                        T::Q3_K
                    }
                }
                F::IQ3_M if i < n / 8 || (n_expert == 8 && use_more_bits(i, n)) => t = T::Q4_K,
                F::Q3_K_L => t = if falcon { T::Q4_K } else { T::Q5_K },
                F::Q4_K_M => {
                    if falcon {
                        t = if i < n / 16 {
                            T::Q6_K
                        } else if use_more_bits(i, n) {
                            T::Q5_K
                        } else {
                            T::Q4_K
                        };
                    } else if use_more_bits(i, n) {
                        t = T::Q6_K;
                    }
                }
                F::IQ4_NL | F::IQ4_XS if i < n / 8 => t = T::Q5_K,
                F::Q5_K_M if use_more_bits(i, n) => t = T::Q6_K,
                F::Q4_K_S if !falcon && i < n / 8 => t = T::Q5_K,
                _ => {}
            }
            self.i_ffn_down += 1;
        } else if cat == Category::AttnOutput {
            if s.arch != "falcon" {
                if n_expert == 8 {
                    if matches!(
                        ft,
                        F::Q2_K
                            | F::IQ3_XS
                            | F::IQ3_XXS
                            | F::Q3_K_S
                            | F::Q3_K_M
                            | F::IQ4_NL
                            | F::Q4_K_S
                            | F::Q4_K_M
                            | F::IQ3_S
                            | F::IQ3_M
                            | F::IQ4_XS
                    ) {
                        t = T::Q5_K;
                    }
                } else {
                    match ft {
                        F::Q2_K => t = T::Q3_K,
                        F::IQ3_XXS => t = T::IQ3_S,
                        F::Q3_K_M | F::IQ3_M => t = T::Q4_K,
                        F::Q3_K_L => t = T::Q5_K,
                        _ => {}
                    }
                }
            } else if ft == F::Q3_K_L {
                t = T::Q4_K;
            }
        } else if cat == Category::FfnGate || cat == Category::FfnUp {
            let counter = if cat == Category::FfnGate {
                &mut self.i_ffn_gate
            } else {
                &mut self.i_ffn_up
            };
            let c = *counter;
            *counter += 1;
            let (i, n) = self.layer_info(c, name);
            if ft == F::IQ3_XS && i >= n / 8 && i < 7 * n / 8 {
                t = T::IQ3_XXS;
            }
        }
        t
    }
}

/// llama-quantize's fallback for a matrix whose rows are not whole blocks of `t`: a 32-element
/// type of about the same size, or F16 when not even that fits. `None`: no fallback exists
/// for `t` (llama-quantize stops there too).
pub(crate) fn fallback(t: GgmlType, cols: u64) -> Option<GgmlType> {
    use GgmlType as T;
    let fits = |t: T| {
        t.block_elems()
            .is_some_and(|b| cols.is_multiple_of(b as u64))
    };
    if fits(t) {
        return Some(t);
    }
    let f = match t {
        T::IQ1_S
        | T::IQ1_M
        | T::IQ2_XXS
        | T::IQ2_XS
        | T::IQ2_S
        | T::IQ3_XXS
        | T::IQ3_S
        | T::IQ4_XS => T::IQ4_NL,
        T::Q2_K | T::Q3_K | T::TQ1_0 | T::TQ2_0 => T::Q4_0,
        T::Q4_K => T::Q5_0,
        T::Q5_K => T::Q5_1,
        T::Q6_K => T::Q8_0,
        _ => return None,
    };
    Some(if fits(f) { f } else { T::F16 })
}

/// Types that llama-quantize only writes with an importance matrix (garbage without one).
pub(crate) fn needs_imatrix(name: &str, t: GgmlType, ftype: FileType) -> bool {
    if matches!(Category::of(name), Category::TokenEmbd | Category::Output) {
        return false;
    }
    match t {
        GgmlType::IQ3_XXS
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ1_M
        | GgmlType::IQ1_S => true,
        GgmlType::Q2_K => ftype == FileType::Q2_K_S,
        _ => false,
    }
}

/// llama.cpp's tensor order: tensors outside the blocks first, then block by block, by name
/// within each.
pub(crate) fn order_key(name: &str) -> (i64, &str) {
    (layer_of(name).map_or(-1, |l| l as i64), name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(n_layer: usize, n_head: u64, n_head_kv: u64) -> ModelShape {
        ModelShape {
            arch: "llama".into(),
            n_layer,
            n_head,
            n_head_kv,
            n_expert: 0,
        }
    }

    #[test]
    fn names_and_ids() {
        assert_eq!(FileType::from_name("q4_k"), Some(FileType::Q4_K_M));
        assert_eq!(FileType::from_name("Q4_K_M").unwrap().id(), 15);
        assert_eq!(
            FileType::from_name("q3_k_s").unwrap().base(),
            GgmlType::Q3_K
        );
        assert_eq!(FileType::Q4_K_M.name(), "Q4_K_M");
        assert_eq!(FileType::from_name("Q9_9"), None);
    }

    #[test]
    fn q4_k_m_gives_half_the_values_and_ffn_down_six_bits() {
        // 30 layers (SmolLM2-135M): the first 3, the last 4 and every third between.
        let s = shape(30, 9, 3);
        let names: Vec<String> = (0..30)
            .flat_map(|l| {
                [
                    format!("blk.{l}.attn_v.weight"),
                    format!("blk.{l}.ffn_down.weight"),
                ]
            })
            .collect();
        let mut m = MixState::new(&s, FileType::Q4_K_M, names.iter().map(|s| s.as_str()));
        assert!(m.tied);
        let mut six = Vec::new();
        for l in 0..30 {
            let v = m.choose(&format!("blk.{l}.attn_v.weight"), 576);
            let d = m.choose(&format!("blk.{l}.ffn_down.weight"), 1536);
            assert_eq!(v, d, "layer {l}");
            if v == GgmlType::Q6_K {
                six.push(l);
            }
        }
        assert_eq!(six, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]);
        assert_eq!(m.choose("token_embd.weight", 576), GgmlType::Q8_0);
        assert_eq!(m.choose("token_embd.weight", 512), GgmlType::Q6_K);
        assert_eq!(m.choose("blk.3.attn_q.weight", 576), GgmlType::Q4_K);
    }

    #[test]
    fn what_is_left_alone_and_fallbacks() {
        assert!(!allows_quantization("blk.0.attn_norm.weight", &[576], true));
        assert!(!allows_quantization(
            "blk.0.attn_norm.weight",
            &[576, 1],
            true
        ));
        assert!(!allows_quantization(
            "blk.0.ffn_gate_inp.weight",
            &[64, 8],
            true
        ));
        assert!(!allows_quantization(
            "blk.0.shortconv.conv.weight",
            &[3, 1024],
            true
        ));
        assert!(!allows_quantization("output.weight", &[64, 100], false));
        assert!(allows_quantization("output.weight", &[64, 100], true));
        assert!(allows_quantization(
            "blk.0.ffn_up_exps.weight",
            &[64, 128, 8],
            true
        ));
        assert_eq!(fallback(GgmlType::Q4_K, 576), Some(GgmlType::Q5_0));
        assert_eq!(fallback(GgmlType::Q6_K, 576), Some(GgmlType::Q8_0));
        assert_eq!(fallback(GgmlType::Q4_K, 40), Some(GgmlType::F16));
        assert_eq!(fallback(GgmlType::Q8_0, 40), None);
        let mut v = [
            "blk.1.x",
            "output.weight",
            "blk.0.b",
            "token_embd.weight",
            "blk.10.a",
        ];
        v.sort_by_key(|n| order_key(n));
        assert_eq!(
            v,
            [
                "output.weight",
                "token_embd.weight",
                "blk.0.b",
                "blk.1.x",
                "blk.10.a"
            ]
        );
    }
}
