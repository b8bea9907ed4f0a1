// Q5_0: blocks of 32 in 22 bytes (24 on the device): f16 d, 32 high bits (bit j for element j), 16 bytes of
// nibbles; x = (q - 16) · d.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 32u) * 24u;
    let j = e % 32u;
    let d = half(rd16(blk));
    let qh = rd32(blk + 2u);
    let lo = nibbles(bytes4(rd32(blk + 6u + (j % 16u))), j >= 16u);
    let hi = (vec4<u32>(qh) >> (vec4<u32>(j) + vec4<u32>(0u, 1u, 2u, 3u))) & vec4<u32>(1u);
    return (vec4<f32>(lo | (hi << vec4<u32>(4u))) - 16.0) * d;
}
