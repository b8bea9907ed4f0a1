// Q3_K: super-blocks of 256 in 110 bytes (112 on the device): 32 bytes of high-bit masks, 64 bytes of 2-bit
// values, 12 bytes of 6-bit scales (16, offset by 32), f16 d. A clear high bit subtracts 4.

// The scale of the 16 elements at `at` (16 of them, offset by 32) times d.
fn q3k_scale(at: Pos128) -> f32 {
    let is = at.h * 8u + at.j * 2u + at.l / 16u;
    let lo4 = (rd8(at.blk + 96u + (is % 8u)) >> (4u * (is / 8u))) & 15u;
    let hi2 = (rd8(at.blk + 104u + (is % 4u)) >> (2u * (is / 4u))) & 3u;
    return half(rd16(at.blk + 108u)) * f32(i32(lo4 | (hi2 << 4u)) - 32);
}

// Four elements from a word of 2-bit values and a word of high-bit masks, scaled by dl.
fn q3k_col(qv: u32, mv: u32, at: Pos128, dl: f32) -> vec4<f32> {
    let hm = fields4(mv, at.h * 4u + at.j, 1u);
    return dl * (vec4<f32>(fields4(qv, 2u * at.j, 3u)) - select(vec4<f32>(4.0), vec4<f32>(0.0), hm != vec4<u32>(0u)));
}

fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let at = pos128(rb, e, 112u);
    return q3k_col(rd32(at.blk + 32u + at.h * 32u + at.l), rd32(at.blk + at.l), at, q3k_scale(at));
}

// 16 elements (l is 0 or 16): one scale, four words of 2-bit values and four of high-bit masks.
const HAS_WLOAD16: bool = true;

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let at = pos128(rb, e, 112u);
    let dl = q3k_scale(at);
    let q = (at.blk + 32u + at.h * 32u + at.l) / 4u;
    let mk = (at.blk + at.l) / 4u;
    return mat4x4<f32>(
        q3k_col(w[q], w[mk], at, dl),
        q3k_col(w[q + 1u], w[mk + 1u], at, dl),
        q3k_col(w[q + 2u], w[mk + 2u], at, dl),
        q3k_col(w[q + 3u], w[mk + 3u], at, dl),
    );
}
