// Stores one row (token t, head h) of keys or values as Q8_0 blocks: rotated first (blocks of
// rot_n, when the spec rotates), then each 32 quantized as the CPU quantizes activations:
// d = amax / 127, q = round-half-even(x · 127 / amax). A block is 9 words: d's f16 bits, then
// 32 signed bytes.
const WG: u32 = 64u;
struct P { row0: u32, pos0: u32, h: u32, d: u32, n_ctx: u32, src_cols: u32, rot_n: u32, rot_s: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> cache: array<u32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) {
        return;
    }
    let t = g / p.h;
    let h = g % p.h;
    let s = (p.row0 + t) * p.src_cols + h * p.d;
    for (var i = li; i < p.d; i += WG) {
        rowbuf[i] = src[s + i];
    }
    workgroupBarrier();
    fwht_row(p.d, p.rot_n, bitcast<f32>(p.rot_s), li);
    let base = (h * p.n_ctx + p.pos0 + t) * (p.d / 32u) * 9u;
    for (var b = li; b < p.d / 32u; b += WG) {
        var amax = 0.0;
        for (var j = 0u; j < 32u; j++) {
            amax = max(amax, abs(rowbuf[b * 32u + j]));
        }
        let d = amax / 127.0;
        var id = 0.0;
        if (amax != 0.0) {
            id = 127.0 / amax;
        }
        cache[base + b * 9u] = f16_bits(d);
        for (var w4 = 0u; w4 < 8u; w4++) {
            var word = 0u;
            for (var k = 0u; k < 4u; k++) {
                let q = clamp(round(rowbuf[b * 32u + w4 * 4u + k] * id), -128.0, 127.0);
                word |= (u32(i32(q)) & 0xffu) << (8u * k);
            }
            cache[base + b * 9u + 1u + w4] = word;
        }
    }
}
