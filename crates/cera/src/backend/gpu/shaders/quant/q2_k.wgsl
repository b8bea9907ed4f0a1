// Q2_K: super-blocks of 256 in 84 bytes: 16 scale bytes (low nibble scale, high nibble min,
// one per 16 elements), 64 bytes of 2-bit values, f16 d, f16 dmin. Element i: half h = i/128,
// within it shift 2·(r/32) of byte 32h + r%32; scale byte 8h + 2(r/32) + (r%32)/16.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let at = pos128(rb, e, 84u);
    let q = fields4(rd32(at.blk + 16u + at.h * 32u + at.l), 2u * at.j, 3u);
    let sc = rd8(at.blk + at.h * 8u + at.j * 2u + at.l / 16u);
    let dd = unpack2x16float(rd32(at.blk + 80u));
    let dl = dd.x * f32(sc & 15u);
    let ml = dd.y * f32(sc >> 4u);
    return dl * vec4<f32>(q) - ml;
}

// 16 elements (l is 0 or 16): one scale byte, four words of 2-bit values.
const HAS_WLOAD16: bool = true;

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let at = pos128(rb, e, 84u);
    let sc = rd8(at.blk + at.h * 8u + at.j * 2u + at.l / 16u);
    let dd = unpack2x16float(w[(at.blk + 80u) / 4u]);
    let dl = dd.x * f32(sc & 15u);
    let ml = dd.y * f32(sc >> 4u);
    let q = (at.blk + 16u + at.h * 32u + at.l) / 4u;
    let sh = 2u * at.j;
    return mat4x4<f32>(
        dl * vec4<f32>(fields4(w[q], sh, 3u)) - ml,
        dl * vec4<f32>(fields4(w[q + 1u], sh, 3u)) - ml,
        dl * vec4<f32>(fields4(w[q + 2u], sh, 3u)) - ml,
        dl * vec4<f32>(fields4(w[q + 3u], sh, 3u)) - ml,
    );
}
