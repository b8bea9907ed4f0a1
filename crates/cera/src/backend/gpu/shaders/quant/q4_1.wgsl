// Q4_1: blocks of 32 in 20 bytes: f16 d, f16 m, 16 bytes of nibbles; x = q · d + m.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 32u) * 20u;
    let j = e % 32u;
    let dm = unpack2x16float(rd32(blk));
    let q = nibbles(bytes4(rd32(blk + 4u + (j % 16u))), j >= 16u);
    return vec4<f32>(q) * dm.x + dm.y;
}
