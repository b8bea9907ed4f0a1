// Q8_0: blocks of 32 in 34 bytes: f16 d, 32 signed bytes; x = q · d. On the device (36 bytes)
// d moves after the bytes, so that their words are aligned (see `scale_last` in weights.rs).
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 32u) * 36u;
    let d = half(w[(blk + 32u) >> 2u]);
    return sext8(bytes4(w[(blk + (e % 32u)) >> 2u])) * d;
}
