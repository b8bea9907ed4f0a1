// F16: rows of 2-byte halves (a row may start mid-word).
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let b = rb + 2u * e;
    return vec4<f32>(unpack2x16float(rd32(b)), unpack2x16float(rd32(b + 4u)));
}
