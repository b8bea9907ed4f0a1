// BF16: the high half of an f32.
fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let b = rb + 2u * e;
    let a = rd32(b);
    let c = rd32(b + 4u);
    return bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, c << 16u, c & 0xffff0000u));
}
