// Q6_K: super-blocks of 256 in 210 bytes (212 on the device): 128 bytes of low nibbles, 64 bytes of 2-bit highs,
// 16 signed scales, f16 d. Element i: half h = i/128, quarter k = (i%128)/32, l = i%32.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 256u) * 212u;
    let i = e % 256u;
    let h = i / 128u;
    let k = (i % 128u) / 32u;
    let l = i % 32u;
    let lo = nibbles(bytes4(rd32(blk + h * 64u + l + (k & 1u) * 32u)), k >= 2u);
    let hi = (bytes4(rd32(blk + 128u + h * 32u + l)) >> vec4<u32>(2u * k)) & vec4<u32>(3u);
    let q = vec4<f32>(vec4<i32>(lo | (hi << vec4<u32>(4u))) - vec4<i32>(32));
    let sc = rd8(blk + 192u + h * 8u + l / 16u + 2u * k);
    let s = f32((i32(sc) << 24u) >> 24u);
    return half(rd16(blk + 208u)) * s * q;
}

// 16 elements (l is 0 or 16): one signed scale, four words of nibbles and four of 2-bit highs.
const HAS_WLOAD16: bool = true;

fn q6k_col(lo: u32, hi: u32, sh: u32, k: u32, ds: f32) -> vec4<f32> {
    let q = fields4(lo, sh, 15u) | (fields4(hi, 2u * k, 3u) << vec4<u32>(4u));
    return ds * vec4<f32>(vec4<i32>(q) - vec4<i32>(32));
}

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let blk = rb + (e / 256u) * 212u;
    let i = e % 256u;
    let h = i / 128u;
    let k = (i % 128u) / 32u;
    let l = i % 32u;
    let sc = rd8(blk + 192u + h * 8u + l / 16u + 2u * k);
    let ds = half(w[(blk + 208u) / 4u] & 0xffffu) * f32((i32(sc) << 24u) >> 24u);
    let q = (blk + h * 64u + l + (k & 1u) * 32u) / 4u;
    let g = (blk + 128u + h * 32u + l) / 4u;
    let sh = select(0u, 4u, k >= 2u);
    return mat4x4<f32>(
        q6k_col(w[q], w[g], sh, k, ds),
        q6k_col(w[q + 1u], w[g + 1u], sh, k, ds),
        q6k_col(w[q + 2u], w[g + 2u], sh, k, ds),
        q6k_col(w[q + 3u], w[g + 3u], sh, k, ds),
    );
}
