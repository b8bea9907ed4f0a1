// After short_conv.wgsl: the state keeps the last l - 1 inputs, one invocation per channel
// (all read before any is written, so a span shorter than the state shifts it in place).
const WG: u32 = 256u;
const MAX_TAPS: u32 = 8u;
struct P { d: u32, l: u32, row0: u32, n: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> bcx: array<f32>;
@group(0) @binding(2) var<storage, read_write> state: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let c = group_index(wid, nwg) * WG + li;
    if (c >= p.d) {
        return;
    }
    var win: array<f32, MAX_TAPS>;
    for (var r = 0u; r + 1u < p.l; r++) {
        // input n - (l - 1) + r of the span
        let j = i32(p.n + r) - i32(p.l) + 1;
        if (j < 0) {
            win[r] = state[u32(i32(p.l) - 1 + j) * p.d + c];
        } else {
            let row = (p.row0 + u32(j)) * 3u * p.d;
            win[r] = bcx[row + c] * bcx[row + 2u * p.d + c];
        }
    }
    for (var r = 0u; r + 1u < p.l; r++) {
        state[r * p.d + c] = win[r];
    }
}
