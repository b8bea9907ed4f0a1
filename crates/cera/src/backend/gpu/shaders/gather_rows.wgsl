// dst[i] = src[rows[i]]
const WG: u32 = 256u;
struct P { total: u32, cols: u32, groups: u32, _a: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> rows: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg) * WG + li;
    if (i < p.total) {
        dst[i] = src[rows[i / p.cols] * p.cols + i % p.cols];
    }
}
