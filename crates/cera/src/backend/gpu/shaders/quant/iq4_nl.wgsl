// IQ4_NL: blocks of 32 in 18 bytes: f16 d, 16 bytes of nibbles indexing a non-linear table. On
// the device (20 bytes) d moves after the nibbles (see `scale_last` in weights.rs).
var<private> KVALUES: array<f32, 16> = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn wload4(rb: u32, e: u32) -> vec4<f32> {
    let blk = rb + (e / 32u) * 20u;
    let j = e % 32u;
    let d = half(w[(blk + 16u) >> 2u]);
    let q = nibbles(bytes4(w[(blk + (j % 16u)) >> 2u]), j >= 16u);
    return d * vec4<f32>(KVALUES[q.x], KVALUES[q.y], KVALUES[q.z], KVALUES[q.w]);
}
