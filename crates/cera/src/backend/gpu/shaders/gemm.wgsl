// out[t][n] (+)= w[n] · x[t] (of up to three concatenated weights: see out.wgsl), tiled: each
// workgroup computes TM tokens × TN rows, each invocation a 4 × 4 block of them, through
// shared tiles of TK columns stored k-major as vec4s (a row of 16 invocations reads 16
// consecutive vec4s: no bank conflicts); weights are dequantized into the tile once, and the
// next tile's loads are in flight while the current one is multiplied. When the tiles are too
// few to fill the GPU (a long K, few rows: FFN down), K is split across `splits` workgroups
// per tile, each writing its partial sums to `part` ([split][t][n]) for gemm_reduce.wgsl (the
// SPLIT variant: the plain one keeps the loop bounds uniform and binds no scratch).
const WG: u32 = 256u;
const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;
struct P {
    k: u32, n: u32, rb: u32, t: u32, row0: u32, acc: u32, n0: u32, n1: u32, n2: u32,
    splits: u32, kchunk: u32, groups: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> o0: array<f32>;
@group(0) @binding(4) var<storage, read_write> o1: array<f32>;
@group(0) @binding(5) var<storage, read_write> o2: array<f32>;
// (with SPLIT, the constants declare binding 6: `part`)

var<workgroup> xs: array<vec4<f32>, 256>; // [TK][TM / 4]
var<workgroup> ws: array<vec4<f32>, 256>; // [TK][TN / 4]

// Columns e..e+3 of weight row n (zero past the edges).
fn load_w(n: u32, e: u32) -> vec4<f32> {
    if (n >= p.n || e >= p.k) {
        return vec4<f32>(0.0);
    }
    let m = (vec4<u32>(e) + vec4<u32>(0u, 1u, 2u, 3u)) < vec4<u32>(p.k);
    return select(vec4<f32>(0.0), wload4(n * p.rb, e), m);
}

// Columns e..e+3 of token t's input (zero past the edges).
fn load_x(t: u32, e: u32) -> vec4<f32> {
    if (t >= p.t || e >= p.k) {
        return vec4<f32>(0.0);
    }
    let b = t * p.k + e;
    if (e + 3u < p.k) {
        return vec4<f32>(x[b], x[b + 1u], x[b + 2u], x[b + 3u]);
    }
    var v = vec4<f32>(0.0);
    for (var j = 0u; e + j < p.k; j++) {
        v[j] = x[b + j];
    }
    return v;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) {
        return;
    }
    let nb = (p.n + TN - 1u) / TN;
    let tiles = nb * ((p.t + TM - 1u) / TM);
    let split = g / tiles;
    let t0 = ((g % tiles) / nb) * TM;
    let n0 = (g % nb) * TN;
    var k_lo = 0u;
    var k_hi = p.k;
    if (SPLIT) {
        k_lo = split * p.kchunk;
        k_hi = min(p.k, k_lo + p.kchunk);
    }
    // the block this invocation computes: tokens 4 ty.., rows 4 tx..
    let ty = li / 16u;
    let tx = li % 16u;
    // what it loads: row (and token) lr of the tiles, columns lc..lc+3
    let lr = li / 4u;
    let lc = (li % 4u) * 4u;
    var acc: array<vec4<f32>, 4>;
    var wv = load_w(n0 + lr, k_lo + lc);
    var xv = load_x(t0 + lr, k_lo + lc);
    for (var k0 = k_lo; k0 < k_hi; k0 += TK) {
        for (var j = 0u; j < 4u; j++) {
            ws[(lc + j) * 16u + lr / 4u][lr % 4u] = wv[j];
            xs[(lc + j) * 16u + lr / 4u][lr % 4u] = xv[j];
        }
        workgroupBarrier();
        if (k0 + TK < k_hi) {
            wv = load_w(n0 + lr, k0 + TK + lc);
            xv = load_x(t0 + lr, k0 + TK + lc);
        }
        for (var kk = 0u; kk < TK; kk++) {
            let a = xs[kk * 16u + ty];
            let b = ws[kk * 16u + tx];
            acc[0] += a.x * b;
            acc[1] += a.y * b;
            acc[2] += a.z * b;
            acc[3] += a.w * b;
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let t = t0 + ty * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let n = n0 + tx * 4u + j;
            if (t < p.t && n < p.n) {
                if (SPLIT) {
                    part[(split * p.t + t) * p.n + n] = acc[i][j];
                } else {
                    store_out(t, p.row0 + n, acc[i][j]);
                }
            }
        }
    }
}
