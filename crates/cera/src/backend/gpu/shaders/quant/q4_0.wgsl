// Q4_0: blocks of 32 in 18 bytes: f16 d, 16 bytes of nibbles (elements j and j + 16 share
// byte j); x = (q - 8) · d. On the device (20 bytes) d moves after the nibbles, so that the
// nibbles' words are aligned (see `scale_last` in weights.rs).
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 32u) * 20u;
    let j = e % 32u;
    let d = half(w[(blk + 16u) >> 2u]);
    let q = nibbles(bytes4(w[(blk + (j % 16u)) >> 2u]), j >= 16u);
    return (vec4<f32>(q) - 8.0) * d;
}
