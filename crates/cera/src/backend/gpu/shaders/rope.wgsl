// Rotates pair k of head h of row r by that row's (cos, sin) for pair k: normal pairs are
// (2k, 2k+1), NeoX pairs (k, k + half).
const WG: u32 = 256u;
struct P { total: u32, n_head: u32, head_dim: u32, half: u32, neox: u32, cols: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> cs: array<vec2<f32>>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg) * WG + li;
    if (i >= p.total) {
        return;
    }
    let k = i % p.half;
    let h = (i / p.half) % p.n_head;
    let r = i / (p.half * p.n_head);
    let base = r * p.cols + h * p.head_dim;
    var a = base + 2u * k;
    var b = a + 1u;
    if (p.neox != 0u) {
        a = base + k;
        b = a + p.half;
    }
    let c = cs[r * p.half + k];
    let x0 = x[a];
    let x1 = x[b];
    x[a] = x0 * c.x - x1 * c.y;
    x[b] = x0 * c.y + x1 * c.x;
}
