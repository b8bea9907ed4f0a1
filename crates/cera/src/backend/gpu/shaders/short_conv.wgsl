// LFM2's gated short convolution, one invocation per (token, channel): the window of the l
// inputs (B ⊙ x) ending at the token, the ones before the span taken from the state (oldest
// first), times the channel's taps, gated by C. Tokens are independent here; the state moves
// on in short_conv_state.wgsl, except for a single token (decode), whose invocation per
// channel moves its channel's state on itself after reading it (one dispatch, not two).
const WG: u32 = 256u;
const MAX_TAPS: u32 = 8u;
struct P { d: u32, l: u32, row0: u32, n: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> bcx: array<f32>;
@group(0) @binding(2) var<storage, read> kern: array<f32>;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// Input j of the span (B ⊙ x of its row j), or of the state for j < 0.
fn input(j: i32, c: u32) -> f32 {
    if (j < 0) {
        return state[u32(i32(p.l) - 1 + j) * p.d + c];
    }
    let row = (p.row0 + u32(j)) * 3u * p.d;
    return bcx[row + c] * bcx[row + 2u * p.d + c];
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = group_index(wid, nwg) * WG + li;
    if (i >= p.n * p.d) {
        return;
    }
    let t = i / p.d;
    let c = i % p.d;
    var conv = 0.0;
    for (var k = 0u; k < p.l; k++) {
        conv += kern[c * p.l + k] * input(i32(t + k) - i32(p.l) + 1, c);
    }
    let row = (p.row0 + t) * 3u * p.d;
    y[(p.row0 + t) * p.d + c] = conv * bcx[row + p.d + c];
    if (p.n == 1u && p.l > 1u) {
        for (var r = 0u; r + 2u < p.l; r++) {
            state[r * p.d + c] = state[(r + 1u) * p.d + c];
        }
        state[(p.l - 2u) * p.d + c] = input(0, c);
    }
}
