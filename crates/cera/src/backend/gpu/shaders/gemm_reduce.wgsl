// The split-K GEMM's partial sums ([split][t][n] in `part`) added up and stored as the GEMM
// would have (out.wgsl): one invocation per output.
const WG: u32 = 256u;
struct P { n: u32, t: u32, row0: u32, acc: u32, n0: u32, n1: u32, n2: u32, splits: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> o0: array<f32>;
@group(0) @binding(3) var<storage, read_write> o1: array<f32>;
@group(0) @binding(4) var<storage, read_write> o2: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg) * WG + li;
    if (i >= p.t * p.n) {
        return;
    }
    var s = 0.0;
    for (var k = 0u; k < p.splits; k++) {
        s += part[k * p.t * p.n + i];
    }
    store_out(i / p.n, p.row0 + i % p.n, s);
}
