// Rotates pair k of head h of row r by that row's (cos, sin) for pair k: normal pairs are
// (2k, 2k+1), NeoX pairs (k, k + half). Invocations [0, total_a) rotate `a` (the queries),
// the next total_b rotate `b` (the keys, when both go in one dispatch).
const WG: u32 = 256u;
struct P {
    total_a: u32, total_b: u32, heads_a: u32, heads_b: u32, head_dim: u32, half: u32,
    neox: u32, cols_a: u32, cols_b: u32, groups: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> b: array<f32>;
@group(0) @binding(3) var<storage, read> cs: array<vec2<f32>>;

// (first, second) element of the pair `i` rotates, and its (cos, sin) index.
fn pair(i: u32, heads: u32, cols: u32) -> vec3<u32> {
    let k = i % p.half;
    let h = (i / p.half) % heads;
    let r = i / (p.half * heads);
    let base = r * cols + h * p.head_dim;
    if (p.neox != 0u) {
        return vec3<u32>(base + k, base + k + p.half, r * p.half + k);
    }
    return vec3<u32>(base + 2u * k, base + 2u * k + 1u, r * p.half + k);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg) * WG + li;
    if (i < p.total_a) {
        let e = pair(i, p.heads_a, p.cols_a);
        let c = cs[e.z];
        let x0 = a[e.x];
        let x1 = a[e.y];
        a[e.x] = x0 * c.x - x1 * c.y;
        a[e.y] = x0 * c.y + x1 * c.x;
    } else if (i < p.total_a + p.total_b) {
        let e = pair(i - p.total_a, p.heads_b, p.cols_b);
        let c = cs[e.z];
        let x0 = b[e.x];
        let x1 = b[e.y];
        b[e.x] = x0 * c.x - x1 * c.y;
        b[e.y] = x0 * c.y + x1 * c.x;
    }
}
