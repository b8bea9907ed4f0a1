// out[t][c] = Σ_s slots[t · k + s][c], summed in slot order.
const WG: u32 = 256u;
struct P { total: u32, d: u32, k: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> slots: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg) * WG + li;
    if (i < p.total) {
        let t = i / p.d;
        let c = i % p.d;
        var acc = slots[(t * p.k) * p.d + c];
        for (var s = 1u; s < p.k; s++) {
            acc += slots[(t * p.k + s) * p.d + c];
        }
        o[i] = acc;
    }
}
