// Q4_K: super-blocks of 256 in 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins
// (8 of each), 128 bytes of nibbles (64 elements per 32 bytes: low nibbles first).
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 256u) * 144u;
    let i = e % 256u;
    let c = i / 64u;
    let r = i % 64u;
    let q = nibbles(bytes4(rd32(blk + 16u + c * 32u + r % 32u)), r >= 32u);
    let sm = scale_min_k4(2u * c + r / 32u, blk + 4u);
    let dd = unpack2x16float(rd32(blk));
    return dd.x * f32(sm.x) * vec4<f32>(q) - dd.y * f32(sm.y);
}
