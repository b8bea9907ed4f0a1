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
