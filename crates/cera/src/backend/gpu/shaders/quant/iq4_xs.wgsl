// IQ4_XS: super-blocks of 256 in 136 bytes: f16 d, 16 high scale bits (2 per 32), 4 bytes of
// low scale nibbles, 128 bytes of nibbles (IQ4_NL's table), scales offset by 32.
var<private> KVALUES: array<f32, 16> = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 256u) * 136u;
    let i = e % 256u;
    let ib = i / 32u;
    let j = i % 32u;
    let d = half(rd16(blk));
    let sh = rd16(blk + 2u);
    let sl = rd8(blk + 4u + ib / 2u);
    let ls = ((sl >> (4u * (ib % 2u))) & 15u) | (((sh >> (2u * ib)) & 3u) << 4u);
    let dl = d * f32(i32(ls) - 32);
    let q = nibbles(bytes4(rd32(blk + 8u + ib * 16u + j % 16u)), j >= 16u);
    return dl * vec4<f32>(KVALUES[q.x], KVALUES[q.y], KVALUES[q.z], KVALUES[q.w]);
}

// 16 elements (j is 0 or 16): one scale, four words of nibbles.
const HAS_WLOAD16: bool = true;

fn iq4xs_col(v: u32, sh: u32, dl: f32) -> vec4<f32> {
    let q = fields4(v, sh, 15u);
    return dl * vec4<f32>(KVALUES[q.x], KVALUES[q.y], KVALUES[q.z], KVALUES[q.w]);
}

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    let blk = rb + (e / 256u) * 136u;
    let i = e % 256u;
    let ib = i / 32u;
    let j = i % 32u;
    let hd = w[blk / 4u];
    let sl = rd8(blk + 4u + ib / 2u);
    let ls = ((sl >> (4u * (ib % 2u))) & 15u) | ((((hd >> 16u) >> (2u * ib)) & 3u) << 4u);
    let dl = half(hd & 0xffffu) * f32(i32(ls) - 32);
    let q = (blk + 8u + ib * 16u) / 4u;
    let sh = select(0u, 4u, j >= 16u);
    return mat4x4<f32>(
        iq4xs_col(w[q], sh, dl),
        iq4xs_col(w[q + 1u], sh, dl),
        iq4xs_col(w[q + 2u], sh, dl),
        iq4xs_col(w[q + 3u], sh, dl),
    );
}
