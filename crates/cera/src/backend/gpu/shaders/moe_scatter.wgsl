// slots[slot_i][c] = weight_i · y[i][c] for the rows one expert computed.
const WG: u32 = 256u;
struct P { total: u32, d: u32, groups: u32, _a: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> pairs: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> slots: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg) * WG + li;
    if (i < p.total) {
        let r = i / p.d;
        let sw = pairs[r];
        slots[sw.x * p.d + i % p.d] = bitcast<f32>(sw.y) * y[i];
    }
}
