// F32: rows of 4-byte floats (rows are 4-aligned).
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let i = (rb >> 2u) + e;
    return bitcast<vec4<f32>>(vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]));
}
