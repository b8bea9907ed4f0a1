// out[t][col0 + row] = w[row] · x[t] for a few tokens (up to MAX_T): one workgroup per weight
// row reads it once for all of them.
const WG: u32 = 64u;
const MAX_T: u32 = 8u;
struct P { k: u32, n: u32, rb: u32, t: u32, ldo: u32, col0: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = group_index(wid, nwg);
    if (row >= p.groups) {
        return;
    }
    let rb = row * p.rb;
    var acc: array<f32, MAX_T>;
    for (var e = li * 4u; e < p.k; e += WG * 4u) {
        let m = (vec4<u32>(e) + vec4<u32>(0u, 1u, 2u, 3u)) < vec4<u32>(p.k);
        let wv = select(vec4<f32>(0.0), wload4(rb, e), m);
        for (var t = 0u; t < p.t; t++) {
            let xb = t * p.k + e;
            let xv = select(vec4<f32>(0.0), vec4<f32>(x[xb], x[xb + 1u], x[xb + 2u], x[xb + 3u]), m);
            acc[t] += dot(wv, xv);
        }
    }
    for (var t = 0u; t < p.t; t++) {
        let s = wg_sum(li, acc[t]);
        if (li == 0u) {
            o[t * p.ldo + p.col0 + row] = s;
        }
    }
}
