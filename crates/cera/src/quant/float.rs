//! Plain float element types: F32, F16 and BF16 (one element per "block").

fn chunks<const N: usize>(src: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    src.chunks_exact(N)
        .map(|c| c.try_into().expect("chunk of N bytes"))
}

pub(super) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (d, c) in dst.iter_mut().zip(chunks::<4>(src)) {
        *d = f32::from_le_bytes(c);
    }
}

pub(super) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (d, c) in dst.iter_mut().zip(chunks::<2>(src)) {
        *d = super::f16_to_f32(c);
    }
}

/// BF16 is the top half of an f32, so widening is exact.
pub(super) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (d, c) in dst.iter_mut().zip(chunks::<2>(src)) {
        *d = f32::from_bits((u16::from_le_bytes(c) as u32) << 16);
    }
}

pub(crate) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(4)) {
        d.copy_from_slice(&x.to_le_bytes());
    }
}

pub(crate) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&super::f32_to_f16(*x));
    }
}

/// Round to nearest even, as ggml does; NaN stays a (quiet) NaN.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 64) as u16;
    }
    ((bits + (0x7fff + ((bits >> 16) & 1))) >> 16) as u16
}

pub(crate) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

/// Lanes of the scalar float dot products: independent accumulators, so the compiler can keep
/// them in one vector register on any target, with a fixed (deterministic) summation order.
const LANES: usize = 8;

fn dot_lanes<const B: usize>(n: usize, w: &[u8], a: &[u8], conv: impl Fn([u8; B]) -> f32) -> f32 {
    let (w, a) = (&w[..n * B], &a[..n * B]);
    let mut acc = [0.0f32; LANES];
    let (wc, ac) = (w.chunks_exact(B * LANES), a.chunks_exact(B * LANES));
    let (wr, ar) = (wc.remainder(), ac.remainder());
    for (w, a) in wc.zip(ac) {
        for (l, acc) in acc.iter_mut().enumerate() {
            let x = conv(w[B * l..B * l + B].try_into().expect("B bytes"));
            let y = conv(a[B * l..B * l + B].try_into().expect("B bytes"));
            *acc += x * y;
        }
    }
    let mut tail = 0.0f32;
    for (w, a) in chunks::<B>(wr).zip(chunks::<B>(ar)) {
        tail += conv(w) * conv(a);
    }
    acc.iter().sum::<f32>() + tail
}

/// Scalar `Σ w·a` over `n` little-endian f32 values (ggml's `vec_dot_f32`), summed in f32 over
/// eight interleaved lanes.
pub fn vec_dot_f32_scalar(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_lanes::<4>(n, w, a, f32::from_le_bytes)
}

/// Scalar `Σ w·a` over `n` f16 values (ggml's `vec_dot_f16`): widened to f32, summed in f32 over
/// eight interleaved lanes.
pub fn vec_dot_f16_scalar(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_lanes::<2>(n, w, a, super::f16_to_f32_fast)
}

/// Scalar `Σ w·a` over `n` bf16 values (ggml's `vec_dot_bf16`): widened to f32 (exact), summed
/// in f32 over eight interleaved lanes.
pub fn vec_dot_bf16_scalar(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_lanes::<2>(n, w, a, |b| {
        f32::from_bits((u16::from_le_bytes(b) as u32) << 16)
    })
}
