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

pub(super) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(4)) {
        d.copy_from_slice(&x.to_le_bytes());
    }
}

pub(super) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
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

pub(super) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
    }
}
