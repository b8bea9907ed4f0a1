// out[rows[i]][c] += s · Σ_j t[i][j] · b[c][j], the sum over the rank in rank order.
const WG: u32 = 256u;
struct P { total: u32, out: u32, rank: u32, s: u32, groups: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> t: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> rows: array<u32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let k = group_index(wid, nwg) * WG + li;
    if (k >= p.total) {
        return;
    }
    let i = k / p.out;
    let c = k % p.out;
    var d = 0.0;
    for (var j = 0u; j < p.rank; j++) {
        d += t[i * p.rank + j] * b[c * p.rank + j];
    }
    let at = rows[i] * p.out + c;
    o[at] = o[at] + bitcast<f32>(p.s) * d;
}
