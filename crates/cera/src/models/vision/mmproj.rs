//! An mmproj GGUF as llama.cpp's mtmd reads it (`general.architecture` `clip`): the projector
//! type, the vision tower's hyperparameters and tensors. Tensor and key names are mtmd's
//! (`tools/mtmd/clip-impl.h`): `v.patch_embd.weight`, `v.blk.N.attn_q.weight`, `mm.1.weight`…

use std::sync::Arc;

use crate::backend::{Act, Weight};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
pub use crate::models::common::media::Linear;
use crate::models::loader::TensorLoader;

/// The projectors this build runs (`clip.projector_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Projector {
    /// LFM2-VL: SigLIP2 NaFlex tower, pixel unshuffle, LayerNorm, Linear, GELU, Linear.
    Lfm2,
    /// Idefics3 / SmolVLM: SigLIP tower at its trained size, pixel shuffle, one Linear.
    Idefics3,
}

impl Projector {
    /// The vision projector `clip.projector_type` names.
    pub fn parse(s: &str) -> Result<Projector> {
        match s {
            "lfm2" => Ok(Projector::Lfm2),
            "idefics3" => Ok(Projector::Idefics3),
            other => Err(Error::Model(format!(
                "vision projector '{other}' is not supported (supported: lfm2, idefics3)"
            ))),
        }
    }
}

/// A pre-norm ViT block (SigLIP's): `x += o(attn(ln1(x)))`, `x += down(gelu(up(ln2(x))))`.
pub struct VitLayer {
    /// `[n_embd]` each
    pub ln1_w: Vec<f32>,
    pub ln1_b: Vec<f32>,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub ln2_w: Vec<f32>,
    pub ln2_b: Vec<f32>,
    pub up: Linear,
    pub down: Linear,
}

/// The vision tower's hyperparameters (`clip.vision.*`).
#[derive(Clone, Debug)]
pub struct VisionHparams {
    /// The side of the square the position embeddings were trained on.
    pub image_size: usize,
    pub patch_size: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_layer: usize,
    pub eps: f32,
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
    /// The projector's merge of `scale` × `scale` patches into one token.
    pub scale: usize,
    /// The blocks' feed-forward activation (`clip.use_gelu`, `clip.use_silu`).
    pub act: Act,
    /// The longest side an image is resized to before it is cut into slices
    /// (`clip.vision.preproc_image_size`; 0: absent).
    pub longest_edge: usize,
}

/// The projector's weights after the pixel (un)shuffle.
pub enum ProjectorWeights {
    /// LFM2-VL's: an optional LayerNorm over the merged features, then two linears around a
    /// GELU.
    Lfm2 {
        norm: Option<(Vec<f32>, Vec<f32>)>,
        mm1: Linear,
        mm2: Linear,
    },
    /// Idefics3's: one linear without a bias (`mm.model.fc.weight`).
    Idefics3 { fc: Weight },
}

/// An mmproj's vision tower and projector.
pub struct VisionTower {
    pub projector: Projector,
    pub hp: VisionHparams,
    /// `[3 · patch², n_embd]`: the patch convolution as a matrix over a patch's values in
    /// (channel, row, column) order
    pub patch_w: Weight,
    pub patch_b: Vec<f32>,
    /// `[n_embd, (image_size / patch)²]`, row-major by (row, column) of the patch grid
    pub pos: Vec<f32>,
    pub layers: Vec<VitLayer>,
    pub post_ln_w: Vec<f32>,
    pub post_ln_b: Vec<f32>,
    pub proj: ProjectorWeights,
}

fn key(name: &str) -> String {
    format!("clip.vision.{name}")
}

impl VisionTower {
    /// The vision half of an mmproj file whose projector is `projector`; what it lacks or
    /// holds in the wrong shape is named.
    pub fn load(file: &Arc<GgufFile>, projector: Projector) -> Result<VisionTower> {
        let u = |k: &str| -> Result<usize> { Ok(file.get_u32(&key(k))? as usize) };
        let rgb = |k: &str| -> Result<[f32; 3]> {
            let v = file.get_f32_array(&key(k))?;
            match v[..] {
                [a, b, c, ..] => Ok([a, b, c]),
                _ => Err(Error::Model(format!(
                    "{}: {} values, expected 3",
                    key(k),
                    v.len()
                ))),
            }
        };
        let hp = VisionHparams {
            image_size: u("image_size")?,
            patch_size: u("patch_size")?,
            n_embd: u("embedding_length")?,
            n_ff: u("feed_forward_length")?,
            n_head: u("attention.head_count")?,
            n_layer: u("block_count")?,
            eps: file.get_f32(&key("attention.layer_norm_epsilon"))?,
            image_mean: rgb("image_mean")?,
            image_std: rgb("image_std")?,
            scale: file
                .get_opt::<u32>(&key("projector.scale_factor"))?
                .unwrap_or(2) as usize,
            act: match (
                file.get_opt::<bool>("clip.use_gelu")?.unwrap_or(false),
                file.get_opt::<bool>("clip.use_silu")?.unwrap_or(false),
            ) {
                (true, _) => Act::Gelu,
                (false, true) => Act::Silu,
                // mtmd's default then is the quick GELU (x·σ(1.702x)), which no tower we run
                // uses
                (false, false) => {
                    return Err(Error::Model(
                        "clip.use_gelu and clip.use_silu are both unset: the quick-GELU \
                         feed-forward is not supported"
                            .into(),
                    ));
                }
            },
            longest_edge: file
                .get_opt::<u32>(&key("preproc_image_size"))?
                .unwrap_or(0) as usize,
        };
        if projector == Projector::Idefics3 && hp.longest_edge == 0 {
            // (older conversions: mtmd then slices by its generic llava-uhd sizing, which
            // this build does not reproduce)
            return Err(Error::Model(
                "idefics3 mmproj without clip.vision.preproc_image_size (the longest edge \
                 images are resized to): convert it again with a current converter"
                    .into(),
            ));
        }
        let d = hp.n_embd;
        if hp.n_head == 0 || !d.is_multiple_of(hp.n_head) || hp.patch_size == 0 {
            return Err(Error::Model(format!(
                "clip.vision: {} heads do not divide embedding_length {d} (or patch_size is 0)",
                hp.n_head
            )));
        }
        if hp.image_size == 0 || !hp.image_size.is_multiple_of(hp.patch_size) || hp.scale < 2 {
            return Err(Error::Model(format!(
                "clip.vision: image_size {} is not a multiple of patch_size {} (or the scale \
                 factor {} is under 2)",
                hp.image_size, hp.patch_size, hp.scale
            )));
        }
        let ld = TensorLoader::new(Arc::clone(file));
        let ps = hp.patch_size;
        // ggml [ps, ps, 3, n_embd]: per output channel, (channel, row, column) with the column
        // fastest, which is the row of the matrix the patches are multiplied by
        let conv = "v.patch_embd.weight";
        let info = file
            .tensor(conv)
            .ok_or_else(|| Error::MissingTensor(conv.into()))?;
        let want = [ps as u64, ps as u64, 3, d as u64];
        if info.shape[..] != want[..] {
            return Err(Error::GgufTensor {
                tensor: conv.into(),
                reason: format!("shape {:?}, but the tower expects {want:?}", info.shape),
            });
        }
        let patch_w = Weight::new(file, info).reshaped(3 * ps * ps, d, conv)?;
        let n_side = hp.image_size / ps;
        let pos_name = "v.position_embd.weight";
        let pos_info = file
            .tensor(pos_name)
            .ok_or_else(|| Error::MissingTensor(pos_name.into()))?;
        let n_pos = pos_info.shape.get(1).copied().unwrap_or(0) as usize;
        if n_pos != n_side * n_side {
            // NaFlex towers are trained on a square grid the position embeddings resize from
            return Err(Error::GgufTensor {
                tensor: pos_name.into(),
                reason: format!(
                    "{n_pos} positions, but image_size / patch_size is {n_side} (a {n_side} x \
                     {n_side} grid)"
                ),
            });
        }
        ld.matrix(pos_name, d, n_pos)?;
        let pos = file.tensor_f32(pos_name)?;
        let lin = |name: String, cols: usize, rows: usize| -> Result<Linear> {
            Ok(Linear {
                w: ld.matrix(&format!("{name}.weight"), cols, rows)?,
                b: ld.vector(&format!("{name}.bias"), rows)?,
            })
        };
        // Some converters wrote the feed-forward's up and down under each other's names (mtmd
        // swaps them back when `ffn_down` maps from the width): the same here.
        let swapped = hp.n_ff != d
            && file
                .tensor("v.blk.0.ffn_down.weight")
                .is_some_and(|t| t.shape.first() == Some(&(d as u64)));
        let (up, down) = if swapped {
            ("ffn_down", "ffn_up")
        } else {
            ("ffn_up", "ffn_down")
        };
        let layers = (0..hp.n_layer)
            .map(|il| {
                let p = |n: &str| format!("v.blk.{il}.{n}");
                let vec = |n: &str, w: &str| ld.vector(&format!("{}.{w}", p(n)), d);
                Ok(VitLayer {
                    ln1_w: vec("ln1", "weight")?,
                    ln1_b: vec("ln1", "bias")?,
                    q: lin(p("attn_q"), d, d)?,
                    k: lin(p("attn_k"), d, d)?,
                    v: lin(p("attn_v"), d, d)?,
                    o: lin(p("attn_out"), d, d)?,
                    ln2_w: vec("ln2", "weight")?,
                    ln2_b: vec("ln2", "bias")?,
                    up: lin(p(up), d, hp.n_ff)?,
                    down: lin(p(down), hp.n_ff, d)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let merged = d * hp.scale * hp.scale;
        let proj = match projector {
            Projector::Lfm2 => lfm2_projector(file, &ld, merged)?,
            Projector::Idefics3 => {
                let name = "mm.model.fc.weight";
                let rows = file
                    .tensor(name)
                    .and_then(|t| t.shape.get(1).copied())
                    .ok_or_else(|| Error::MissingTensor(name.into()))?
                    as usize;
                ProjectorWeights::Idefics3 {
                    fc: ld.matrix(name, merged, rows)?,
                }
            }
        };
        refuse_unread(file, &hp, &proj)?;
        Ok(VisionTower {
            projector,
            patch_b: ld.vector("v.patch_embd.bias", d)?,
            patch_w,
            pos,
            layers,
            post_ln_w: ld.vector("v.post_ln.weight", d)?,
            post_ln_b: ld.vector("v.post_ln.bias", d)?,
            proj,
            hp,
        })
    }

    /// The width of the embeddings it hands the language model.
    pub fn n_embd_out(&self) -> usize {
        match &self.proj {
            ProjectorWeights::Lfm2 { mm2, .. } => mm2.w.rows,
            ProjectorWeights::Idefics3 { fc } => fc.rows,
        }
    }
}

/// Fails on a vision tensor (`v.*`, or a projector's `mm.*` but the audio adapter's `mm.a.*`)
/// the tower does not read: a newer layout or a damaged file would otherwise be run without it.
fn refuse_unread(file: &GgufFile, hp: &VisionHparams, proj: &ProjectorWeights) -> Result<()> {
    let mut read: std::collections::HashSet<String> = [
        "v.patch_embd.weight",
        "v.patch_embd.bias",
        "v.position_embd.weight",
        "v.post_ln.weight",
        "v.post_ln.bias",
    ]
    .map(String::from)
    .into();
    for il in 0..hp.n_layer {
        for t in [
            "attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down", "ln1", "ln2",
        ] {
            for part in ["weight", "bias"] {
                read.insert(format!("v.blk.{il}.{t}.{part}"));
            }
        }
    }
    let mm: &[&str] = match proj {
        ProjectorWeights::Lfm2 { .. } => &[
            "mm.input_norm.weight",
            "mm.input_norm.bias",
            "mm.1.weight",
            "mm.1.bias",
            "mm.2.weight",
            "mm.2.bias",
        ],
        ProjectorWeights::Idefics3 { .. } => &["mm.model.fc.weight"],
    };
    read.extend(mm.iter().map(|n| n.to_string()));
    for t in &file.tensors {
        let name = t.name.as_str();
        let vision =
            name.starts_with("v.") || (name.starts_with("mm.") && !name.starts_with("mm.a."));
        if vision && !read.contains(name) {
            return Err(Error::GgufTensor {
                tensor: name.into(),
                reason: "a vision tensor this tower does not use (a newer layout, or a damaged \
                         file?)"
                    .into(),
            });
        }
    }
    Ok(())
}

/// LFM2-VL's projector tensors (`mm.input_norm.*` optional, `mm.1.*`, `mm.2.*`).
fn lfm2_projector(file: &GgufFile, ld: &TensorLoader, merged: usize) -> Result<ProjectorWeights> {
    let rows = |name: &str| -> Result<usize> {
        Ok(file
            .tensor(name)
            .and_then(|t| t.shape.get(1).copied())
            .ok_or_else(|| Error::MissingTensor(name.into()))? as usize)
    };
    let lin = |name: &str, cols: usize, rows: usize| -> Result<Linear> {
        Ok(Linear {
            w: ld.matrix(&format!("{name}.weight"), cols, rows)?,
            b: ld.vector(&format!("{name}.bias"), rows)?,
        })
    };
    let norm = match ld.vector_opt("mm.input_norm.weight", merged)? {
        Some(w) => Some((
            w,
            ld.vector_opt("mm.input_norm.bias", merged)?
                .unwrap_or_else(|| vec![0.0; merged]),
        )),
        None => None,
    };
    let (r1, r2) = (rows("mm.1.weight")?, rows("mm.2.weight")?);
    Ok(ProjectorWeights::Lfm2 {
        norm,
        mm1: lin("mm.1", merged, r1)?,
        mm2: lin("mm.2", r1, r2)?,
    })
}
