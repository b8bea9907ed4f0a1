// Byte access into the weight words `w`, shared by every format's `wload4`. Blocks are stored
// as the GGUF file has them, except that a block whose size is not whole words is padded to
// it (Q4_0 18 → 20 bytes, Q8_0 34 → 36, Q5_0 22 → 24, IQ4_NL 18 → 20, Q3_K 110 → 112, Q6_K
// 210 → 212: `weights.rs`), so block starts are word-aligned; fields inside may not be.

fn rd8(b: u32) -> u32 {
    return (w[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

// 32 bits starting at any byte.
fn rd32(b: u32) -> u32 {
    let s = (b & 3u) * 8u;
    let lo = w[b >> 2u];
    if (s == 0u) {
        return lo;
    }
    return (lo >> s) | (w[(b >> 2u) + 1u] << (32u - s));
}

fn rd16(b: u32) -> u32 {
    return rd32(b) & 0xffffu;
}

fn half(bits: u32) -> f32 {
    return unpack2x16float(bits).x;
}

// The four bytes of a word, low first.
fn bytes4(v: u32) -> vec4<u32> {
    return (vec4<u32>(v) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
}

// Bytes as signed 8-bit values.
fn sext8(v: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(v << vec4<u32>(24u)) >> vec4<u32>(24u));
}

// Low or high nibbles of four bytes.
fn nibbles(q: vec4<u32>, high: bool) -> vec4<u32> {
    return select(q & vec4<u32>(15u), q >> vec4<u32>(4u), high);
}

// Q4_K/Q5_K: the 6-bit (scale, min) of sub-block j from the 12 scale bytes at byte s.
fn scale_min_k4(j: u32, s: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>(rd8(s + j) & 63u, rd8(s + j + 4u) & 63u);
    }
    let a = rd8(s + j + 4u);
    return vec2<u32>((a & 15u) | ((rd8(s + j - 4u) >> 6u) << 4u), (a >> 4u) | ((rd8(s + j) >> 6u) << 4u));
}

// `wload16(row_base_byte, e) -> mat4x4<f32>`: the 16 elements from `e`, a multiple of 16, as
// four columns. Formats of 256-element super-blocks define their own (`HAS_WLOAD16`): 16
// aligned elements share one scale there and lie in whole words, so the block's header is
// decoded once for them, not once per four (the GEMV's decode cost, not its bandwidth, is what
// bounds it on a large GPU). Every other format gets `wload16.wgsl`, four `wload4`s.

// The four bytes of word `v`, each shifted right by `sh` and masked by `m`, as floats.
fn fields4(v: u32, sh: u32, m: u32) -> vec4<u32> {
    return (bytes4(v) >> vec4<u32>(sh)) & vec4<u32>(m);
}

// Where element e of a row lies in its 256-element super-block of `bytes` bytes, for the
// formats laid out in halves of 128 elements and quarters of 32 (Q2_K, Q3_K, Q6_K): the block's
// first byte, the half h, the quarter j, the place l in the quarter.
struct Pos128 { blk: u32, h: u32, j: u32, l: u32 }

fn pos128(rb: u32, e: u32, bytes: u32) -> Pos128 {
    let i = e % 256u;
    return Pos128(rb + (e / 256u) * bytes, i / 128u, (i % 128u) / 32u, i % 32u);
}

// The same for Q4_K and Q5_K, laid out in chunks of 64 (32 bytes of nibbles: sub-block 2c in
// the low ones, 2c + 1 in the high): the block's first byte, the chunk c, the sub-block s, the
// place l in the chunk's 32 bytes.
struct Pos64 { blk: u32, c: u32, s: u32, l: u32 }

fn pos64(rb: u32, e: u32, bytes: u32) -> Pos64 {
    let i = e % 256u;
    return Pos64(rb + (e / 256u) * bytes, i / 64u, 2u * (i / 64u) + (i % 64u) / 32u, i % 32u);
}

// Q4_K/Q5_K: the sub-block's (d · scale, dmin · min) for the element at `at` (the f16 d and
// dmin lead the block, the 12 scale bytes follow).
fn dmin_k(at: Pos64) -> vec2<f32> {
    let sm = scale_min_k4(at.s, at.blk + 4u);
    let dd = unpack2x16float(w[at.blk / 4u]);
    return vec2<f32>(dd.x * f32(sm.x), dd.y * f32(sm.y));
}
