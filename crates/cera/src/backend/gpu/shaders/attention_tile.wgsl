// Attention of a block of BQ query rows (consecutive tokens of one sequence, one head) over
// its cache, for prefill: each tile of BK keys and their values is read from the cache once
// into workgroup memory and serves all BQ queries (attention.wgsl, a workgroup per query row,
// reads every key row once per query: a 512-token prefill read each key up to 512 times).
// Online softmax per row across tiles. Keys and values f32 (type 0) or f16 (1), unrotated;
// head sizes up to DM. The variant's defs declare `BK` and `DM` (64 or 128, `BK` 32 or 16:
// the tiles stay within 32 KB of workgroup memory).
// Invocation li works on query row qi = li / 8: scores of keys lane8 + 8m and output dims
// lane8 + 8m (m < BK / 8, DM / 8), in registers.
const WG: u32 = 128u;
const BQ: u32 = 16u;
const NEG: f32 = -3.0e38;
// padded row stride of the query and key tiles (rows 8 invocations read at once fall in
// different banks)
const KS: u32 = DM + 1u;
struct P {
    row0: u32, n: u32, pos0: u32, n_head: u32, n_kv: u32, d: u32, dv: u32, kw: u32,
    vw: u32, kty: u32, vty: u32, n_ctx: u32, scale: u32, softcap: u32, window: u32, causal: u32,
    q_cols: u32, o_cols: u32, groups: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> kc: array<u32>;
@group(0) @binding(3) var<storage, read> vc: array<u32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;

var<workgroup> qs: array<f32, BQ * KS>;
var<workgroup> ks: array<f32, BK * KS>;
var<workgroup> vs: array<f32, BK * DM>;
var<workgroup> ps: array<f32, BQ * BK>;
// per invocation: the largest of its scores, the sum of its exponentials (a row's eight
// invocations each read their row's eight)
var<workgroup> redm: array<f32, WG>;
var<workgroup> reds: array<f32, WG>;

// Invocations per tile row when loading keys and values: each loads every TPR-th word.
const TPR: u32 = WG / BK;

// Loads `n` rows of cache words from word `base` (rows of `w` words, type `ty`: f32 or f16
// pairs) into `dst` (rows of `stride` floats), zeros past `n`. Called by every invocation.
fn load_tile(is_k: bool, base: u32, w: u32, ty: u32, n: u32, stride: u32, li: u32) {
    let j = li / TPR;
    var wd = li % TPR;
    for (; wd < w; wd += TPR) {
        var x = 0u;
        if (j < n) {
            if (is_k) {
                x = kc[base + j * w + wd];
            } else {
                x = vc[base + j * w + wd];
            }
        }
        if (ty == 1u) {
            let f = unpack2x16float(x);
            if (is_k) {
                ks[j * stride + 2u * wd] = f.x;
                ks[j * stride + 2u * wd + 1u] = f.y;
            } else {
                vs[j * stride + 2u * wd] = f.x;
                vs[j * stride + 2u * wd + 1u] = f.y;
            }
        } else if (is_k) {
            ks[j * stride + wd] = bitcast<f32>(x);
        } else {
            vs[j * stride + wd] = bitcast<f32>(x);
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) {
        return;
    }
    let nqb = (p.n + BQ - 1u) / BQ;
    let qb = g % nqb;
    let h = g / nqb;
    let kvh = h / (p.n_head / p.n_kv);
    let t0 = qb * BQ;
    let nq = min(BQ, p.n - t0);
    let d = p.d;
    let dv = p.dv;
    for (var i = li; i < BQ * d; i += WG) {
        let r = i / d;
        let c = i % d;
        var v = 0.0;
        if (r < nq) {
            v = q[(p.row0 + t0 + r) * p.q_cols + h * d + c];
        }
        qs[r * KS + c] = v;
    }
    // the keys some row of the block sees: lo..=hi
    let first = p.pos0 + t0;
    var hi = first + nq - 1u;
    if (p.causal == 0u) {
        hi = p.pos0 + p.n - 1u;
    }
    var lo = 0u;
    if (p.window > 0u && first + 1u > p.window) {
        lo = first + 1u - p.window;
    }
    let qi = li / 8u;
    let lane8 = li % 8u;
    let pq = first + qi;
    let live = qi < nq;
    let scale = bitcast<f32>(p.scale);
    let cap = bitcast<f32>(p.softcap);
    // this row's running max and sum (the same in each of its eight invocations)
    var rm = NEG;
    var rl = 0.0;
    var acc: array<f32, DM / 8u>;
    for (var m = 0u; m < DM / 8u; m++) {
        acc[m] = 0.0;
    }
    let kbase = kvh * p.n_ctx;
    for (var k0 = lo; k0 <= hi; k0 += BK) {
        let nk = min(BK, hi - k0 + 1u);
        load_tile(true, (kbase + k0) * p.kw, p.kw, p.kty, nk, KS, li);
        load_tile(false, (kbase + k0) * p.vw, p.vw, p.vty, nk, DM, li);
        workgroupBarrier();
        // this invocation's scores: query qi against keys lane8 + 8m
        var s: array<f32, BK / 8u>;
        for (var m = 0u; m < BK / 8u; m++) {
            s[m] = 0.0;
        }
        for (var c = 0u; c < d; c++) {
            let qv = qs[qi * KS + c];
            for (var m = 0u; m < BK / 8u; m++) {
                s[m] += qv * ks[(lane8 + 8u * m) * KS + c];
            }
        }
        var lm = NEG;
        for (var m = 0u; m < BK / 8u; m++) {
            let kj = lane8 + 8u * m;
            let kp = k0 + kj;
            var sc = s[m] * scale;
            if (cap > 0.0) {
                sc = cap * tanh_safe(sc / cap);
            }
            let seen = live && kj < nk && (p.causal == 0u || kp <= pq)
                && (p.window == 0u || kp + p.window > pq);
            s[m] = select(NEG, sc, seen);
            lm = max(lm, s[m]);
        }
        redm[li] = lm;
        workgroupBarrier();
        var mx = rm;
        for (var k = 0u; k < 8u; k++) {
            mx = max(mx, redm[qi * 8u + k]);
        }
        var ls = 0.0;
        for (var m = 0u; m < BK / 8u; m++) {
            var e = 0.0;
            if (s[m] > 0.5 * NEG) {
                e = exp(s[m] - mx);
            }
            ps[qi * BK + lane8 + 8u * m] = e;
            ls += e;
        }
        reds[li] = ls;
        workgroupBarrier();
        var sum = 0.0;
        for (var k = 0u; k < 8u; k++) {
            sum += reds[qi * 8u + k];
        }
        let corr = exp(rm - mx);
        rm = mx;
        rl = rl * corr + sum;
        for (var m = 0u; m < DM / 8u; m++) {
            acc[m] *= corr;
        }
        for (var j = 0u; j < nk; j++) {
            let pj = ps[qi * BK + j];
            for (var m = 0u; m < DM / 8u; m++) {
                acc[m] += pj * vs[j * DM + lane8 + 8u * m];
            }
        }
        workgroupBarrier();
    }
    if (live) {
        let row = (p.row0 + t0 + qi) * p.o_cols + h * dv;
        for (var m = 0u; m < DM / 8u; m++) {
            let dd = lane8 + 8u * m;
            if (dd < dv) {
                o[row + dd] = acc[m] / rl;
            }
        }
    }
}
