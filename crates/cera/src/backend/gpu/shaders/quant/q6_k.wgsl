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
