//! The fused ops a backend may run as one ([`Backend::fuses_ops`]): products of several
//! same-format weights reading one input, a product reading the RMSNorm or the GLU of its
//! input or adding to its output, RoPE of queries and keys together, and with the cache store. The reference runs them
//! as their parts (the trait's defaults), so each is checked against its composition.

use super::*;

/// `x / √(mean(x²) + eps) · g` per row, in f64 (the scale of the normed products' terms).
fn normed(x: &[f32], g: &[f32], eps: f32) -> Vec<f32> {
    x.chunks_exact(g.len())
        .flat_map(|r| {
            let ms = r.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / r.len() as f64;
            let s = 1.0 / (ms + eps as f64).sqrt();
            r.iter()
                .zip(g)
                .map(move |(&v, &w)| (v as f64 * s * w as f64) as f32)
        })
        .collect()
}

pub(super) fn fused<B: Backend>(h: &mut H<B>) {
    use GgmlType::*;
    let k = 256;
    // Q/K/V-like runs: three of one format, two of another, then one alone
    let types = [Q4_1, Q4_1, Q4_1, Q6_K, Q6_K, Q8_0];
    let rows = [64, 16, 24, 96, 96, 40];
    let mut specs: Vec<_> = (0..types.len())
        .map(|i| {
            let v = h.rng.normal(rows[i] * k, 0.5);
            (format!("f{i}"), types[i], vec![k as u64, rows[i] as u64], v)
        })
        .collect();
    // a down projection reading the GLU of the two Q6_K outputs
    specs.push((
        "down".into(),
        Q4_1,
        vec![96, 72],
        h.rng.normal(96 * 72, 0.5),
    ));
    // long rows, few of them: a GEMM splits K across workgroups (then sums the parts)
    let long = h.rng.normal(2560 * 40, 0.5);
    specs.push(("long".into(), Q4_K, vec![2560, 40], long));
    let file = gguf(&specs);
    let ws: Vec<Weight> = (0..types.len())
        .map(|i| weight(&file, &format!("f{i}")))
        .collect();
    let down = weight(&file, "down");
    let long = weight(&file, "long");
    for n in [9, 17, 70] {
        let x = h.rng.vec(n * 2560, 1.0);
        h.matmul_case(&long, &x, n, &format!("split K: Q4_K 40x2560 tokens {n}"));
    }
    // norm weights around 1 (as trained ones are): with the 8× outliers of `normal`, the
    // normed rows would carry outliers that an 8-bit activation quantization (the CPU's)
    // resolves coarsely, which says nothing about the fusion
    let g: Vec<f32> = h.rng.vec(k, 0.5).iter().map(|v| 1.0 + v).collect();
    let eps = 1e-5;
    // decode-sized steps (a backend may fuse) and prefill-sized (it may not)
    for n in [1, 3, 8, 9, 17] {
        let x = h.rng.vec(n * k, 1.0);
        let xn = normed(&x, &g, eps);
        let (xt, xr) = h.up(&x, n, k);
        // biases on every other output (Qwen2's Q/K/V have them), made without the random
        // source so that the later groups' draws stay where they were
        let biases: Vec<Option<Vec<f32>>> = ws
            .iter()
            .enumerate()
            .map(|(i, w)| {
                (i % 2 == 0).then(|| {
                    (0..w.rows)
                        .map(|r| ((r * 37 + i * 11) % 23) as f32 * 0.1 - 1.1)
                        .collect()
                })
            })
            .collect();
        let bias_refs: Vec<Option<&[f32]>> = biases.iter().map(|b| b.as_deref()).collect();
        for (op, norm) in [
            ("matmul runs", false),
            ("norm_matmul", true),
            ("norm_matmul_bias", true),
        ] {
            let (mut bo, mut ro): (Vec<_>, Vec<_>) = ws.iter().map(|_| h.garbage()).unzip();
            let (mut hb, mut hr) = h.garbage();
            let mut bops: Vec<_> = ws.iter().zip(bo.iter_mut()).collect();
            let mut rops: Vec<_> = ws.iter().zip(ro.iter_mut()).collect();
            let e = if op == "norm_matmul_bias" {
                h.r.norm_matmul_bias(&mut (), &xr, &g, eps, &mut hr, &mut rops, &bias_refs)
                    .unwrap();
                h.be.norm_matmul_bias(&mut h.cx, &xt, &g, eps, &mut hb, &mut bops, &bias_refs)
            } else if norm {
                h.r.norm_matmul(&mut (), &xr, &g, eps, &mut hr, &mut rops)
                    .unwrap();
                h.be.norm_matmul(&mut h.cx, &xt, &g, eps, &mut hb, &mut bops)
            } else {
                h.r.matmul(&mut (), &mut rops, &xr).unwrap();
                h.be.matmul(&mut h.cx, &mut bops, &xt)
            };
            if let Err(e) = e {
                h.fail(op, &format!("tokens {n}"), &e.to_string());
                continue;
            }
            for (i, (o, or)) in bo.iter().zip(&ro).enumerate() {
                let case = format!("weight {i} ({}), tokens {n}", types[i]);
                let s = term_norms(&ws[i], if norm { &xn } else { &x });
                h.check_with(op, &case, o, or, Some(&s), bounds::matmul(types[i]));
            }
        }
        // glu_matmul_add and matmul_add onto a residual stream
        let gate = h.rng.vec(n * 96, 2.0);
        let up = h.rng.vec(n * 96, 1.0);
        let res = h.rng.vec(n * 72, 1.0);
        for act in [Act::Silu, Act::Gelu] {
            let case = format!("{act:?}, tokens {n}");
            let (mut gt, mut gr) = h.up(&gate, n, 96);
            let (ut, ur) = h.up(&up, n, 96);
            let (mut ot, mut or) = h.up(&res, n, 72);
            h.r.glu_matmul_add(&mut (), &mut gr, &ur, act, &down, &mut or)
                .unwrap();
            match h
                .be
                .glu_matmul_add(&mut h.cx, &mut gt, &ut, act, &down, &mut ot)
            {
                Ok(()) => h.check("glu_matmul_add", &case, &ot, &or, bounds::matmul(Q4_1)),
                Err(e) => h.fail("glu_matmul_add", &case, &e.to_string()),
            }
        }
        let a = h.rng.vec(n * 96, 1.0);
        let (at, ar) = h.up(&a, n, 96);
        let (mut ot, mut or) = h.up(&res, n, 72);
        h.r.matmul_add(&mut (), &down, &ar, &mut or).unwrap();
        let case = format!("tokens {n}");
        match h.be.matmul_add(&mut h.cx, &down, &at, &mut ot) {
            Ok(()) => h.check("matmul_add", &case, &ot, &or, bounds::matmul(Q4_1)),
            Err(e) => h.fail("matmul_add", &case, &e.to_string()),
        }
        // queries and keys of different widths (GQA), extra columns after the heads
        let cfg = RopeConfig::new(RopeKind::Neox, 64, 10000.0);
        let pos: Vec<usize> = (0..n).map(|_| h.rng.below(MAX_POS)).collect();
        let q = h.rng.normal(n * (4 * 64 + 3), 1.0);
        let kk = h.rng.normal(n * 2 * 64, 1.0);
        let (mut qt, mut qr) = h.up(&q, n, 4 * 64 + 3);
        let (mut kt, mut kr) = h.up(&kk, n, 2 * 64);
        h.be.rope_qk(&mut h.cx, &mut qt, 4, &mut kt, 2, 64, &pos, &cfg);
        h.r.rope_qk(&mut (), &mut qr, 4, &mut kr, 2, 64, &pos, &cfg);
        h.check(
            "rope_qk",
            &format!("queries, tokens {n}"),
            &qt,
            &qr,
            bounds::ROPE,
        );
        h.check(
            "rope_qk",
            &format!("keys, tokens {n}"),
            &kt,
            &kr,
            bounds::ROPE,
        );
    }
}

/// RoPE of a step's queries and keys with the cache store ([`Backend::rope_qk_store`], one
/// dispatch on a GPU) against the reference's rope, store, and attention over what was stored;
/// and all three with the attention ([`Backend::rope_store_attend`], one dispatch on a GPU for a
/// decode step), into a cache of its own: normal and NeoX pairs, partial rotation, GQA,
/// f32/f16/Q8_0 caches; a prefill of five tokens, then two decode steps (the second reading
/// what the first stored), and a prefill of 300 (a decode step's keys split over workgroups).
pub(super) fn rope_store<B: Backend>(h: &mut H<B>) {
    // (query heads, KV heads, head size, rotated dims)
    for (nh, nkv, hd, n_rot) in [(4, 2, 64, 64), (3, 1, 40, 32), (2, 2, 128, 128)] {
        for kind in [RopeKind::Normal, RopeKind::Neox] {
            let cfg = RopeConfig::new(kind, n_rot, 10000.0);
            for t in [KvType::F32, KvType::F16, KvType::Q8_0] {
                let spec = KvSpec::same(t).for_dims(hd, hd);
                if !h.be.kv_supported(spec, hd, hd) {
                    continue;
                }
                let p = AttentionParams {
                    n_head: nh,
                    n_kv_head: nkv,
                    head_dim: hd,
                    head_dim_v: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    softcap: None,
                    window: None,
                    causal: true,
                };
                for (ctx, first) in [(16, 5usize), (320, 300)] {
                    let mut cb = h.be.new_kv(spec, ctx, nkv, hd, hd);
                    let mut cf = h.be.new_kv(spec, ctx, nkv, hd, hd);
                    let mut cr = h.r.new_kv(spec, ctx, nkv, hd, hd);
                    let mut pos0 = 0;
                    for n in [first, 1, 1] {
                        let case = format!(
                            "{kind:?} {nh}/{nkv} heads {hd} rot {n_rot} {t:?} step of {n} at {pos0}"
                        );
                        let pos: Vec<usize> = (pos0..pos0 + n).collect();
                        let span = SeqSpan { row0: 0, n, pos0 };
                        let q = h.rng.vec(n * nh * hd, 3.0);
                        let k = h.rng.vec(n * nkv * hd, 1.0);
                        let v = h.rng.vec(n * nkv * hd, 1.0);
                        let (mut qt, mut qr) = h.up(&q, n, nh * hd);
                        let (mut kt, mut kr) = h.up(&k, n, nkv * hd);
                        let (vt, vr) = h.up(&v, n, nkv * hd);
                        let (mut qf, _) = h.up(&q, n, nh * hd);
                        let (mut kf, _) = h.up(&k, n, nkv * hd);
                        let (mut of, _) = h.garbage();
                        h.be.rope_store_attend(
                            &mut h.cx, &mut qf, &mut kf, &vt, &mut cf, span, &pos, &cfg, &p,
                            &mut of,
                        );
                        h.be.rope_qk_store(
                            &mut h.cx, &mut qt, nh, &mut kt, &vt, &mut cb, span, hd, &pos, &cfg,
                        );
                        h.r.rope_qk(&mut (), &mut qr, nh, &mut kr, nkv, hd, &pos, &cfg);
                        h.r.kv_store(&mut (), &mut cr, &kr, &vr, span);
                        h.check("rope_qk_store q", &case, &qt, &qr, bounds::ROPE);
                        let (mut o, mut or) = h.garbage();
                        h.be.attention(&mut h.cx, &qt, &[&cb], &[span], &p, &mut o);
                        h.r.attention(&mut (), &qr, &[&cr], &[span], &p, &mut or);
                        // (f32 caches: the bound is the attention op's, whose cases see up to
                        // ~40 keys; over 300 the f32 sums drift further from the f64 reference,
                        // to ~5e-11 on lavapipe, with or without the fused decode)
                        let mut bound = bounds::attention(t, t);
                        if ctx > 16 && t == KvType::F32 {
                            bound.nmse = 1e-10;
                        }
                        h.check("attention after rope_qk_store", &case, &o, &or, bound);
                        h.check("rope_store_attend", &case, &of, &or, bound);
                        pos0 += n;
                    }
                }
            }
        }
    }
}
