// out[t] = table[row] for each (t, row) pair of this part of the table.
const WG: u32 = 64u;
struct P { cols: u32, rb: u32, n: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> pairs: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg);
    if (i >= p.groups) {
        return;
    }
    let tr = pairs[i];
    for (var e = li * 4u; e < p.cols; e += WG * 4u) {
        let v = wload4(tr.y * p.rb, e);
        for (var j = 0u; j < 4u; j++) {
            if (e + j < p.cols) {
                o[tr.x * p.cols + e + j] = v[j];
            }
        }
    }
}
