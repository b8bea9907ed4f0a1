// out[t][col0 + n] = w[n] · x[t], tiled: each workgroup computes TM tokens × TN rows, each
// invocation a 4 × 4 block of them, through shared tiles of TK columns (weights dequantized
// into the tile once).
const WG: u32 = 256u;
const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;
struct P { k: u32, n: u32, rb: u32, t: u32, ldo: u32, col0: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;

var<workgroup> xs: array<f32, 1024>; // [TM][TK]
var<workgroup> ws: array<f32, 1024>; // [TN][TK]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) {
        return;
    }
    let nb = (p.n + TN - 1u) / TN;
    let t0 = (g / nb) * TM;
    let n0 = (g % nb) * TN;
    let ty = li / 16u;
    let tx = li % 16u;
    // what this invocation loads: row li / 4 of each tile, columns 4 (li % 4) ..
    let lr = li / 4u;
    let lc = (li % 4u) * 4u;
    var acc: array<f32, 16>;
    for (var k0 = 0u; k0 < p.k; k0 += TK) {
        let e = k0 + lc;
        let m = (vec4<u32>(e) + vec4<u32>(0u, 1u, 2u, 3u)) < vec4<u32>(p.k);
        var wv = vec4<f32>(0.0);
        if (n0 + lr < p.n && e < p.k) {
            wv = select(vec4<f32>(0.0), wload4((n0 + lr) * p.rb, e), m);
        }
        var xv = vec4<f32>(0.0);
        if (t0 + lr < p.t && e < p.k) {
            let xb = (t0 + lr) * p.k + e;
            xv = select(vec4<f32>(0.0), vec4<f32>(x[xb], x[xb + 1u], x[xb + 2u], x[xb + 3u]), m);
        }
        for (var j = 0u; j < 4u; j++) {
            ws[lr * TK + lc + j] = wv[j];
            xs[lr * TK + lc + j] = xv[j];
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            var a: vec4<f32>;
            var b: vec4<f32>;
            for (var i = 0u; i < 4u; i++) {
                a[i] = xs[(ty * 4u + i) * TK + kk];
                b[i] = ws[(tx * 4u + i) * TK + kk];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] += a[i] * b[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let t = t0 + ty * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let n = n0 + tx * 4u + j;
            if (t < p.t && n < p.n) {
                o[t * p.ldo + p.col0 + n] = acc[i * 4u + j];
            }
        }
    }
}
