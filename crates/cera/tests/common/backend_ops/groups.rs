//! The checks, one function per group of ops ([`super::GROUPS`]).

use super::*;

pub(super) fn memory<B: Backend>(h: &mut H<B>) {
    for (r, c) in [(1, 1), (3, 7), (7, 33), (257, 17), (0, 5)] {
        let case = format!("{r}x{c}");
        let data = h.rng.vec(r * c, 1.0);
        let (mut t, _) = h.up(&data, r, c);
        if h.be.shape(&t) != (r, c) {
            h.fail("upload", &case, "shape");
        }
        let got = h.down(&t);
        h.check_vals("upload/download", &case, &got, &data, bounds::EXACT);
        h.be.fill_zero(&mut h.cx, &mut t);
        let got = h.down(&t);
        h.check_vals("fill_zero", &case, &got, &vec![0.0; r * c], bounds::EXACT);
        let z = h.be.zeros(r, c);
        let got = h.down(&z);
        if h.be.shape(&z) != (r, c) {
            h.fail("zeros", &case, "shape");
        }
        h.check_vals("zeros", &case, &got, &vec![0.0; r * c], bounds::EXACT);
        h.be.reshape(&mut t, c + 2, r);
        if h.be.shape(&t) != (c + 2, r) || h.down(&t).len() != (c + 2) * r {
            h.fail("reshape", &case, "shape");
        }
    }
    for (n_ctx, hd) in [(1, 8), (37, 64)] {
        let kv =
            h.be.new_kv(KvSpec::new(KvType::F16, KvType::F32), n_ctx, 2, hd, 24);
        if kv.n_ctx() != n_ctx {
            h.fail("new_kv", &format!("{n_ctx}"), "n_ctx");
        }
    }
}

pub(super) fn elementwise<B: Backend>(h: &mut H<B>) {
    // (rows, heads, head size): cols = heads × head size; norms per row and per head
    let shapes = [
        (1, 1, 1),
        (3, 1, 7),
        (7, 1, 33),
        (33, 1, 100),
        (257, 1, 24),
        (7, 4, 24),
        (3, 8, 8),
        (33, 2, 128),
        (1, 3, 40),
    ];
    for (rows, heads, hd) in shapes {
        let cols = heads * hd;
        let n = rows * cols;
        let case = format!("{rows}x{cols}");
        let x = h.rng.normal(n, 1.0);
        let y = h.rng.normal(n, 1.0);
        let (xt, xr) = h.up(&x, rows, cols);
        let (yt, yr) = h.up(&y, rows, cols);
        let mut segs = vec![cols];
        if heads > 1 {
            segs.push(hd);
        }
        for seg in segs {
            let w = h.rng.normal(seg, 1.0);
            let c = format!("{case} per {seg}");
            for eps in [1e-5f32, 1e-6] {
                let (mut o, mut or) = h.garbage();
                h.be.rms_norm(&mut h.cx, &xt, &w, eps, &mut o);
                h.r.rms_norm(&mut (), &xr, &w, eps, &mut or);
                h.check("rms_norm", &c, &o, &or, bounds::RMS_NORM);
                let (mut a, mut ar) = h.up(&x, rows, cols);
                h.be.rms_norm_inplace(&mut h.cx, &mut a, &w, eps);
                h.r.rms_norm_inplace(&mut (), &mut ar, &w, eps);
                h.check("rms_norm_inplace", &c, &a, &ar, bounds::RMS_NORM);
                // with a second tensor of other rows (a query's heads and a key's; drawn from
                // a generator of their own, so that the later groups' inputs stay as they were)
                let mut pr = super::Rng(0x9a12 ^ n as u64);
                let w2 = pr.normal(seg, 1.0);
                let kr = (rows + 1).div_ceil(2);
                let kx = pr.normal(kr * cols, 1.0);
                let (mut a, mut ar) = h.up(&x, rows, cols);
                let (mut b, mut br) = h.up(&kx, kr, cols);
                h.be.rms_norm_pair(&mut h.cx, &mut a, &w, &mut b, &w2, eps);
                h.r.rms_norm_pair(&mut (), &mut ar, &w, &mut br, &w2, eps);
                h.check("rms_norm_pair", &c, &a, &ar, bounds::RMS_NORM);
                h.check(
                    "rms_norm_pair",
                    &format!("{c}, second"),
                    &b,
                    &br,
                    bounds::RMS_NORM,
                );
            }
        }
        let (mut a, mut ar) = h.up(&x, rows, cols);
        h.be.add(&mut h.cx, &mut a, &yt);
        h.r.add(&mut (), &mut ar, &yr);
        h.check("add", &case, &a, &ar, bounds::ONE_OP);
        for s in [0.37f32, -2.0] {
            let (mut a, mut ar) = h.up(&x, rows, cols);
            h.be.scale(&mut h.cx, &mut a, s);
            h.r.scale(&mut (), &mut ar, s);
            h.check("scale", &case, &a, &ar, bounds::ONE_OP);
        }
        let bias = h.rng.normal(cols, 1.0);
        let (mut a, mut ar) = h.up(&x, rows, cols);
        h.be.add_bias(&mut h.cx, &mut a, &bias);
        h.r.add_bias(&mut (), &mut ar, &bias);
        h.check("add_bias", &case, &a, &ar, bounds::ONE_OP);
        if cols > 1 {
            let (w, b) = (h.rng.normal(cols, 1.0), h.rng.normal(cols, 1.0));
            for eps in [1e-12f32, 1e-5] {
                let (mut o, mut or) = h.garbage();
                h.be.layer_norm(&mut h.cx, &xt, &w, &b, eps, &mut o);
                h.r.layer_norm(&mut (), &xr, &w, &b, eps, &mut or);
                h.check("layer_norm", &case, &o, &or, bounds::RMS_NORM);
            }
        }
        let g = h.rng.vec(n, 8.0);
        for act in [Act::Silu, Act::Gelu] {
            let (mut a, mut ar) = h.up(&g, rows, cols);
            h.be.activate(&mut h.cx, &mut a, act);
            h.r.activate(&mut (), &mut ar, act);
            h.check(
                &format!("activate {act:?}"),
                &case,
                &a,
                &ar,
                bounds::TRANSCENDENTAL,
            );
        }
        for act in [Act::Silu, Act::Gelu] {
            let (mut a, mut ar) = h.up(&g, rows, cols);
            h.be.glu(&mut h.cx, &mut a, &yt, act);
            h.r.glu(&mut (), &mut ar, &yr, act);
            h.check(
                &format!("glu {act:?}"),
                &case,
                &a,
                &ar,
                bounds::TRANSCENDENTAL,
            );
        }
        let big = h.rng.vec(n, 60.0);
        for cap in [5.0f32, 30.0] {
            let (mut a, mut ar) = h.up(&big, rows, cols);
            h.be.softcap(&mut h.cx, &mut a, cap);
            h.r.softcap(&mut (), &mut ar, cap);
            h.check("softcap", &case, &a, &ar, bounds::TRANSCENDENTAL);
        }
        for (c0, m) in [
            (0, cols),
            (cols / 3, cols - cols / 3),
            (cols - 1, 1),
            (cols, 0),
        ] {
            let (mut o, mut or) = h.garbage();
            h.be.copy_cols(&mut h.cx, &xt, c0, m, &mut o);
            h.r.copy_cols(&mut (), &xr, c0, m, &mut or);
            h.check(
                "copy_cols",
                &format!("{case} {c0}+{m}"),
                &o,
                &or,
                bounds::EXACT,
            );
        }
        let picks: [&[usize]; 3] = [&[rows - 1, 0, rows / 2, rows / 2], &[0], &[]];
        for p in picks {
            let (mut o, mut or) = h.garbage();
            h.be.gather_rows(&mut h.cx, &xt, p, &mut o);
            h.r.gather_rows(&mut (), &xr, p, &mut or);
            h.check(
                "gather_rows",
                &format!("{case} {p:?}"),
                &o,
                &or,
                bounds::EXACT,
            );
        }
    }
    top_k(h);
}

pub(super) fn rope<B: Backend>(h: &mut H<B>) {
    let yarn = |ext: f32, attn: f32| RopeScaling {
        ext_factor: ext,
        attn_factor: attn,
        beta_fast: 32.0,
        beta_slow: 1.0,
        n_ctx_orig: 4096,
    };
    // (heads, head size, rotated dims, extra columns after the heads)
    let heads = [
        (4, 64, 64, 0),
        (3, 24, 16, 0),
        (2, 80, 80, 0),
        (5, 128, 128, 7),
        (1, 256, 256, 0),
        (2, 40, 32, 3),
    ];
    for (nh, hd, n_rot, extra) in heads {
        let half = n_rot / 2;
        for kind in [RopeKind::Normal, RopeKind::Neox] {
            let plain = RopeConfig::new(kind, n_rot, 10000.0);
            let scaled = RopeConfig {
                freq_base: 1e6,
                freq_scale: 0.25,
                ..plain.clone()
            };
            let factors = RopeConfig {
                freq_base: 500000.0,
                freq_factors: Some(
                    (0..half)
                        .map(|i| 1.0 + 7.0 * i as f32 / half as f32)
                        .collect(),
                ),
                ..plain.clone()
            };
            let yarn1 = RopeConfig {
                freq_scale: 0.25,
                yarn: Some(yarn(1.0, 1.0)),
                ..plain.clone()
            };
            let yarn0 = RopeConfig {
                yarn: Some(yarn(0.0, 0.8)),
                ..plain.clone()
            };
            let cfgs = [
                ("plain", plain),
                ("scaled", scaled),
                ("freq_factors", factors),
                ("yarn", yarn1),
                ("yarn ext 0", yarn0),
            ];
            for (cname, cfg) in &cfgs {
                for rows in [1, 7, 33] {
                    let cols = nh * hd + extra;
                    let case = format!("{kind:?} {cname} {nh}x{hd} rot {n_rot} rows {rows}");
                    let x = h.rng.normal(rows * cols, 1.0);
                    let pos: Vec<usize> = (0..rows)
                        .map(|r| match r {
                            0 => 0,
                            1 => MAX_POS,
                            _ => h.rng.below(MAX_POS),
                        })
                        .collect();
                    let (mut a, mut ar) = h.up(&x, rows, cols);
                    h.be.rope(&mut h.cx, &mut a, nh, hd, &pos, cfg);
                    h.r.rope(&mut (), &mut ar, nh, hd, &pos, cfg);
                    h.check("rope", &case, &a, &ar, bounds::ROPE);
                }
            }
        }
    }
}

pub(super) fn matmul<B: Backend>(h: &mut H<B>) {
    lora(h);
    lora_embed(h);
    const ROWS: [usize; 7] = [1, 3, 7, 8, 33, 257, 520];
    for ty in matmul_types() {
        let mut specs = Vec::new();
        for &k in widths(ty) {
            for rows in ROWS {
                let v = h.rng.normal(rows * k, 0.5);
                specs.push((format!("w{k}x{rows}"), ty, vec![k as u64, rows as u64], v));
            }
        }
        let file = gguf(&specs);
        for &k in widths(ty) {
            for rows in ROWS {
                let w = weight(&file, &format!("w{k}x{rows}"));
                // no tokens at all, 1 to 9 (tiles of four tokens and their remainders), 17
                let none = if rows == 7 { 0 } else { 1 };
                for n in (none..=9).chain([17]) {
                    let case = format!("{ty} {rows}x{k} tokens {n}");
                    let x = h.rng.vec(n * k, 1.0);
                    h.matmul_case(&w, &x, n, &case);
                }
            }
        }
    }
    encoder_products(h);
    // several weights of different formats reading one input (fused Q/K/V, gate/up), twice
    // in a row with new inputs of the same shape (nothing may be reused from the last input)
    let types = [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::F16,
        GgmlType::Q8_0,
        GgmlType::Q4_1,
    ];
    let rows = [33, 7, 17, 40, 9];
    let specs: Vec<_> = (0..types.len())
        .map(|i| {
            let v = h.rng.normal(rows[i] * 256, 0.5);
            (format!("m{i}"), types[i], vec![256, rows[i] as u64], v)
        })
        .collect();
    let file = gguf(&specs);
    let ws: Vec<Weight> = (0..types.len())
        .map(|i| weight(&file, &format!("m{i}")))
        .collect();
    for n in [5, 5, 1] {
        let x = h.rng.vec(n * 256, 1.0);
        let (xt, xr) = h.up(&x, n, 256);
        let (mut bo, mut ro): (Vec<_>, Vec<_>) = ws.iter().map(|_| h.garbage()).unzip();
        let mut bops: Vec<_> = ws.iter().zip(bo.iter_mut()).collect();
        let mut rops: Vec<_> = ws.iter().zip(ro.iter_mut()).collect();
        let e = h.be.matmul(&mut h.cx, &mut bops, &xt);
        h.r.matmul(&mut (), &mut rops, &xr).unwrap();
        if let Err(e) = e {
            h.fail("matmul", "shared input", &e.to_string());
            continue;
        }
        for (i, (o, or)) in bo.iter().zip(&ro).enumerate() {
            let op = format!("matmul {}", types[i]);
            let case = format!("shared input {i}, tokens {n}");
            let s = term_norms(&ws[i], &x);
            h.check_with(&op, &case, o, or, Some(&s), bounds::matmul(types[i]));
        }
    }
    matmul_lora(h);
    fused(h);
}

pub(super) fn embed<B: Backend>(h: &mut H<B>) {
    use GgmlType::*;
    let (vocab, d) = (37usize, 256usize);
    let types = [F32, F16, BF16, Q8_0, Q4_0, Q5_1, IQ4_NL, Q4_K, Q6_K, IQ4_XS];
    let specs: Vec<_> = types
        .iter()
        .flat_map(|&ty| {
            let shape = vec![d as u64, vocab as u64];
            let t = h.rng.normal(vocab * d, 0.5);
            let o = h.rng.normal(vocab * d, 0.5);
            [
                (format!("tok {ty}"), ty, shape.clone(), t),
                (format!("out {ty}"), ty, shape, o),
            ]
        })
        .collect();
    let file = gguf(&specs);
    let tokens = [0u32, 36, 5, 5, 17, 1];
    for ty in types {
        if ty == F16 {
            let table = weight(&file, &format!("tok {ty}"));
            let (mut o, mut or) = h.garbage();
            let e = h.be.embed(&mut h.cx, &table, &table, &[], &mut o);
            h.r.embed(&mut (), &table, &table, &[], &mut or).unwrap();
            match e {
                Ok(()) => h.check("embed", "no tokens", &o, &or, bounds::EXACT),
                Err(e) => h.fail("embed", "no tokens", &e.to_string()),
            }
        }
        let table = weight(&file, &format!("tok {ty}"));
        let untied = weight(&file, &format!("out {ty}"));
        // tied: the output projection is the table itself (a backend may keep one resident
        // copy for both); the lookups must see the same rows before and after it multiplies
        for (tname, tied) in [("untied", untied), ("tied", table.clone())] {
            for round in 0..2 {
                let case = format!("{ty} {tname} {round}");
                let (mut o, mut or) = h.garbage();
                let e = h.be.embed(&mut h.cx, &table, &tied, &tokens, &mut o);
                h.r.embed(&mut (), &table, &tied, &tokens, &mut or).unwrap();
                match e {
                    Ok(()) => h.check("embed", &case, &o, &or, bounds::EMBED),
                    Err(e) => h.fail("embed", &case, &e.to_string()),
                }
                let x = h.rng.vec(3 * d, 1.0);
                h.matmul_case(&tied, &x, 3, &case);
            }
        }
    }
}

/// Errors the trait promises: a token id past the table, a matmul input of the wrong width.
pub(super) fn errors<B: Backend>(h: &mut H<B>) {
    let v = h.rng.normal(64 * 11, 0.5);
    let file = gguf(&[("t".into(), GgmlType::Q8_0, vec![64, 11], v)]);
    let table = weight(&file, "t");
    let (mut o, mut or) = h.garbage();
    match h.be.embed(&mut h.cx, &table, &table, &[3, 11, 2], &mut o) {
        Ok(()) => h.fail("embed", "id 11 of 11", "no error"),
        Err(e) if !e.to_string().contains("11") => h.fail(
            "embed",
            "id 11 of 11",
            &format!("error does not name the id: {e}"),
        ),
        Err(_) => {}
    }
    assert!(h.r.embed(&mut (), &table, &table, &[11], &mut or).is_err());
    let x = h.rng.normal(2 * 96, 1.0);
    let (xt, xr) = h.up(&x, 2, 96);
    if h.be.matmul(&mut h.cx, &mut [(&table, &mut o)], &xt).is_ok() {
        h.fail("matmul", "input 96 wide, weight 64", "no error");
    }
    assert!(h.r.matmul(&mut (), &mut [(&table, &mut or)], &xr).is_err());
}

/// (KV heads, GQA group, key head size, value head size, window, softcap)
type AttnCase = (usize, usize, usize, usize, Option<usize>, Option<f32>);

pub(super) fn attention<B: Backend>(h: &mut H<B>) {
    rope_store(h);
    let cases: [AttnCase; 10] = [
        (1, 1, 8, 8, None, None),
        (2, 2, 24, 40, Some(5), None),
        (3, 1, 40, 40, None, Some(5.0)),
        (1, 7, 64, 64, Some(37), None),
        (2, 7, 80, 80, None, None),
        (2, 2, 128, 128, Some(16), Some(50.0)),
        (1, 2, 256, 256, None, None),
        (3, 2, 64, 32, Some(70), None),
        (2, 7, 128, 128, Some(100), Some(30.0)),
        (2, 1, 32, 32, Some(1), None),
    ];
    // Steps of tokens per sequence. Three sequences: a prefill, a mixed step (one sequence
    // adds nothing) and a decode step of one token each; forty sequences of a few tokens,
    // then two decode steps of all forty (their rows in another order than the sequences',
    // then in theirs); one long sequence (several tiles of keys and queries), then one token.
    let many: Vec<usize> = (0..40).map(|i| 1 + (i * 7) % 6).collect();
    let plans: [Vec<Vec<usize>>; 3] = [
        vec![vec![100, 1, 33], vec![3, 9, 0], vec![1, 1, 1]],
        vec![many, vec![1; 40], vec![1; 40]],
        vec![vec![300], vec![1]],
    ];
    let kv_types = [
        (KvType::F32, KvType::F32),
        (KvType::F16, KvType::F16),
        (KvType::Q8_0, KvType::Q8_0),
        (KvType::Q8_0, KvType::F16),
        (KvType::Q4_0, KvType::Q4_0),
        (KvType::Q5_1, KvType::IQ4_NL),
        (KvType::BF16, KvType::Q4_1),
        (KvType::TQ3, KvType::TQ3),
        (KvType::TQ4, KvType::Q5_0),
    ];
    for (ci, (nkv, group, hd, hdv, window, softcap)) in cases.into_iter().enumerate() {
        let p = AttentionParams {
            n_head: nkv * group,
            n_kv_head: nkv,
            head_dim: hd,
            head_dim_v: hdv,
            scale: 1.0 / (hd as f32).sqrt(),
            softcap,
            window,
            causal: true,
        };
        let mut seen = Vec::new();
        for (kt, vt) in kv_types {
            let spec = KvSpec::new(kt, vt).for_dims(hd, hdv);
            let (kt, vt) = (spec.k, spec.v);
            if seen.contains(&(kt, vt)) {
                continue;
            }
            seen.push((kt, vt));
            if !h.be.kv_supported(spec, hd, hdv) {
                h.unsupported(&format!(
                    "attention over a {kt:?}/{vt:?} cache of {hd}/{hdv}"
                ));
                continue;
            }
            for (pi, plan) in plans.iter().enumerate() {
                // the bigger plans on every other case, each KV type
                if pi > 0 && ci % 2 == 1 {
                    continue;
                }
                attention_plan(h, &p, spec, plan);
            }
            // an encoder's attention: every sequence whole in one step, keys after the query
            // included (no windows there)
            if window.is_none() && matches!(kt, KvType::F32 | KvType::F16) {
                let enc = AttentionParams {
                    causal: false,
                    ..p.clone()
                };
                attention_plan(h, &enc, spec, &[vec![100, 1, 33]]);
                attention_plan(h, &enc, spec, &[vec![3; 40]]);
            }
        }
    }
}

/// LoRA deltas: f32, f16 and bf16 pairs of ranks 1 to 20 against the reference, on every row
/// or on scattered rows, for decode-sized and prefill-sized steps.
fn lora<B: Backend>(h: &mut H<B>) {
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        for (k, rank, out) in [(64, 1, 8), (96, 8, 200), (576, 16, 192), (40, 20, 1000)] {
            let a = h.rng.normal(rank * k, 0.3);
            let b = h.rng.normal(out * rank, 0.3);
            let file = gguf(&[
                ("a".into(), ty, vec![k as u64, rank as u64], a),
                ("b".into(), ty, vec![rank as u64, out as u64], b),
            ]);
            let lr = cera::backend::LowRank::new(weight(&file, "a"), &weight(&file, "b"), 0, out)
                .unwrap();
            for n in [1usize, 3, 4, 9, 33] {
                let x = h.rng.vec(n * k, 1.0);
                let (xt, xr) = h.up(&x, n, k);
                let base = h.rng.vec(n * 2 * out, 1.0);
                // every row, then the odd rows of a twice-as-tall output
                for scattered in [false, true] {
                    let rows: Vec<usize> = (0..n).map(|i| 2 * i + 1).collect();
                    let (orows, r) = if scattered {
                        (2 * n, Some(&rows[..]))
                    } else {
                        (n, None)
                    };
                    let (mut o, mut or) = h.up(&base[..orows * out], orows, out);
                    let case =
                        format!("{ty} k{k} rank{rank} out{out} tokens {n} scattered {scattered}");
                    if let Err(e) = h.be.lora(&mut h.cx, &mut o, &xt, r, &lr, 0.7) {
                        h.fail("lora", &case, &e.to_string());
                        continue;
                    }
                    h.r.lora(&mut (), &mut or, &xr, r, &lr, 0.7).unwrap();
                    h.check("lora", &case, &o, &or, bounds::lora(ty));
                }
            }
        }
    }
}

/// Projections with their deltas in one call ([`Backend::matmul_lora`], which the CPU fuses for
/// a few rows) equal the product and then each delta on its own, bit for bit: two adapters on
/// one output, none on another, one on a third; every pair f16 (fused), then one bf16 among
/// them (not fused).
fn matmul_lora<B: Backend>(h: &mut H<B>) {
    let k = 512;
    let types = [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16];
    let rows = [200usize, 64, 72];
    let mut specs: Vec<_> = (0..3)
        .map(|i| {
            let v = h.rng.normal(rows[i] * k, 0.5);
            (format!("w{i}"), types[i], vec![k as u64, rows[i] as u64], v)
        })
        .collect();
    // (output, rank, A/B type)
    let pairs = [
        (0usize, 16usize, GgmlType::F16),
        (0, 8, GgmlType::F16),
        (2, 4, GgmlType::F16),
        (2, 5, GgmlType::BF16),
    ];
    for (p, &(i, r, ty)) in pairs.iter().enumerate() {
        let a = h.rng.normal(r * k, 0.3);
        let b = h.rng.normal(rows[i] * r, 0.3);
        specs.push((format!("a{p}"), ty, vec![k as u64, r as u64], a));
        specs.push((format!("b{p}"), ty, vec![r as u64, rows[i] as u64], b));
    }
    let file = gguf(&specs);
    let ws: Vec<Weight> = (0..3).map(|i| weight(&file, &format!("w{i}"))).collect();
    let lrs: Vec<_> = pairs
        .iter()
        .enumerate()
        .map(|(p, &(i, ..))| {
            let (a, b) = (
                weight(&file, &format!("a{p}")),
                weight(&file, &format!("b{p}")),
            );
            cera::backend::LowRank::new(a, &b, 0, rows[i]).unwrap()
        })
        .collect();
    for used in [3usize, 4] {
        let deltas: Vec<_> = (0..used)
            .map(|p| (pairs[p].0, &lrs[p], 0.3 + 0.2 * p as f32))
            .collect();
        for n in [1usize, 2, 4, 9] {
            let case = format!("{used} deltas, tokens {n}");
            let x = h.rng.vec(n * k, 1.0);
            let (xt, _) = h.up(&x, n, k);
            let (mut fused, _): (Vec<_>, Vec<_>) = ws.iter().map(|_| h.garbage()).unzip();
            let (mut apart, _): (Vec<_>, Vec<_>) = ws.iter().map(|_| h.garbage()).unzip();
            let mut fops: Vec<_> = ws.iter().zip(fused.iter_mut()).collect();
            if let Err(e) = h.be.matmul_lora(&mut h.cx, &mut fops, &xt, &deltas) {
                h.fail("matmul_lora", &case, &e.to_string());
                continue;
            }
            let mut aops: Vec<_> = ws.iter().zip(apart.iter_mut()).collect();
            h.be.matmul(&mut h.cx, &mut aops, &xt).unwrap();
            for &(i, pair, s) in &deltas {
                h.be.lora(&mut h.cx, aops[i].1, &xt, None, pair, s).unwrap();
            }
            for i in 0..3 {
                let (f, a) = (h.down(&fused[i]), h.down(&apart[i]));
                let same =
                    f.len() == a.len() && f.iter().zip(&a).all(|(x, y)| x.to_bits() == y.to_bits());
                if !same {
                    h.fail(
                        "matmul_lora",
                        &format!("{case}, output {i}"),
                        "differs from apart",
                    );
                }
            }
        }
    }
}

/// One attention case through the steps of `plan` (tokens per sequence and step): each step
/// stores its keys and values in each sequence's cache, then attends over all of them.
fn attention_plan<B: Backend>(
    h: &mut H<B>,
    p: &AttentionParams,
    spec: KvSpec,
    plan: &[Vec<usize>],
) {
    let (nh, nkv, hd, hdv) = (p.n_head, p.n_kv_head, p.head_dim, p.head_dim_v);
    let n_seq = plan[0].len();
    // one context for all, as a model's sequences have: a backend may then keep the
    // sequences' caches of this layer together and store and attend for all in one pass
    let n_ctx = (0..n_seq)
        .map(|s| plan.iter().map(|st| st[s]).sum::<usize>())
        .max()
        .unwrap_or(0)
        + 2;
    let mut caches: Vec<_> = (0..n_seq)
        .map(|_| {
            let b = h.be.new_layer_kv(0, spec, n_ctx, nkv, hd, hdv);
            let r = h.r.new_layer_kv(0, spec, n_ctx, nkv, hd, hdv);
            (b, r)
        })
        .collect();
    let mut pos = vec![0usize; n_seq];
    for (si, step) in plan.iter().enumerate() {
        // rows of the step: the sequences in order, but rotated by one on odd steps (the
        // spans need not follow the rows)
        let mut order: Vec<usize> = (0..n_seq).collect();
        if si % 2 == 1 {
            order.rotate_left(1);
        }
        let mut spans = vec![
            SeqSpan {
                row0: 0,
                n: 0,
                pos0: 0
            };
            n_seq
        ];
        let mut row = 0;
        for &s in &order {
            spans[s] = SeqSpan {
                row0: row,
                n: step[s],
                pos0: pos[s],
            };
            row += step[s];
        }
        let case = format!(
            "{nh}/{nkv} heads {hd}/{hdv} {:?} {:?} {n_seq} seqs step {si}",
            p.window, p.softcap
        );
        let q = h.rng.vec(row * nh * hd, 3.0);
        let k = h.rng.vec(row * nkv * hd, 1.0);
        let v = h.rng.vec(row * nkv * hdv, 1.0);
        let (qt, qr) = h.up(&q, row, nh * hd);
        let (kb, kr) = h.up(&k, row, nkv * hd);
        let (vb, vr) = h.up(&v, row, nkv * hdv);
        let together = {
            let cb: Vec<&B::Kv> = caches.iter().map(|c| &c.0).collect();
            h.be.kv_store_seqs(&mut h.cx, &cb, &kb, &vb, &spans)
        };
        for s in 0..n_seq {
            let (cb, cr) = &mut caches[s];
            if !together {
                h.be.kv_store(&mut h.cx, cb, &kb, &vb, spans[s]);
            }
            h.r.kv_store(&mut (), cr, &kr, &vr, spans[s]);
            pos[s] += step[s];
        }
        let cb: Vec<&B::Kv> = caches.iter().map(|c| &c.0).collect();
        let cr: Vec<_> = caches.iter().map(|c| &c.1).collect();
        let (mut o, mut or) = h.garbage();
        h.be.attention(&mut h.cx, &qt, &cb, &spans, p, &mut o);
        h.r.attention(&mut (), &qr, &cr, &spans, p, &mut or);
        let (kt, vt) = (spec.k, spec.v);
        let op = format!("attention {kt:?}/{vt:?}");
        h.check(&op, &case, &o, &or, bounds::attention(kt, vt));
    }
}

pub(super) fn short_conv<B: Backend>(h: &mut H<B>) {
    let steps: [[usize; 3]; 3] = [[5, 1, 2], [1, 4, 1], [1, 1, 1]];
    for (d, l) in [(7, 3), (33, 4), (64, 3), (1, 2)] {
        let kernel = h.rng.normal(d * l, 1.0);
        let mut states: Vec<Pair<B>> = (0..3)
            .map(|_| (h.be.zeros(l - 1, d), h.r.zeros(l - 1, d)))
            .collect();
        for (si, step) in steps.iter().enumerate() {
            let rows: usize = step.iter().sum();
            let case = format!("d {d} taps {l} step {si}");
            let bcx = h.rng.normal(rows * 3 * d, 1.0);
            let (bt, br) = h.up(&bcx, rows, 3 * d);
            let (mut o, mut or) = h.garbage();
            h.be.reshape(&mut o, rows, d);
            h.r.reshape(&mut or, rows, d);
            let mut row0 = 0;
            for (s, &n) in step.iter().enumerate() {
                let span = SeqSpan { row0, n, pos0: 0 };
                let (sb, sr) = &mut states[s];
                h.be.short_conv(&mut h.cx, &bt, &kernel, sb, span, &mut o);
                h.r.short_conv(&mut (), &br, &kernel, sr, span, &mut or);
                row0 += n;
            }
            h.check("short_conv", &case, &o, &or, bounds::SHORT_CONV);
            for (s, (sb, sr)) in states.iter().enumerate() {
                let c = format!("{case} seq {s}");
                h.check("short_conv state", &c, sb, sr, bounds::ONE_OP);
            }
        }
    }
}

/// The gap between the `k`-th and the next selection score of a token (how clearly its
/// expert choice is made), in f64.
fn routing_gap(router: &[f32], x: &[f32], gating: Gating, bias: Option<&[f32]>, k: usize) -> f64 {
    let logits: Vec<f64> = router
        .chunks_exact(x.len())
        .map(|r| r.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum())
        .collect();
    let mut p: Vec<f64> = match gating {
        Gating::Sigmoid => logits.iter().map(|&l| 1.0 / (1.0 + (-l).exp())).collect(),
        Gating::Softmax => {
            let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = logits.iter().map(|&l| (l - m).exp()).sum();
            logits.iter().map(|&l| (l - m).exp() / s).collect()
        }
    };
    if let Some(b) = bias {
        p.iter_mut().zip(b).for_each(|(p, &b)| *p += b as f64);
    }
    p.sort_by(|a, b| b.total_cmp(a));
    if k < p.len() {
        p[k - 1] - p[k]
    } else {
        f64::INFINITY
    }
}

/// A delta on the weight of that name, at that scale.
type NamedPair = (String, cera::backend::LowRank, f32);

/// LoRA deltas in a step's MoE block, per group of rows, on its router and every expert.
struct TestMoeLora {
    /// (rows, or every row; (weight name, pair, scale))
    groups: Vec<(Option<Vec<usize>>, Vec<NamedPair>)>,
}

impl cera::backend::MoeLora for TestMoeLora {
    fn n_groups(&self) -> usize {
        self.groups.len()
    }
    fn group_of(&self, t: usize) -> Option<usize> {
        self.groups
            .iter()
            .position(|(rows, _)| rows.as_ref().is_none_or(|r| r.contains(&t)))
    }
    fn each(
        &self,
        g: usize,
        w: &Weight,
        f: &mut dyn FnMut(&cera::backend::LowRank, f32) -> cera::Result<()>,
    ) -> cera::Result<()> {
        for (name, pair, s) in &self.groups[g].1 {
            if *name == w.name {
                f(pair, *s)?;
            }
        }
        Ok(())
    }
}

/// The MoE block with LoRA deltas on the router and the experts' projections: two groups of
/// rows with different adapters and a row with none, then one adapter on every row.
fn moe_lora<B: Backend>(h: &mut H<B>) {
    use GgmlType::*;
    let (d, ff, ne, k, rank) = (64usize, 96usize, 8usize, 2usize, 4usize);
    let mut specs = vec![
        (
            "inp".to_string(),
            F32,
            vec![d as u64, ne as u64],
            h.rng.normal(ne * d, 0.3),
        ),
        (
            "gate".into(),
            Q8_0,
            vec![d as u64, ff as u64, ne as u64],
            h.rng.normal(ne * ff * d, 0.3),
        ),
        (
            "up".into(),
            Q8_0,
            vec![d as u64, ff as u64, ne as u64],
            h.rng.normal(ne * ff * d, 0.3),
        ),
        (
            "down".into(),
            Q4_0,
            vec![ff as u64, d as u64, ne as u64],
            h.rng.normal(ne * d * ff, 0.3),
        ),
    ];
    // pairs: (adapter, weight name, in, out)
    let mut targets = vec![("inp".to_string(), d, ne)];
    for e in 0..ne {
        targets.push((format!("g{e}"), d, ff));
        targets.push((format!("u{e}"), d, ff));
        targets.push((format!("d{e}"), ff, d));
    }
    for ad in 0..2 {
        for (name, i, o) in &targets {
            // small router deltas: the expert choice stays clear
            let amp = if name == "inp" { 0.02 } else { 0.3 };
            let ty = if ad == 0 { F16 } else { F32 };
            specs.push((
                format!("a{ad}{name}"),
                ty,
                vec![*i as u64, rank as u64],
                h.rng.normal(rank * i, amp),
            ));
            specs.push((
                format!("b{ad}{name}"),
                ty,
                vec![rank as u64, *o as u64],
                h.rng.normal(o * rank, amp),
            ));
        }
    }
    let file = gguf(&specs);
    let (gate, up, down) = (
        weight(&file, "gate"),
        weight(&file, "up"),
        weight(&file, "down"),
    );
    let w = MoeWeights {
        gate_inp: weight(&file, "inp"),
        probs_bias: Some(h.rng.vec(ne, 0.2)),
        gate: (0..ne)
            .map(|e| gate.slice_rows(e * ff, ff, &format!("g{e}")))
            .collect(),
        up: (0..ne)
            .map(|e| up.slice_rows(e * ff, ff, &format!("u{e}")))
            .collect(),
        down: (0..ne)
            .map(|e| down.slice_rows(e * d, d, &format!("d{e}")))
            .collect(),
        n_used: k,
        gating: Gating::Sigmoid,
        norm_weights: true,
        weights_scale: 1.0,
        packed_all: Default::default(),
    };
    let pairs = |ad: usize, s: f32| -> Vec<NamedPair> {
        targets
            .iter()
            .map(|(name, _, o)| {
                let a = weight(&file, &format!("a{ad}{name}"));
                let b = weight(&file, &format!("b{ad}{name}"));
                let lr = cera::backend::LowRank::new(a, &b, 0, *o).unwrap();
                (name.clone(), lr, s)
            })
            .collect()
    };
    let cases = [
        (
            5usize,
            TestMoeLora {
                groups: vec![
                    (Some(vec![0, 2, 3]), pairs(0, 0.8)),
                    (Some(vec![4]), pairs(1, 1.3)),
                ],
            },
        ),
        (
            3,
            TestMoeLora {
                groups: vec![(None, pairs(1, 0.6))],
            },
        ),
    ];
    let router = weight(&file, "inp").to_f32().unwrap();
    for (n, lora) in cases {
        let mut x = Vec::with_capacity(n * d);
        while x.len() < n * d {
            let row = h.rng.vec(d, 1.0);
            if routing_gap(&router, &row, Gating::Sigmoid, w.probs_bias.as_deref(), k) > 2e-2 {
                x.extend(row);
            }
        }
        let case = format!("{n} tokens, {} groups", lora.groups.len());
        let (xt, xr) = h.up(&x, n, d);
        let (mut o, mut or) = h.garbage();
        let (mut base, _) = h.garbage();
        let e = h.be.moe(&mut h.cx, &w, &xt, &lora, &mut o);
        h.r.moe(&mut (), &w, &xr, &lora, &mut or).unwrap();
        let _ =
            h.be.moe(&mut h.cx, &w, &xt, &cera::backend::NoLora, &mut base);
        match e {
            Ok(()) => h.check("moe lora", &case, &o, &or, bounds::moe(Q8_0)),
            Err(e) => h.fail("moe lora", &case, &e.to_string()),
        }
        // the deltas change every row that has them, and only those
        let (got, plain) = (h.down(&o), h.down(&base));
        for t in 0..n {
            let changed = got[t * d..(t + 1) * d] != plain[t * d..(t + 1) * d];
            if changed != lora.group_of_row(t) {
                h.fail("moe lora", &case, &format!("row {t} changed: {changed}"));
            }
        }
    }
}

impl TestMoeLora {
    fn group_of_row(&self, t: usize) -> bool {
        cera::backend::MoeLora::group_of(self, t).is_some()
    }
}

/// Token-embedding LoRA deltas ([`Backend::lora_embed`]) on every row and on scattered rows.
fn lora_embed<B: Backend>(h: &mut H<B>) {
    for ty in [GgmlType::F32, GgmlType::F16] {
        let (vocab, d, rank) = (50usize, 72usize, 6usize);
        let file = gguf(&[
            (
                "a".into(),
                ty,
                vec![rank as u64, vocab as u64],
                h.rng.normal(vocab * rank, 0.5),
            ),
            (
                "b".into(),
                ty,
                vec![rank as u64, d as u64],
                h.rng.normal(d * rank, 0.5),
            ),
        ]);
        let lr =
            cera::backend::LowRank::embedding(weight(&file, "a"), &weight(&file, "b")).unwrap();
        let tokens = [3u32, 49, 0, 3];
        for scattered in [false, true] {
            let rows = [5usize, 1, 2, 7];
            let (n_rows, r) = if scattered {
                (8, Some(&rows[..]))
            } else {
                (4, None)
            };
            let base = h.rng.vec(n_rows * d, 1.0);
            let (mut o, mut or) = h.up(&base, n_rows, d);
            let case = format!("{ty} scattered {scattered}");
            if let Err(e) = h.be.lora_embed(&mut h.cx, &mut o, &tokens, r, &lr, 0.7) {
                h.fail("lora_embed", &case, &e.to_string());
                continue;
            }
            h.r.lora_embed(&mut (), &mut or, &tokens, r, &lr, 0.7)
                .unwrap();
            h.check("lora_embed", &case, &o, &or, bounds::lora(ty));
        }
    }
}

pub(super) fn moe<B: Backend>(h: &mut H<B>) {
    moe_lora(h);
    use GgmlType::*;
    // (hidden, expert FFN, experts, used, gate/up type, down type)
    let layers = [
        (64, 96, 8, 2, Q8_0, Q4_0),
        (256, 256, 6, 3, Q4_K, Q6_K),
        (32, 64, 4, 4, Q5_1, Q8_0),
        (48, 40, 5, 2, F32, F32),
    ];
    for (d, ff, ne, k, ty, down_ty) in layers {
        let router = h.rng.normal(ne * d, 0.3);
        let specs = vec![
            (
                "inp".to_string(),
                F32,
                vec![d as u64, ne as u64],
                router.clone(),
            ),
            (
                "gate".into(),
                ty,
                vec![d as u64, ff as u64, ne as u64],
                h.rng.normal(ne * ff * d, 0.3),
            ),
            (
                "up".into(),
                ty,
                vec![d as u64, ff as u64, ne as u64],
                h.rng.normal(ne * ff * d, 0.3),
            ),
            (
                "down".into(),
                down_ty,
                vec![ff as u64, d as u64, ne as u64],
                h.rng.normal(ne * d * ff, 0.3),
            ),
        ];
        let file = gguf(&specs);
        let (gate, up, down) = (
            weight(&file, "gate"),
            weight(&file, "up"),
            weight(&file, "down"),
        );
        let bias: Vec<f32> = h.rng.vec(ne, 0.2);
        for gating in [Gating::Softmax, Gating::Sigmoid] {
            for with_bias in [false, true] {
                for norm in [false, true] {
                    let scale = if norm && gating == Gating::Sigmoid {
                        2.5
                    } else {
                        1.0
                    };
                    let w = MoeWeights {
                        gate_inp: weight(&file, "inp"),
                        probs_bias: with_bias.then(|| bias.clone()),
                        gate: (0..ne).map(|e| gate.slice_rows(e * ff, ff, "g")).collect(),
                        up: (0..ne).map(|e| up.slice_rows(e * ff, ff, "u")).collect(),
                        down: (0..ne).map(|e| down.slice_rows(e * d, d, "d")).collect(),
                        n_used: k,
                        gating,
                        norm_weights: norm,
                        weights_scale: scale,
                        packed_all: Default::default(),
                    };
                    for n in [1, 5, 17] {
                        // only inputs whose expert choice is clear: a backend's rounding must
                        // not be able to pick other experts
                        let mut x = Vec::with_capacity(n * d);
                        while x.len() < n * d {
                            let row = h.rng.vec(d, 1.0);
                            let b = w.probs_bias.as_deref();
                            if routing_gap(&router, &row, gating, b, k) > 1e-3 {
                                x.extend(row);
                            }
                        }
                        let case = format!(
                            "{ty}/{down_ty} {gating:?} bias {with_bias} norm {norm} tokens {n}"
                        );
                        let (xt, xr) = h.up(&x, n, d);
                        let (mut o, mut or) = h.garbage();
                        let e = h.be.moe(&mut h.cx, &w, &xt, &cera::backend::NoLora, &mut o);
                        h.r.moe(&mut (), &w, &xr, &cera::backend::NoLora, &mut or)
                            .unwrap();
                        match e {
                            Ok(()) => {
                                h.check(&format!("moe {ty}"), &case, &o, &or, bounds::moe(ty))
                            }
                            Err(e) => h.fail("moe", &case, &e.to_string()),
                        }
                    }
                }
            }
        }
    }
}

/// Snapshots and the context shift of a KV cache: `kv_save` bytes have the documented length
/// and restore bit-exactly (into a bigger cache, and across backends: the reference reads the
/// backend's bytes and the other way round); `kv_shift` (drop a span, move the rest down,
/// rotate the moved keys back) then attention agrees with the reference; a wrong length is an
/// error.
pub(super) fn kv_state<B: Backend>(h: &mut H<B>) {
    let cases: [(usize, usize, usize, KvType, RopeKind); 9] = [
        (2, 2, 64, KvType::F16, RopeKind::Neox),
        (1, 3, 32, KvType::F32, RopeKind::Normal),
        (2, 1, 64, KvType::Q8_0, RopeKind::Neox),
        (3, 2, 40, KvType::F16, RopeKind::Normal),
        (1, 1, 128, KvType::Q8_0, RopeKind::Normal),
        (2, 2, 64, KvType::Q4_0, RopeKind::Neox),
        (1, 2, 128, KvType::BF16, RopeKind::Normal),
        (2, 1, 64, KvType::TQ3, RopeKind::Neox),
        (1, 2, 96, KvType::TQ4, RopeKind::Normal),
    ];
    let (n, n_ctx) = (50, 64);
    for (nkv, group, hd, ty, kind) in cases {
        let ty = ty.for_head_dim(hd);
        let spec = KvSpec::same(ty);
        let p = AttentionParams {
            n_head: nkv * group,
            n_kv_head: nkv,
            head_dim: hd,
            head_dim_v: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            softcap: None,
            window: None,
            causal: true,
        };
        let case = format!("{nkv}x{group} heads of {hd} {ty:?} {kind:?}");
        if !h.be.kv_supported(spec, hd, hd) {
            h.unsupported(&format!("kv_state of {case}"));
            continue;
        }
        let mut cb = h.be.new_kv(spec, n_ctx, nkv, hd, hd);
        let mut cr = h.r.new_kv(spec, n_ctx, nkv, hd, hd);
        let k = h.rng.vec(n * nkv * hd, 1.0);
        let v = h.rng.vec(n * nkv * hd, 1.0);
        let (kb, kr) = h.up(&k, n, nkv * hd);
        let (vb, vr) = h.up(&v, n, nkv * hd);
        let all = SeqSpan {
            row0: 0,
            n,
            pos0: 0,
        };
        h.be.kv_store(&mut h.cx, &mut cb, &kb, &vb, all);
        h.r.kv_store(&mut (), &mut cr, &kr, &vr, all);

        let mut bytes = Vec::new();
        // the step that stored them ends before the snapshot (a GPU submits it here)
        h.be.finish(&mut h.cx);
        h.be.kv_save(&cb, n, &mut bytes);
        if bytes.len() != cb.saved_len(n) {
            let what = format!("{} bytes, saved_len says {}", bytes.len(), cb.saved_len(n));
            h.fail("kv_save", &case, &what);
            continue;
        }
        let mut rbytes = Vec::new();
        h.r.kv_save(&cr, n, &mut rbytes);
        let mut cb2 = h.be.new_kv(spec, n_ctx + 30, nkv, hd, hd);
        let mut cr2 = h.r.new_kv(spec, n_ctx, nkv, hd, hd);
        if let Err(e) = h.be.kv_load(&mut cb2, n, &rbytes) {
            h.fail("kv_load", &case, &format!("reference bytes: {e}"));
            continue;
        }
        if let Err(e) = h.r.kv_load(&mut cr2, n, &bytes) {
            h.fail(
                "kv_load",
                &case,
                &format!("backend bytes on the reference: {e}"),
            );
            continue;
        }
        if h.be.kv_load(&mut cb2, n, &bytes[1..]).is_ok() {
            h.fail("kv_load", &case, "a short buffer was accepted");
        }
        if h.be.kv_load(&mut cb2, n, &bytes).is_err() {
            h.fail("kv_load", &case, "its own bytes were refused");
        }
        // the last three positions attend over the original and the restored caches
        let last = SeqSpan {
            row0: 0,
            n: 3,
            pos0: n - 3,
        };
        let q = h.rng.vec(3 * p.n_head * hd, 3.0);
        let (qb, qr) = h.up(&q, 3, p.n_head * hd);
        let attend = |h: &mut H<B>, kvb: &B::Kv, kvr: &RefKv, s: SeqSpan| {
            let (mut o, mut or) = h.garbage();
            h.be.attention(&mut h.cx, &qb, &[kvb], &[s], &p, &mut o);
            h.r.attention(&mut (), &qr, &[kvr], &[s], &p, &mut or);
            (h.down(&o), or.data.clone())
        };
        let (o1, want) = attend(h, &cb, &cr, last);
        let (o2, want2) = attend(h, &cb2, &cr2, last);
        h.check_vals("kv_load", &case, &o2, &o1, bounds::EXACT);
        h.check_vals(
            "kv_load (reference)",
            &case,
            &want2,
            &want,
            bounds::attention(ty, ty),
        );

        // shift: keep 5, drop 20, the 25 after them move to 5..30
        let mut rope = RopeConfig::new(kind, hd, 10000.0);
        rope.freq_scale = 0.5;
        h.be.finish(&mut h.cx);
        h.be.kv_shift(&mut cb, 5, 20, n, Some(&rope));
        h.r.kv_shift(&mut cr, 5, 20, n, Some(&rope));
        let moved = SeqSpan {
            row0: 0,
            n: 3,
            pos0: 27,
        };
        let (o, want) = attend(h, &cb, &cr, moved);
        h.check_vals("kv_shift", &case, &o, &want, bounds::attention(ty, ty));
    }
}
