//! The SigLIP vision tower and the projectors after it, written against the backend ops (so it
//! runs on the CPU and the GPU): patches through the patch convolution (a matrix product over
//! each patch's values), learned position embeddings (resized to the patch grid for NaFlex
//! towers; Idefics3's images are always the trained size), the pre-norm blocks with
//! non-causal attention over the image's patches, the post-norm, then the projector: pixel
//! unshuffle (each `s` × `s` square of patches becomes one token of `s²` times the width; on
//! the host; mtmd's one permutation for both families), then LFM2-VL's LayerNorm, Linear,
//! GELU, Linear or Idefics3's single bias-free Linear. The result is one row per image token,
//! as wide as the language model's embeddings.

use super::mmproj::{Linear, Projector, ProjectorWeights, VisionTower};
use crate::backend::{Act, AttentionParams, Backend, KvSpec, KvType, SeqSpan};
use crate::error::{Error, Result};

/// A step's buffers.
struct Bufs<T> {
    /// `[n, d]` residual stream
    x: T,
    /// `[n, d]` normed input of a block
    h: T,
    q: T,
    k: T,
    v: T,
    /// `[n, d]` attention output, then the block's projections
    a: T,
    o: T,
    /// `[n, n_ff]`: the projector's hidden activations, and the blocks' feed-forward's
    /// where `encoder_ffn` runs all rows at once (the CPU runs blocks of rows)
    up: T,
}

/// `out = x · wᵀ + b`.
fn linear<B: Backend>(
    be: &B,
    cx: &mut B::Ctx,
    l: &Linear,
    x: &B::Tensor,
    out: &mut B::Tensor,
) -> Result<()> {
    be.matmul_encoder(cx, &mut [(&l.w, out)], x)?;
    be.add_bias(cx, out, &l.b);
    Ok(())
}

impl VisionTower {
    /// The image tokens' embeddings of one preprocessed image: `pixels` are `[height, width,
    /// 3]` normalized values, both sides multiples of `patch_size · scale`. Returns
    /// `[n_tokens, n_embd_out]` row-major and `n_tokens`.
    pub fn encode<B: Backend>(
        &self,
        be: &B,
        pixels: &[f32],
        width: usize,
        height: usize,
    ) -> Result<(Vec<f32>, usize)> {
        let hp = &self.hp;
        let (ps, s, d) = (hp.patch_size, hp.scale, hp.n_embd);
        let align = ps * s;
        if width == 0
            || height == 0
            || !width.is_multiple_of(align)
            || !height.is_multiple_of(align)
        {
            return Err(Error::Model(format!(
                "the vision tower takes sides that are multiples of {align} (got {width} x {height})"
            )));
        }
        if self.projector == Projector::Idefics3
            && (width, height) != (hp.image_size, hp.image_size)
        {
            // its position embeddings are used as trained, never resized
            return Err(Error::Model(format!(
                "the idefics3 tower takes {0} x {0} slices (got {width} x {height})",
                hp.image_size
            )));
        }
        if pixels.len() != width * height * 3 {
            return Err(Error::Model(format!(
                "{} pixel values for a {width} x {height} RGB image",
                pixels.len()
            )));
        }
        let (nx, ny) = (width / ps, height / ps);
        let n = nx * ny;
        // [n, 3 · ps²]: each patch's values in (channel, row, column) order, the
        // convolution's weight layout
        let pl = 3 * ps * ps;
        let mut patches = vec![0f32; n * pl];
        for py in 0..ny {
            for px in 0..nx {
                let row = &mut patches[(py * nx + px) * pl..][..pl];
                for c in 0..3 {
                    for ky in 0..ps {
                        for kx in 0..ps {
                            let (y, x) = (py * ps + ky, px * ps + kx);
                            row[(c * ps + ky) * ps + kx] = pixels[(y * width + x) * 3 + c];
                        }
                    }
                }
            }
        }
        let pos = resize_positions(&self.pos, d, hp.image_size / ps, nx, ny);
        let mut cx = B::Ctx::default();
        let t = || B::Tensor::default();
        let mut b = Bufs {
            x: t(),
            h: t(),
            q: t(),
            k: t(),
            v: t(),
            a: t(),
            o: t(),
            up: t(),
        };
        be.upload(&mut cx, &patches, n, pl, &mut b.h);
        be.matmul_encoder(&mut cx, &mut [(&self.patch_w, &mut b.x)], &b.h)?;
        be.add_bias(&mut cx, &mut b.x, &self.patch_b);
        be.upload(&mut cx, &pos, n, d, &mut b.o);
        be.add(&mut cx, &mut b.x, &b.o);
        let hd = d / hp.n_head;
        let params = AttentionParams {
            n_head: hp.n_head,
            n_kv_head: hp.n_head,
            head_dim: hd,
            head_dim_v: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            softcap: None,
            window: None,
            causal: false,
        };
        let span = SeqSpan {
            row0: 0,
            n,
            pos0: 0,
        };
        // one f32 cache, rewritten by every layer (a layer's keys are read only by it)
        let mut kv = be.new_kv(KvSpec::same(KvType::F32), n, hp.n_head, hd, hd);
        for l in &self.layers {
            be.layer_norm(&mut cx, &b.x, &l.ln1_w, &l.ln1_b, hp.eps, &mut b.h);
            be.matmul_encoder(
                &mut cx,
                &mut [(&l.q.w, &mut b.q), (&l.k.w, &mut b.k), (&l.v.w, &mut b.v)],
                &b.h,
            )?;
            be.add_bias(&mut cx, &mut b.q, &l.q.b);
            be.add_bias(&mut cx, &mut b.k, &l.k.b);
            be.add_bias(&mut cx, &mut b.v, &l.v.b);
            be.kv_store(&mut cx, &mut kv, &b.k, &b.v, span);
            be.attention(&mut cx, &b.q, &[&kv], &[span], &params, &mut b.a);
            linear(be, &mut cx, &l.o, &b.a, &mut b.o)?;
            be.add(&mut cx, &mut b.x, &b.o);
            be.layer_norm(&mut cx, &b.x, &l.ln2_w, &l.ln2_b, hp.eps, &mut b.h);
            be.encoder_ffn(
                &mut cx,
                &mut b.x,
                &b.h,
                (&l.up.w, Some(&l.up.b)),
                (&l.down.w, Some(&l.down.b)),
                hp.act,
                &mut b.up,
                &mut b.o,
            )?;
        }
        be.layer_norm(
            &mut cx,
            &b.x,
            &self.post_ln_w,
            &self.post_ln_b,
            hp.eps,
            &mut b.h,
        );
        // pixel unshuffle: token (ty, tx) is patches (ty·s + dy, tx·s + dx) side by side, dy
        // outer; on the host (one read back of the tower's output: a backend op to permute
        // rows in place would save it on a GPU)
        let mut hidden = Vec::new();
        be.download(&mut cx, &b.h, &mut hidden);
        let (tx, ty) = (nx / s, ny / s);
        let n_tok = tx * ty;
        // [n_tok, s² · d]
        let mut merged_rows = Vec::with_capacity(n * d);
        for y in 0..ty {
            for x in 0..tx {
                for dy in 0..s {
                    for dx in 0..s {
                        let p = (y * s + dy) * nx + x * s + dx;
                        merged_rows.extend_from_slice(&hidden[p * d..(p + 1) * d]);
                    }
                }
            }
        }
        be.upload(&mut cx, &merged_rows, n_tok, d * s * s, &mut b.x);
        match &self.proj {
            ProjectorWeights::Lfm2 { norm, mm1, mm2 } => {
                let merged = match norm {
                    Some((w, bias)) => {
                        // nn.LayerNorm's default epsilon
                        be.layer_norm(&mut cx, &b.x, w, bias, 1e-5, &mut b.h);
                        &b.h
                    }
                    None => &b.x,
                };
                linear(be, &mut cx, mm1, merged, &mut b.up)?;
                be.activate(&mut cx, &mut b.up, Act::Gelu);
                linear(be, &mut cx, mm2, &b.up, &mut b.o)?;
            }
            ProjectorWeights::Idefics3 { fc } => {
                be.matmul_encoder(&mut cx, &mut [(fc, &mut b.o)], &b.x)?;
            }
        }
        let mut out = Vec::new();
        be.download(&mut cx, &b.o, &mut out);
        be.finish(&mut cx);
        Ok((out, n_tok))
    }
}

/// The learned position embeddings (`[side², d]`, a `side` × `side` grid) resized to `nx` ×
/// `ny` as mtmd does for NaFlex towers: ggml's bilinear upscale with antialiasing (PyTorch's
/// `interpolate(..., mode="bilinear", antialias=True)`): a triangle filter widened by the
/// scale when shrinking, pixel centres at +0.5, weights normalized, in f32.
pub fn resize_positions(pos: &[f32], d: usize, side: usize, nx: usize, ny: usize) -> Vec<f32> {
    if nx == side && ny == side {
        return pos.to_vec();
    }
    let tri = |x: f32| (1.0 - x.abs()).max(0.0);
    let (sf0, sf1) = (nx as f32 / side as f32, ny as f32 / side as f32);
    let (sup0, sup1) = ((1.0 / sf0).max(1.0), (1.0 / sf1).max(1.0));
    let (inv0, inv1) = (1.0 / sup0, 1.0 / sup1);
    let mut out = vec![0f32; nx * ny * d];
    let mut acc = vec![0f32; d];
    for oy in 0..ny {
        let y = (oy as f32 + 0.5) / sf1;
        let y_lo = ((y - sup1 + 0.5) as i64).max(0) as usize;
        let y_hi = ((y + sup1 + 0.5) as i64).min(side as i64) as usize;
        for ox in 0..nx {
            let x = (ox as f32 + 0.5) / sf0;
            let x_lo = ((x - sup0 + 0.5) as i64).max(0) as usize;
            let x_hi = ((x + sup0 + 0.5) as i64).min(side as i64) as usize;
            acc.fill(0.0);
            let mut total = 0f32;
            for sy in y_lo..y_hi {
                let wy = tri((sy as f32 - y + 0.5) * inv1);
                for sx in x_lo..x_hi {
                    let w = tri((sx as f32 - x + 0.5) * inv0) * wy;
                    if w <= 0.0 {
                        continue;
                    }
                    let src = &pos[(sy * side + sx) * d..][..d];
                    for (a, &p) in acc.iter_mut().zip(src) {
                        *a += p * w;
                    }
                    total += w;
                }
            }
            let dst = &mut out[(oy * nx + ox) * d..][..d];
            for (o, &a) in dst.iter_mut().zip(&acc) {
                *o = if total > 0.0 { a / total } else { a };
            }
        }
    }
    out
}
