// Q5_1: blocks of 32 in 24 bytes: f16 d, f16 m, 32 high bits, 16 bytes of nibbles;
// x = q · d + m.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 32u) * 24u;
    let j = e % 32u;
    let dm = unpack2x16float(rd32(blk));
    let qh = rd32(blk + 4u);
    let lo = nibbles(bytes4(rd32(blk + 8u + (j % 16u))), j >= 16u);
    let hi = (vec4<u32>(qh) >> (vec4<u32>(j) + vec4<u32>(0u, 1u, 2u, 3u))) & vec4<u32>(1u);
    return vec4<f32>(lo | (hi << vec4<u32>(4u))) * dm.x + dm.y;
}
