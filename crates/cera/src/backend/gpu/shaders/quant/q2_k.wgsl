// Q2_K: super-blocks of 256 in 84 bytes: 16 scale bytes (low nibble scale, high nibble min,
// one per 16 elements), 64 bytes of 2-bit values, f16 d, f16 dmin. Element i: half h = i/128,
// within it shift 2·(r/32) of byte 32h + r%32; scale byte 8h + 2(r/32) + (r%32)/16.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 256u) * 84u;
    let i = e % 256u;
    let h = i / 128u;
    let r = i % 128u;
    let j = r / 32u;
    let l = r % 32u;
    let q = (bytes4(rd32(blk + 16u + h * 32u + l)) >> vec4<u32>(2u * j)) & vec4<u32>(3u);
    let sc = rd8(blk + h * 8u + j * 2u + l / 16u);
    let dd = unpack2x16float(rd32(blk + 80u));
    let dl = dd.x * f32(sc & 15u);
    let ml = dd.y * f32(sc >> 4u);
    return dl * vec4<f32>(q) - ml;
}

// 16 elements (l is 0 or 16): one scale byte, four words of 2-bit values.
const HAS_WLOAD16: bool = true;

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let blk = rb + (e / 256u) * 84u;
    let i = e % 256u;
    let h = i / 128u;
    let r = i % 128u;
    let j = r / 32u;
    let l = r % 32u;
    let sc = rd8(blk + h * 8u + j * 2u + l / 16u);
    let dd = unpack2x16float(w[(blk + 80u) / 4u]);
    let dl = dd.x * f32(sc & 15u);
    let ml = dd.y * f32(sc >> 4u);
    let q = (blk + 16u + h * 32u + l) / 4u;
    return mat4x4<f32>(
        dl * vec4<f32>(fields4(w[q], 2u * j, 3u)) - ml,
        dl * vec4<f32>(fields4(w[q + 1u], 2u * j, 3u)) - ml,
        dl * vec4<f32>(fields4(w[q + 2u], 2u * j, 3u)) - ml,
        dl * vec4<f32>(fields4(w[q + 3u], 2u * j, 3u)) - ml,
    );
}
