// The 16 elements from `e` through `wload4`, for formats without a `wload16` of their own
// (the GEMV takes this path only where `HAS_WLOAD16`).
const HAS_WLOAD16: bool = false;

fn wload16(rb: u32, e: u32) -> mat4x4<f32> {
    return mat4x4<f32>(wload4(rb, e), wload4(rb, e + 4u), wload4(rb, e + 8u), wload4(rb, e + 12u));
}
