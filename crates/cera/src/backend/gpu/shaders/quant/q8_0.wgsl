// Q8_0: blocks of 32 in 34 bytes (36 on the device): f16 d, 32 signed bytes; x = q · d.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 32u) * 36u;
    let d = half(rd16(blk));
    return sext8(bytes4(rd32(blk + 2u + (e % 32u)))) * d;
}
