//! TurboQuant (Zandieh et al., arXiv 2504.19874), the MSE variant, for KV cache rows: each
//! rotation block of `b` values is multiplied by a fixed random orthogonal matrix (a
//! Walsh–Hadamard transform after random sign flips), a scale is kept (f16), and every
//! rotated coordinate is snapped to the Lloyd–Max codebook of the distribution a coordinate
//! of a uniformly random unit vector in `b` dimensions has, `∝ (1 − x²)^((b−3)/2)`. No
//! calibration: the rotation makes every input look like that distribution. One departure:
//! the scale stored per block is the least-squares fit `⟨y, c⟩ / ⟨c, c⟩` of the chosen
//! centroids `c`, not the norm (lower error, measured).
//!
//! Attention never rotates a key back: scores are taken in the rotated space (the query is
//! rotated once per row), and values are summed there and the output rotated back once.
//!
//! Row layout, per rotation block: the scale (f16), then per group of 16 coordinates `bits`
//! little-endian u16 bit planes (bit `j` of plane `p` is bit `p` of coordinate `j`'s code), so
//! a vector unit expands 16 codes from a few words.

use std::sync::OnceLock;

use crate::quant::{f16_to_f32, f32_to_f16};

/// Coordinates per bit-plane group.
pub(crate) const GROUP: usize = 16;

/// A Lloyd–Max codebook in units of `1/√b` (so about unit variance whatever `b`): sorted
/// centroids and the decision boundaries between neighbours.
#[derive(Debug)]
pub struct Codebook {
    pub centroids: Vec<f32>,
    pub bounds: Vec<f32>,
}

impl Codebook {
    /// The centroid index nearest `u` (ties to the lower one).
    #[inline]
    pub fn index(&self, u: f32) -> usize {
        self.bounds.partition_point(|&b| b < u)
    }
}

/// The Lloyd–Max quantizer with `2^bits` levels for one coordinate of a random unit vector in
/// `b` dimensions, scaled by `√b`: Lloyd's iteration (boundaries at midpoints, centroids at
/// the conditional means) on the exact density, integrated on a fine grid in f64.
pub fn lloyd_max(bits: u32, b: usize) -> Codebook {
    let levels = 1usize << bits;
    let sb = (b as f64).sqrt();
    // density of u = x·√b: (1 − u²/b)^((b−3)/2) on |u| < √b; the mass past |u| = 8 is below
    // 1e-14 for every b ≥ 16, so the grid stops there
    let lim = sb.min(8.0);
    const N: usize = 64001;
    let du = 2.0 * lim / (N - 1) as f64;
    let e = (b as f64 - 3.0) / 2.0;
    let grid: Vec<(f64, f64)> = (0..N)
        .map(|i| {
            let u = -lim + i as f64 * du;
            let w = (1.0 - u * u / b as f64).max(0.0).powf(e);
            (u, w)
        })
        .collect();
    // prefix sums of the weights and first moments: a cell's mass and mean in O(1)
    let (mut cw, mut cm) = (vec![0.0f64; N + 1], vec![0.0f64; N + 1]);
    for (i, &(u, w)) in grid.iter().enumerate() {
        cw[i + 1] = cw[i] + w;
        cm[i + 1] = cm[i] + u * w;
    }
    // the prefix sums at a boundary, interpolated inside its grid step: a boundary that moves
    // less than a step still moves the cells' sums (without it the iteration stalls early)
    let at = |x: f64| -> (f64, f64) {
        // grid point i stands for [u_i - du/2, u_i + du/2)
        let pos = ((x + lim) / du + 0.5).clamp(0.0, (N - 1) as f64);
        let i = pos.floor() as usize;
        let f = pos - i as f64;
        let (u, w) = grid[i];
        (cw[i] + f * w, cm[i] + f * u * w)
    };
    // start from evenly spaced levels over ±2.5 standard deviations
    let mut c: Vec<f64> = (0..levels)
        .map(|i| -2.5 + 5.0 * (i as f64 + 0.5) / levels as f64)
        .collect();
    // Lloyd's iteration converges slowly for the outer levels: up to 10^5 cheap rounds
    for _ in 0..100_000 {
        let mut moved = 0.0f64;
        let mut lo = (0.0, 0.0);
        let mut next = c.clone();
        for i in 0..levels {
            let hi = if i + 1 < levels {
                at(0.5 * (c[i] + c[i + 1]))
            } else {
                (cw[N], cm[N])
            };
            let (w, m) = (hi.0 - lo.0, hi.1 - lo.1);
            if w > 0.0 {
                next[i] = m / w;
                moved = moved.max((next[i] - c[i]).abs());
            }
            lo = hi;
        }
        c = next;
        if moved < 1e-13 {
            break;
        }
    }
    let centroids: Vec<f32> = c.iter().map(|&x| x as f32).collect();
    let bounds = centroids.windows(2).map(|w| 0.5 * (w[0] + w[1])).collect();
    Codebook { centroids, bounds }
}

/// Values computed once per key and kept for the process (a handful of block sizes).
type Memo<K, V> = OnceLock<std::sync::Mutex<Vec<(K, &'static V)>>>;

/// The codebook for `bits` per coordinate and rotation blocks of `b` (computed once).
pub fn codebook(bits: u32, b: usize) -> &'static Codebook {
    static BOOKS: Memo<(u32, usize), Codebook> = OnceLock::new();
    let books = BOOKS.get_or_init(Default::default);
    let mut books = books.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, cb)) = books.iter().find(|e| e.0 == (bits, b)) {
        return cb;
    }
    let cb: &'static Codebook = Box::leak(Box::new(lloyd_max(bits, b)));
    books.push(((bits, b), cb));
    cb
}

/// The fixed random signs of rotation blocks of `b` (±1.0): the top bit of successive
/// SplitMix64 outputs seeded with `0x7475_7262_6f00 + b` ("turbo").
pub fn signs(b: usize) -> &'static [f32] {
    static SIGNS: Memo<usize, [f32]> = OnceLock::new();
    let all = SIGNS.get_or_init(Default::default);
    let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, s)) = all.iter().find(|e| e.0 == b) {
        return s;
    }
    let mut state = 0x7475_7262_6f00u64 + b as u64;
    let s: Vec<f32> = (0..b)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            if z >> 63 == 1 { -1.0 } else { 1.0 }
        })
        .collect();
    let s: &'static [f32] = Box::leak(s.into_boxed_slice());
    all.push((b, s));
    s
}

/// In-place orthonormal Walsh–Hadamard transform of `x` (length a power of two): `x ← H x`
/// with Sylvester's ordering, `H = Hᵀ = H⁻¹`.
pub fn fwht(x: &mut [f32]) {
    let n = x.len();
    debug_assert!(n.is_power_of_two());
    let mut h = 1;
    while h < n {
        for i in (0..n).step_by(2 * h) {
            let (a, b) = x[i..i + 2 * h].split_at_mut(h);
            for (p, q) in a.iter_mut().zip(b.iter_mut()) {
                let (u, v) = (*p, *q);
                *p = u + v;
                *q = u - v;
            }
        }
        h *= 2;
    }
    let s = 1.0 / (n as f32).sqrt();
    for v in x.iter_mut() {
        *v *= s;
    }
}

/// Bytes of one rotation block of `b` coordinates at `bits` each.
pub const fn block_bytes(bits: u32, b: usize) -> usize {
    2 + b / GROUP * 2 * bits as usize
}

/// Encodes one rotation block `x` (already rotated: `H(s ⊙ x)`) into `out`
/// ([`block_bytes`] long).
pub fn encode_block(bits: u32, x: &[f32], out: &mut [u8]) {
    let b = x.len();
    let cb = codebook(bits, b);
    let norm = x.iter().map(|v| v * v).sum::<f32>().sqrt();
    let inv = if norm > 0.0 {
        (b as f32).sqrt() / norm
    } else {
        0.0
    };
    let planes = &mut out[2..];
    let (mut xc, mut cc) = (0f32, 0f32);
    for (g, xs) in x.chunks_exact(GROUP).enumerate() {
        let mut p = [0u16; 4];
        for (j, &v) in xs.iter().enumerate() {
            let code = cb.index(v * inv);
            let c = cb.centroids[code];
            xc += v * c;
            cc += c * c;
            for (k, pk) in p.iter_mut().enumerate().take(bits as usize) {
                *pk |= (((code >> k) & 1) as u16) << j;
            }
        }
        let at = g * 2 * bits as usize;
        for k in 0..bits as usize {
            planes[at + 2 * k..at + 2 * k + 2].copy_from_slice(&p[k].to_le_bytes());
        }
    }
    // the least-squares scale of the chosen codes rather than the paper's norm: a lower
    // reconstruction error, and lower KL divergence measured on SmolLM2 (benchmarks/README.md)
    let scale = if cc > 0.0 { xc / cc } else { 0.0 };
    out[..2].copy_from_slice(&f32_to_f16(scale));
}

/// Decodes one block into rotated-space values `scale · c[code]` (`out.len()` = `b`).
pub fn decode_block(bits: u32, src: &[u8], out: &mut [f32]) {
    let b = out.len();
    let cb = codebook(bits, b);
    let scale = f16_to_f32([src[0], src[1]]);
    let mut lut = [0f32; 16];
    for (l, c) in lut.iter_mut().zip(&cb.centroids) {
        *l = c * scale;
    }
    let gb = 2 * bits as usize;
    for (o, s) in out.chunks_exact_mut(GROUP).zip(src[2..].chunks_exact(gb)) {
        decode_group_scalar(bits, s, &lut, o);
    }
}

/// One group of 16 codes (`bits` u16 planes in `planes`) to `lut[code]` in `out`.
pub fn decode_group_scalar(bits: u32, planes: &[u8], lut: &[f32; 16], out: &mut [f32]) {
    let nb = bits as usize;
    let mut p = [0u16; 4];
    for (k, pk) in p.iter_mut().enumerate().take(nb) {
        *pk = u16::from_le_bytes([planes[2 * k], planes[2 * k + 1]]);
    }
    for (j, oj) in out.iter_mut().enumerate().take(GROUP) {
        let mut code = 0usize;
        for (k, pk) in p.iter().enumerate().take(nb) {
            code |= (((pk >> j) & 1) as usize) << k;
        }
        *oj = lut[code];
    }
}

/// [`decode_group_scalar`] with AVX-512: each plane is a lane mask, the codes are OR-ed from
/// masked constants and the 16-entry table is one permute.
///
/// # Safety
/// The host must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn decode_group_avx512(bits: u32, planes: &[u8], lut: &[f32; 16], out: &mut [f32]) {
    use std::arch::x86_64::*;
    assert!(planes.len() >= 2 * bits as usize && out.len() >= GROUP);
    // SAFETY: the lengths are checked above; unaligned loads and stores
    unsafe {
        let table = _mm512_loadu_ps(lut.as_ptr());
        let mut idx = _mm512_setzero_si512();
        for k in 0..bits as usize {
            let m = u16::from_le_bytes([planes[2 * k], planes[2 * k + 1]]);
            idx = _mm512_or_si512(idx, _mm512_maskz_set1_epi32(m, 1 << k));
        }
        _mm512_storeu_ps(out.as_mut_ptr(), _mm512_permutexvar_ps(idx, table));
    }
}

/// [`decode_group_scalar`] with AVX2: per 8 lanes, each plane's bits shifted into place, and the
/// 16-entry table as two 8-entry permutes blended on the code's top bit.
///
/// # Safety
/// The host must have AVX2.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub unsafe fn decode_group_avx2(bits: u32, planes: &[u8], lut: &[f32; 16], out: &mut [f32]) {
    use std::arch::x86_64::*;
    assert!(planes.len() >= 2 * bits as usize && out.len() >= GROUP);
    // SAFETY: the lengths are checked above; unaligned loads and stores
    unsafe {
        let lo = _mm256_loadu_ps(lut.as_ptr());
        let hi = _mm256_loadu_ps(lut.as_ptr().add(8));
        let one = _mm256_set1_epi32(1);
        for half in 0..2 {
            let shifts = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let mut idx = _mm256_setzero_si256();
            for k in 0..bits as usize {
                let m = u16::from_le_bytes([planes[2 * k], planes[2 * k + 1]]) as i32 >> (8 * half);
                let b = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(m), shifts), one);
                idx = _mm256_or_si256(idx, _mm256_sllv_epi32(b, _mm256_set1_epi32(k as i32)));
            }
            let a = _mm256_permutevar8x32_ps(lo, idx);
            let b = _mm256_permutevar8x32_ps(hi, idx);
            let top = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(idx));
            let v = _mm256_blendv_ps(a, b, top);
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * half), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Max's (1960) optimal quantizers for a unit Gaussian, which the coordinate distribution
    /// approaches as `b` grows: the positive levels of 3 and 4 bits.
    #[test]
    fn large_blocks_approach_the_gaussian_lloyd_max_levels() {
        let max3 = [0.2451, 0.7560, 1.3440, 2.1520];
        let max4 = [
            0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6180, 2.0690, 2.7326,
        ];
        // (Max's tables have four decimals)
        for (bits, want) in [(3, &max3[..]), (4, &max4[..])] {
            let cb = lloyd_max(bits, 1 << 16);
            let half = &cb.centroids[cb.centroids.len() / 2..];
            for (c, w) in half.iter().zip(want) {
                assert!((c - w).abs() < 3e-4, "{bits} bits: {half:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn fwht_is_orthonormal_and_its_own_inverse() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.3)
            .collect();
        let mut y = x.clone();
        fwht(&mut y);
        let n0: f32 = x.iter().map(|v| v * v).sum();
        let n1: f32 = y.iter().map(|v| v * v).sum();
        assert!((n0 - n1).abs() < 1e-4 * n0);
        fwht(&mut y);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 1e-5);
        }
    }

    #[test]
    fn block_round_trip_error_is_what_the_codebook_predicts() {
        // relative MSE of the MSE-optimal quantizer: about 0.034 at 3 bits, 0.0095 at 4
        for (bits, bound) in [(3u32, 0.045f32), (4, 0.013)] {
            let b = 64;
            let mut seed = 1u32;
            let (mut err, mut tot) = (0f32, 0f32);
            for _ in 0..200 {
                let x: Vec<f32> = (0..b)
                    .map(|_| {
                        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
                    })
                    .collect();
                let mut buf = vec![0u8; block_bytes(bits, b)];
                encode_block(bits, &x, &mut buf);
                let mut y = vec![0f32; b];
                decode_block(bits, &buf, &mut y);
                err += x
                    .iter()
                    .zip(&y)
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum::<f32>();
                tot += x.iter().map(|a| a * a).sum::<f32>();
            }
            assert!(
                err / tot < bound,
                "{bits} bits: relative error {}",
                err / tot
            );
        }
    }
}
