// Q6_K: super-blocks of 256 in 210 bytes (212 on the device): 128 bytes of low nibbles, 64 bytes of 2-bit highs,
// 16 signed scales, f16 d. Element i: half h = i/128, quarter j = (i%128)/32, l = i%32 (`pos128`).

// The signed scale of the 16 elements at `at` times d.
fn q6k_scale(at: Pos128) -> f32 {
    let sc = rd8(at.blk + 192u + at.h * 8u + at.l / 16u + 2u * at.j);
    return half(rd16(at.blk + 208u)) * f32((i32(sc) << 24u) >> 24u);
}

// Four elements of quarter j from a word of nibbles (high ones for quarters 2 and 3) and a
// word of 2-bit highs, scaled by ds.
fn q6k_col(lo: u32, hi: u32, j: u32, ds: f32) -> vec4<f32> {
    let q = fields4(lo, select(0u, 4u, j >= 2u), 15u) | (fields4(hi, 2u * j, 3u) << vec4<u32>(4u));
    return ds * vec4<f32>(vec4<i32>(q) - vec4<i32>(32));
}

fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let at = pos128(rb, e, 212u);
    return q6k_col(rd32(at.blk + at.h * 64u + at.l + (at.j & 1u) * 32u), rd32(at.blk + 128u + at.h * 32u + at.l), at.j, q6k_scale(at));
}

// 16 elements (l is 0 or 16): one signed scale, four words of nibbles and four of 2-bit highs.
const HAS_WLOAD16: bool = true;

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let at = pos128(rb, e, 212u);
    let ds = q6k_scale(at);
    let q = (at.blk + at.h * 64u + at.l + (at.j & 1u) * 32u) / 4u;
    let g = (at.blk + 128u + at.h * 32u + at.l) / 4u;
    return mat4x4<f32>(
        q6k_col(w[q], w[g], at.j, ds),
        q6k_col(w[q + 1u], w[g + 1u], at.j, ds),
        q6k_col(w[q + 2u], w[g + 2u], at.j, ds),
        q6k_col(w[q + 3u], w[g + 3u], at.j, ds),
    );
}
