// Q3_K: super-blocks of 256 in 110 bytes (112 on the device): 32 bytes of high-bit masks, 64 bytes of 2-bit
// values, 12 bytes of 6-bit scales (16, offset by 32), f16 d. A clear high bit subtracts 4.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 256u) * 112u;
    let i = e % 256u;
    let h = i / 128u;
    let r = i % 128u;
    let j = r / 32u;
    let l = r % 32u;
    let q = (bytes4(rd32(blk + 32u + h * 32u + l)) >> vec4<u32>(2u * j)) & vec4<u32>(3u);
    let hm = (bytes4(rd32(blk + l)) >> vec4<u32>(h * 4u + j)) & vec4<u32>(1u);
    let is = h * 8u + j * 2u + l / 16u;
    let lo4 = (rd8(blk + 96u + (is % 8u)) >> (4u * (is / 8u))) & 15u;
    let hi2 = (rd8(blk + 104u + (is % 4u)) >> (2u * (is / 4u))) & 3u;
    let s = i32(lo4 | (hi2 << 4u)) - 32;
    let dl = half(rd16(blk + 108u)) * f32(s);
    let v = vec4<f32>(q) - select(vec4<f32>(4.0), vec4<f32>(0.0), hm != vec4<u32>(0u));
    return dl * v;
}

// 16 elements (l is 0 or 16): one scale, four words of 2-bit values and four of high-bit masks.
const HAS_WLOAD16: bool = true;

fn q3k_col(qv: u32, mv: u32, j: u32, hb: u32, dl: f32) -> vec4<f32> {
    let v = vec4<f32>(fields4(qv, 2u * j, 3u)) - select(vec4<f32>(4.0), vec4<f32>(0.0), fields4(mv, hb, 1u) != vec4<u32>(0u));
    return dl * v;
}

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let blk = rb + (e / 256u) * 112u;
    let i = e % 256u;
    let h = i / 128u;
    let r = i % 128u;
    let j = r / 32u;
    let l = r % 32u;
    let is = h * 8u + j * 2u + l / 16u;
    let lo4 = (rd8(blk + 96u + (is % 8u)) >> (4u * (is / 8u))) & 15u;
    let hi2 = (rd8(blk + 104u + (is % 4u)) >> (2u * (is / 4u))) & 3u;
    let dl = half(w[(blk + 108u) / 4u] & 0xffffu) * f32(i32(lo4 | (hi2 << 4u)) - 32);
    let q = (blk + 32u + h * 32u + l) / 4u;
    let mk = (blk + l) / 4u;
    let hb = h * 4u + j;
    return mat4x4<f32>(
        q3k_col(w[q], w[mk], j, hb, dl),
        q3k_col(w[q + 1u], w[mk + 1u], j, hb, dl),
        q3k_col(w[q + 2u], w[mk + 2u], j, hb, dl),
        q3k_col(w[q + 3u], w[mk + 3u], j, hb, dl),
    );
}
