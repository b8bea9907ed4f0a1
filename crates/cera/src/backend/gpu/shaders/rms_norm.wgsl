// y = x / sqrt(mean(x²) + eps) · g over each segment of n (a row, or a head of a row), a
// workgroup per segment. The constants declare `elem(s, i)`, `put(s, i, v)` and `gain(s, i)`
// for element i of segment s: x into y, x in place (each invocation writes only the elements
// it read), or two tensors in place, each with its own gains, segments from `split` on the
// second's (a query's and a key's per-head norms in one dispatch).
const WG: u32 = 256u;
struct P { n: u32, eps: u32, split: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(2) var<storage, read> g: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let s = group_index(wid, nwg);
    if (s >= p.groups) {
        return;
    }
    var acc = 0.0;
    for (var i = li; i < p.n; i += WG) {
        let v = elem(s, i);
        acc += v * v;
    }
    let ss = wg_sum(li, acc);
    let sc = 1.0 / sqrt(ss / f32(p.n) + bitcast<f32>(p.eps));
    for (var i = li; i < p.n; i += WG) {
        put(s, i, elem(s, i) * sc * gain(s, i));
    }
}
