// Q4_0: blocks of 32 in 18 bytes (20 on the device): f16 d, 16 bytes of nibbles (elements j and j + 16 share
// byte j); x = (q - 8) · d.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 32u) * 20u;
    let j = e % 32u;
    let d = half(rd16(blk));
    let q = nibbles(bytes4(rd32(blk + 2u + (j % 16u))), j >= 16u);
    return (vec4<f32>(q) - 8.0) * d;
}
