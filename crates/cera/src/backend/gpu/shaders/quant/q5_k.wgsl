// Q5_K: super-blocks of 256 in 176 bytes: f16 d, f16 dmin, 12 bytes of scales and mins (as
// Q4_K), 32 bytes of high bits (bit 2c + r/32 of byte r%32 for element 64c + r), 128 bytes of
// nibbles.

// Four elements of sub-block s from a word of nibbles (high ones for odd s) and a word of high
// bits (bit s of each byte): d · q - m.
fn q5k_col(lo: u32, hi: u32, s: u32, d: f32, m: f32) -> vec4<f32> {
    return d * vec4<f32>(fields4(lo, 4u * (s & 1u), 15u) | (fields4(hi, s, 1u) << vec4<u32>(4u))) - m;
}

fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let at = pos64(rb, e, 176u);
    let dm = dmin_k(at);
    return q5k_col(rd32(at.blk + 48u + at.c * 32u + at.l), rd32(at.blk + 16u + at.l), at.s, dm.x, dm.y);
}

// 16 elements of one sub-block j: one scale and min, four words of nibbles and four of high
// bits (bit j of each byte).
const HAS_WLOAD16: bool = true;

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let at = pos64(rb, e, 176u);
    let dm = dmin_k(at);
    let q = (at.blk + 48u + at.c * 32u + at.l) / 4u;
    let h = (at.blk + 16u + at.l) / 4u;
    return mat4x4<f32>(
        q5k_col(w[q], w[h], at.s, dm.x, dm.y),
        q5k_col(w[q + 1u], w[h + 1u], at.s, dm.x, dm.y),
        q5k_col(w[q + 2u], w[h + 2u], at.s, dm.x, dm.y),
        q5k_col(w[q + 3u], w[h + 3u], at.s, dm.x, dm.y),
    );
}
