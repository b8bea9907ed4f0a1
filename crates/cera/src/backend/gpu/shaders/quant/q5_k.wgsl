// Q5_K: super-blocks of 256 in 176 bytes: f16 d, f16 dmin, 12 bytes of scales and mins (as
// Q4_K), 32 bytes of high bits (bit 2c + r/32 of byte r%32 for element 64c + r), 128 bytes of
// nibbles.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 256u) * 176u;
    let i = e % 256u;
    let c = i / 64u;
    let r = i % 64u;
    let l = r % 32u;
    let lo = nibbles(bytes4(rd32(blk + 48u + c * 32u + l)), r >= 32u);
    let hi = (bytes4(rd32(blk + 16u + l)) >> vec4<u32>(2u * c + r / 32u)) & vec4<u32>(1u);
    let sm = scale_min_k4(2u * c + r / 32u, blk + 4u);
    let dd = unpack2x16float(rd32(blk));
    return dd.x * f32(sm.x) * vec4<f32>(lo | (hi << vec4<u32>(4u))) - dd.y * f32(sm.y);
}

// 16 elements of one sub-block j: one scale and min, four words of nibbles and four of high
// bits (bit j of each byte).
const HAS_WLOAD16: bool = true;

fn q5k_col(lo: u32, hi: u32, sh: u32, j: u32, d: f32, m: f32) -> vec4<f32> {
    return d * vec4<f32>(fields4(lo, sh, 15u) | (fields4(hi, j, 1u) << vec4<u32>(4u))) - m;
}

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let blk = rb + (e / 256u) * 176u;
    let i = e % 256u;
    let c = i / 64u;
    let r = i % 64u;
    let l = r % 32u;
    let j = 2u * c + r / 32u;
    let sm = scale_min_k4(j, blk + 4u);
    let dd = unpack2x16float(w[blk / 4u]);
    let d = dd.x * f32(sm.x);
    let m = dd.y * f32(sm.y);
    let q = (blk + 48u + c * 32u + l) / 4u;
    let h = (blk + 16u + l) / 4u;
    let sh = select(0u, 4u, r >= 32u);
    return mat4x4<f32>(
        q5k_col(w[q], w[h], sh, j, d, m),
        q5k_col(w[q + 1u], w[h + 1u], sh, j, d, m),
        q5k_col(w[q + 2u], w[h + 2u], sh, j, d, m),
        q5k_col(w[q + 3u], w[h + 3u], sh, j, d, m),
    );
}
