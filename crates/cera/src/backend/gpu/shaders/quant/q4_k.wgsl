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

// 16 elements of one sub-block (r is 0, 16, 32 or 48): one scale and min, four words of
// nibbles (low ones for the first 32 of each 64, high for the next).
const HAS_WLOAD16: bool = true;

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let blk = rb + (e / 256u) * 144u;
    let i = e % 256u;
    let c = i / 64u;
    let r = i % 64u;
    let sm = scale_min_k4(2u * c + r / 32u, blk + 4u);
    let dd = unpack2x16float(w[blk / 4u]);
    let d = dd.x * f32(sm.x);
    let m = dd.y * f32(sm.y);
    let q = (blk + 16u + c * 32u + r % 32u) / 4u;
    let sh = select(0u, 4u, r >= 32u);
    return mat4x4<f32>(
        d * vec4<f32>(fields4(w[q], sh, 15u)) - m,
        d * vec4<f32>(fields4(w[q + 1u], sh, 15u)) - m,
        d * vec4<f32>(fields4(w[q + 2u], sh, 15u)) - m,
        d * vec4<f32>(fields4(w[q + 3u], sh, 15u)) - m,
    );
}
