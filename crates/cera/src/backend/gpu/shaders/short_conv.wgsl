// LFM2's gated short convolution, one invocation per channel: the window of the last l
// inputs (B ⊙ x) starts from the state (oldest first), slides over the span's rows, and the
// state keeps the last l - 1.
const WG: u32 = 256u;
const MAX_TAPS: u32 = 8u;
struct P { d: u32, l: u32, row0: u32, n: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> bcx: array<f32>;
@group(0) @binding(2) var<storage, read> kern: array<f32>;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let c = group_index(wid, nwg) * WG + li;
    if (c >= p.d) {
        return;
    }
    var win: array<f32, MAX_TAPS>;
    for (var k = 0u; k + 1u < p.l; k++) {
        win[k] = state[k * p.d + c];
    }
    for (var t = 0u; t < p.n; t++) {
        let row = (p.row0 + t) * 3u * p.d;
        win[p.l - 1u] = bcx[row + c] * bcx[row + 2u * p.d + c];
        var conv = 0.0;
        for (var k = 0u; k < p.l; k++) {
            conv += kern[c * p.l + k] * win[k];
        }
        y[(p.row0 + t) * p.d + c] = conv * bcx[row + p.d + c];
        for (var k = 0u; k + 1u < p.l; k++) {
            win[k] = win[k + 1u];
        }
    }
    for (var k = 0u; k + 1u < p.l; k++) {
        state[k * p.d + c] = win[k];
    }
}
