// Q4_K: super-blocks of 256 in 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins
// (8 of each), 128 bytes of nibbles (64 elements per 32 bytes: low nibbles first).
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let at = pos64(rb, e, 144u);
    let dm = dmin_k(at);
    return dm.x * vec4<f32>(fields4(rd32(at.blk + 16u + at.c * 32u + at.l), 4u * (at.s & 1u), 15u)) - dm.y;
}

// 16 elements of one sub-block (r is 0, 16, 32 or 48): one scale and min, four words of
// nibbles (low ones for the first 32 of each 64, high for the next).
const HAS_WLOAD16: bool = true;

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let at = pos64(rb, e, 144u);
    let dm = dmin_k(at);
    let d = dm.x;
    let m = dm.y;
    let q = (at.blk + 16u + at.c * 32u + at.l) / 4u;
    let sh = 4u * (at.s & 1u);
    return mat4x4<f32>(
        d * vec4<f32>(fields4(w[q], sh, 15u)) - m,
        d * vec4<f32>(fields4(w[q + 1u], sh, 15u)) - m,
        d * vec4<f32>(fields4(w[q + 2u], sh, 15u)) - m,
        d * vec4<f32>(fields4(w[q + 3u], sh, 15u)) - m,
    );
}
