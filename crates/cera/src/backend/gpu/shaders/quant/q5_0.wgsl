// Q5_0: blocks of 32 in 22 bytes: f16 d, 32 high bits (bit j for element j), 16 bytes of
// nibbles; x = (q - 16) · d. On the device (24 bytes) d moves after the nibbles, so that the
// high bits and the nibbles are aligned words (see `scale_last` in weights.rs).
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 32u) * 24u;
    let j = e % 32u;
    let d = half(w[(blk + 20u) >> 2u]);
    let qh = w[blk >> 2u];
    let lo = nibbles(bytes4(w[(blk + 4u + (j % 16u)) >> 2u]), j >= 16u);
    let hi = (vec4<u32>(qh) >> (vec4<u32>(j) + vec4<u32>(0u, 1u, 2u, 3u))) & vec4<u32>(1u);
    return (vec4<f32>(lo | (hi << vec4<u32>(4u))) - 16.0) * d;
}
