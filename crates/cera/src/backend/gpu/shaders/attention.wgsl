// Attention of one query row (token t of the sequence, head h) over its cache: keys in tiles
// of WG (one per invocation), an online softmax across tiles, each invocation accumulating
// value dims li, li + WG, ... A row's keys may be split into n_split chunks of `chunk` keys,
// one workgroup each (decoding has few rows: this is what fills the GPU); then each writes its
// (max, sum, unnormalized output) to `part` and attention_combine.wgsl merges them.
// The defs declare the caches `kc`, `vc`, their writers `put_k`, `put_v`, `slot` (where query
// row t's sequence is: its position and first words in the caches) and `FRESH`: with it (a decode step of one sequence,
// f32/f16 caches, no rotation), the step's own key and value are not in the cache yet but in
// `kf`, `vf` as the QKV product left them: the query and that key are rotated (RoPE, table `cs`)
// as they are read, the fresh key's score and value are taken from there, and one workgroup
// per KV head stores them in the cache (what rope_store.wgsl does, in the same dispatch: no
// other workgroup reads that position of the cache).
const WG: u32 = 64u;
const MAX_D: u32 = 512u;
const NEG: f32 = -3.0e38;
struct P {
    row0: u32, n: u32, pos0: u32, n_head: u32, n_kv: u32, d: u32, dv: u32, kw: u32,
    vw: u32, kty: u32, vty: u32, n_ctx: u32, scale: u32, softcap: u32, window: u32, causal: u32,
    q_cols: u32, o_cols: u32, krot_n: u32, krot_s: u32, vrot_n: u32, vrot_s: u32, n_split: u32,
    chunk: u32, f_half: u32, f_neox: u32, groups: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;

var<workgroup> ps: array<f32, WG>;
// The first word of this workgroup's sequence's value cache in `vc` (0 unless the defs' `slot`
// places several sequences' caches in one buffer).
var<private> vbase: u32;

// Element i of a value row starting at word `base`: f32 (type 0), f16 (1) or Q8_0 (2).
fn vval(base: u32, i: u32) -> f32 {
    if (p.vty == 1u) {
        return unpack2x16float(vc[base + i / 2u])[i & 1u];
    }
    if (p.vty == 2u) {
        let b = base + (i / 32u) * 9u;
        let q = (vc[b + 1u + (i % 32u) / 4u] >> (8u * (i % 4u))) & 0xffu;
        return f32((i32(q) << 24u) >> 24u) * unpack2x16float(vc[b]).x;
    }
    return bitcast<f32>(vc[base + i]);
}

// FRESH: element i of the step's key row starting at `base` of `kf`, rotated (elements past
// the rotated dims, 2 · f_half, as they are; the table's row 0).
fn fresh_key(base: u32, i: u32) -> f32 {
    let x = kf[base + i];
    if (i >= 2u * p.f_half) {
        return x;
    }
    let e = rope_of(i, p.f_half, p.f_neox != 0u);
    return rope_rot(x, kf[base + e.x], cs[e.y], e.z == 1u);
}

// A value as an f32 or f16 cache holds it.
fn as_stored(x: f32, ty: u32) -> f32 {
    if (ty == 1u) {
        return unpack2x16float(f16_bits(x)).x;
    }
    return x;
}

// FRESH: the query (in rowbuf) · the step's own key, its row at `base` of `kf`.
fn fresh_dot(base: u32) -> f32 {
    var s = 0.0;
    for (var i = 0u; i < p.d; i++) {
        s += as_stored(fresh_key(base, i), p.kty) * rowbuf[i];
    }
    return s;
}

// FRESH: the step's key and value rows stored at position `pos` of KV head `kvh`, as
// rope_store.wgsl stores them (this workgroup's share, words li, li + WG, ...).
fn store_fresh(li: u32, kvh: u32, pos: u32) {
    let kb = kvh * p.d;
    let ka = (kvh * p.n_ctx + pos) * p.kw;
    for (var wd = li; wd < p.kw; wd += WG) {
        if (p.kty != 0u) {
            put_k(ka + wd, f16_bits(fresh_key(kb, 2u * wd)) | (f16_bits(fresh_key(kb, 2u * wd + 1u)) << 16u));
        } else {
            put_k(ka + wd, bitcast<u32>(fresh_key(kb, wd)));
        }
    }
    let vb = kvh * p.dv;
    let va = (kvh * p.n_ctx + pos) * p.vw;
    for (var wd = li; wd < p.vw; wd += WG) {
        if (p.vty != 0u) {
            put_v(va + wd, f16_bits(vf[vb + 2u * wd]) | (f16_bits(vf[vb + 2u * wd + 1u]) << 16u));
        } else {
            put_v(va + wd, bitcast<u32>(vf[vb + wd]));
        }
    }
}

// Four signed bytes of a word.
fn sbytes(v: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(v) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// The query (in rowbuf) · the key row at word `kb`. The type's branch is outside the loops
// and each iteration issues several independent loads: a decode step's few workgroups are
// bound by the latency of these reads.
fn qk_dot(kb: u32) -> f32 {
    var s = 0.0;
    if (p.kty == 1u) {
        var i = 0u;
        for (; i + 16u <= p.d; i += 16u) {
            let w = kb + i / 2u;
            let a = vec4<f32>(unpack2x16float(kc[w]), unpack2x16float(kc[w + 1u]));
            let b = vec4<f32>(unpack2x16float(kc[w + 2u]), unpack2x16float(kc[w + 3u]));
            let c = vec4<f32>(unpack2x16float(kc[w + 4u]), unpack2x16float(kc[w + 5u]));
            let e = vec4<f32>(unpack2x16float(kc[w + 6u]), unpack2x16float(kc[w + 7u]));
            s += dot(a, vec4<f32>(rowbuf[i], rowbuf[i + 1u], rowbuf[i + 2u], rowbuf[i + 3u]))
                + dot(b, vec4<f32>(rowbuf[i + 4u], rowbuf[i + 5u], rowbuf[i + 6u], rowbuf[i + 7u]))
                + dot(c, vec4<f32>(rowbuf[i + 8u], rowbuf[i + 9u], rowbuf[i + 10u], rowbuf[i + 11u]))
                + dot(e, vec4<f32>(rowbuf[i + 12u], rowbuf[i + 13u], rowbuf[i + 14u], rowbuf[i + 15u]));
        }
        for (; i + 8u <= p.d; i += 8u) {
            let w = kb + i / 2u;
            let a = unpack2x16float(kc[w]);
            let b = unpack2x16float(kc[w + 1u]);
            let c = unpack2x16float(kc[w + 2u]);
            let e = unpack2x16float(kc[w + 3u]);
            s += dot(vec4<f32>(a, b), vec4<f32>(rowbuf[i], rowbuf[i + 1u], rowbuf[i + 2u], rowbuf[i + 3u]))
                + dot(vec4<f32>(c, e), vec4<f32>(rowbuf[i + 4u], rowbuf[i + 5u], rowbuf[i + 6u], rowbuf[i + 7u]));
        }
        for (; i < p.d; i += 2u) {
            let a = unpack2x16float(kc[kb + i / 2u]);
            s += a.x * rowbuf[i] + a.y * rowbuf[i + 1u];
        }
    } else if (p.kty == 2u) {
        for (var b = 0u; b < p.d / 32u; b++) {
            let base = kb + b * 9u;
            let sc = unpack2x16float(kc[base]).x;
            var bs = 0.0;
            for (var j = 0u; j < 8u; j++) {
                let e = b * 32u + j * 4u;
                bs += dot(sbytes(kc[base + 1u + j]), vec4<f32>(rowbuf[e], rowbuf[e + 1u], rowbuf[e + 2u], rowbuf[e + 3u]));
            }
            s += bs * sc;
        }
    } else {
        var i = 0u;
        for (; i + 4u <= p.d; i += 4u) {
            s += dot(bitcast<vec4<f32>>(vec4<u32>(kc[kb + i], kc[kb + i + 1u], kc[kb + i + 2u], kc[kb + i + 3u])),
                vec4<f32>(rowbuf[i], rowbuf[i + 1u], rowbuf[i + 2u], rowbuf[i + 3u]));
        }
        for (; i < p.d; i++) {
            s += bitcast<f32>(kc[kb + i]) * rowbuf[i];
        }
    }
    return s;
}

// acc · corr + Σ_jj ps[jj] · value row (row0 + jj)[dd] over the tile's nk keys.
fn pv_sum(acc: f32, corr: f32, row0: u32, nk: u32, dd: u32) -> f32 {
    var a = acc * corr;
    if (p.vty == 1u) {
        let wd = dd / 2u;
        let hi = (dd & 1u) == 1u;
        var jj = 0u;
        // eight rows' loads in flight per pass (a decode step's few workgroups wait on them)
        for (; jj + 8u <= nk; jj += 8u) {
            let r = vbase + (row0 + jj) * p.vw + wd;
            let v0 = unpack2x16float(vc[r]);
            let v1 = unpack2x16float(vc[r + p.vw]);
            let v2 = unpack2x16float(vc[r + 2u * p.vw]);
            let v3 = unpack2x16float(vc[r + 3u * p.vw]);
            let v4 = unpack2x16float(vc[r + 4u * p.vw]);
            let v5 = unpack2x16float(vc[r + 5u * p.vw]);
            let v6 = unpack2x16float(vc[r + 6u * p.vw]);
            let v7 = unpack2x16float(vc[r + 7u * p.vw]);
            let va = select(vec4<f32>(v0.x, v1.x, v2.x, v3.x), vec4<f32>(v0.y, v1.y, v2.y, v3.y), hi);
            let vb = select(vec4<f32>(v4.x, v5.x, v6.x, v7.x), vec4<f32>(v4.y, v5.y, v6.y, v7.y), hi);
            a += dot(va, vec4<f32>(ps[jj], ps[jj + 1u], ps[jj + 2u], ps[jj + 3u]))
                + dot(vb, vec4<f32>(ps[jj + 4u], ps[jj + 5u], ps[jj + 6u], ps[jj + 7u]));
        }
        for (; jj + 4u <= nk; jj += 4u) {
            let r = vbase + (row0 + jj) * p.vw + wd;
            let v0 = unpack2x16float(vc[r]);
            let v1 = unpack2x16float(vc[r + p.vw]);
            let v2 = unpack2x16float(vc[r + 2u * p.vw]);
            let v3 = unpack2x16float(vc[r + 3u * p.vw]);
            let v = select(vec4<f32>(v0.x, v1.x, v2.x, v3.x), vec4<f32>(v0.y, v1.y, v2.y, v3.y), hi);
            a += dot(v, vec4<f32>(ps[jj], ps[jj + 1u], ps[jj + 2u], ps[jj + 3u]));
        }
        for (; jj < nk; jj++) {
            a += ps[jj] * unpack2x16float(vc[vbase + (row0 + jj) * p.vw + wd])[dd & 1u];
        }
        return a;
    }
    for (var jj = 0u; jj < nk; jj++) {
        a += ps[jj] * vval(vbase + (row0 + jj) * p.vw, dd);
    }
    return a;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) {
        return;
    }
    let split = g % p.n_split;
    let th = g / p.n_split;
    let t = th / p.n_head;
    let h = th % p.n_head;
    let kvh = h / (p.n_head / p.n_kv);
    // (position, first key word, first value word) of row t's sequence
    let sl = slot(t);
    let pos = sl.x;
    vbase = sl.z;
    let qrow = p.row0 + t;
    for (var i = li; i < p.d; i += WG) {
        rowbuf[i] = q[qrow * p.q_cols + h * p.d + i];
    }
    workgroupBarrier();
    if (FRESH) {
        // (one row: the table's row 0, the step's key and value rows 0)
        for (var kk = li; kk < p.f_half; kk += WG) {
            var e = vec2<u32>(2u * kk, 2u * kk + 1u);
            if (p.f_neox != 0u) {
                e = vec2<u32>(kk, kk + p.f_half);
            }
            let c = cs[kk];
            let x0 = rowbuf[e.x];
            let x1 = rowbuf[e.y];
            rowbuf[e.x] = x0 * c.x - x1 * c.y;
            rowbuf[e.y] = x0 * c.y + x1 * c.x;
        }
        workgroupBarrier();
        if (h % (p.n_head / p.n_kv) == 0u && split == 0u) {
            store_fresh(li, kvh, pos);
        }
    }
    // keys stored rotated: rotate the query alike (the rotation is orthonormal)
    fwht_row(p.d, p.krot_n, bitcast<f32>(p.krot_s), li);
    // the keys this query sees: lo..=hi
    var hi = pos;
    if (p.causal == 0u) {
        hi = p.pos0 + p.n - 1u;
    }
    var lo = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        lo = pos + 1u - p.window;
    }
    // this workgroup's chunk of them (empty when the row has fewer keys)
    lo += split * p.chunk;
    hi = min(hi, lo + p.chunk - 1u);
    let scale = bitcast<f32>(p.scale);
    let cap = bitcast<f32>(p.softcap);
    var m = NEG;
    var l = 0.0;
    var acc: array<f32, 8>;
    for (var k0 = lo; k0 <= hi; k0 += WG) {
        let kp = k0 + li;
        var s = NEG;
        if (kp <= hi) {
            if (FRESH && kp == pos) {
                s = fresh_dot(kvh * p.d) * scale;
            } else {
                s = qk_dot(sl.y + (kvh * p.n_ctx + kp) * p.kw) * scale;
            }
            if (cap > 0.0) {
                s = cap * tanh_safe(s / cap);
            }
        }
        let m_new = max(m, wg_max(li, s));
        var e = 0.0;
        if (kp <= hi) {
            e = exp(s - m_new);
        }
        ps[li] = e;
        let corr = exp(m - m_new);
        l = l * corr + wg_sum(li, e);
        let nk = min(WG, hi - k0 + 1u);
        // FRESH: the tile ending at the step's own position takes that value from `vf`
        var nkc = nk;
        var fe = 0.0;
        if (FRESH && k0 + nk - 1u == pos) {
            nkc = nk - 1u;
            fe = ps[nk - 1u];
        }
        for (var j = 0u; j < 8u; j++) {
            let dd = li + j * WG;
            if (dd < p.dv) {
                acc[j] = pv_sum(acc[j], corr, kvh * p.n_ctx + k0, nkc, dd);
                if (FRESH) {
                    acc[j] += fe * as_stored(vf[kvh * p.dv + dd], p.vty);
                }
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    if (p.n_split > 1u) {
        let base = (th * p.n_split + split) * (p.dv + 2u);
        if (li == 0u) {
            part[base] = m;
            part[base + 1u] = l;
        }
        for (var j = 0u; j < 8u; j++) {
            let dd = li + j * WG;
            if (dd < p.dv) {
                part[base + 2u + dd] = acc[j];
            }
        }
        return;
    }
    // values stored rotated: the output is in their rotated space, and the transform is its
    // own inverse (the row buffer held the query until here)
    workgroupBarrier();
    for (var j = 0u; j < 8u; j++) {
        let dd = li + j * WG;
        if (dd < p.dv) {
            rowbuf[dd] = acc[j] / l;
        }
    }
    workgroupBarrier();
    fwht_row(p.dv, p.vrot_n, bitcast<f32>(p.vrot_s), li);
    for (var dd = li; dd < p.dv; dd += WG) {
        o[qrow * p.o_cols + h * p.dv + dd] = rowbuf[dd];
    }
}
