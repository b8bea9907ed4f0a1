//! Image resampling as Pillow does it, which llama.cpp's mtmd follows (and the Hugging Face
//! image processors, through Pillow): a separable filter, horizontal pass then vertical, each
//! output pixel a normalized window of input pixels widened by the scale when shrinking, the
//! weights in fixed point (22 fractional bits) so every platform computes the same bytes.
//! A vision encoder's input must match the reference's to the byte for its embeddings to.

use super::Rgb8;

/// The resampling filter (Pillow's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// Triangle, support 1.
    Bilinear,
    /// Keys' cubic with a = -0.5 (Pillow's; PyTorch's is -0.75), support 2.
    Bicubic,
    /// Windowed sinc, support 3.
    Lanczos,
}

/// Fractional bits of the fixed-point weights: a u8 pixel times a weight, summed over the
/// window, stays inside an i32 with two bits to spare.
const PRECISION_BITS: u32 = 32 - 8 - 2;

impl Filter {
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos => 3.0,
        }
    }

    /// The filter's weight at distance `x` (in input pixels, scaled).
    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 { 1.0 - x } else { 0.0 }
            }
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Filter::Lanczos => {
                let sinc = |v: f64| {
                    if v == 0.0 {
                        1.0
                    } else {
                        let p = v * std::f64::consts::PI;
                        p.sin() / p
                    }
                };
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

/// One axis's windows: output pixel `o` reads `count[o]` inputs from `first[o]`, with the
/// fixed-point weights `weights[o * ksize..]`.
struct Axis {
    first: Vec<usize>,
    count: Vec<usize>,
    ksize: usize,
    weights: Vec<i32>,
}

impl Axis {
    fn new(n_in: usize, n_out: usize, f: Filter) -> Axis {
        let scale = n_in as f64 / n_out as f64;
        // shrinking widens the filter (no aliasing); growing keeps it at one input pixel
        let fscale = scale.max(1.0);
        let support = f.support() * fscale;
        let ksize = support.ceil() as usize * 2 + 1;
        let mut first = Vec::with_capacity(n_out);
        let mut count = Vec::with_capacity(n_out);
        let mut weights = vec![0i32; n_out * ksize];
        let mut w = vec![0f64; ksize];
        let unit = f64::from(1u32 << PRECISION_BITS);
        // the filter's argument is multiplied by the reciprocal, as the reference does (a
        // division can differ in the last bit)
        let ss = 1.0 / fscale;
        for o in 0..n_out {
            let center = (o as f64 + 0.5) * scale;
            // truncation toward zero, as the reference's int conversion (the values are ≥ -0.5)
            let lo = ((center - support + 0.5) as i64).max(0) as usize;
            let hi = ((center + support + 0.5) as i64).min(n_in as i64) as usize;
            let n = hi.saturating_sub(lo);
            let mut sum = 0.0;
            for (i, wi) in w.iter_mut().enumerate().take(n) {
                *wi = f.weight((i as f64 + lo as f64 - center + 0.5) * ss);
                sum += *wi;
            }
            for (i, wi) in w.iter().enumerate().take(n) {
                let v = if sum != 0.0 { wi / sum } else { *wi };
                // round half away from zero, then truncate: Pillow's conversion
                let r = v * unit + if v < 0.0 { -0.5 } else { 0.5 };
                weights[o * ksize + i] = r as i32;
            }
            first.push(lo);
            count.push(n);
        }
        Axis {
            first,
            count,
            ksize,
            weights,
        }
    }
}

/// A fixed-point sum back to a byte: the rounding bias was added up front, the shift floors.
#[inline]
fn to_u8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

const HALF: i32 = 1 << (PRECISION_BITS - 1);

/// `src` resampled to `width` × `height` (both at least 1) with `f`.
pub fn resize(src: &Rgb8, width: usize, height: usize, f: Filter) -> Rgb8 {
    assert!(width > 0 && height > 0 && src.width > 0 && src.height > 0);
    if (width, height) == (src.width, src.height) {
        return src.clone();
    }
    let mut cur = src.clone();
    if width != src.width {
        let ax = Axis::new(src.width, width, f);
        // [height, width, 3]
        let mut out = vec![0u8; cur.height * width * 3];
        for y in 0..cur.height {
            let row = &cur.data[y * cur.width * 3..(y + 1) * cur.width * 3];
            let dst = &mut out[y * width * 3..(y + 1) * width * 3];
            for x in 0..width {
                let k = &ax.weights[x * ax.ksize..x * ax.ksize + ax.count[x]];
                let mut acc = [HALF; 3];
                for (i, &wk) in k.iter().enumerate() {
                    let p = &row[(ax.first[x] + i) * 3..(ax.first[x] + i) * 3 + 3];
                    for c in 0..3 {
                        acc[c] += i32::from(p[c]) * wk;
                    }
                }
                for c in 0..3 {
                    dst[x * 3 + c] = to_u8(acc[c]);
                }
            }
        }
        cur = Rgb8 {
            width,
            height: cur.height,
            data: out,
        };
    }
    if height != src.height {
        let ax = Axis::new(src.height, height, f);
        let row_len = cur.width * 3;
        // [height, width, 3]
        let mut out = vec![0u8; height * row_len];
        let mut acc = vec![0i32; row_len];
        for y in 0..height {
            acc.fill(HALF);
            let k = &ax.weights[y * ax.ksize..y * ax.ksize + ax.count[y]];
            for (i, &wk) in k.iter().enumerate() {
                let r = ax.first[y] + i;
                for (a, &p) in acc
                    .iter_mut()
                    .zip(&cur.data[r * row_len..(r + 1) * row_len])
                {
                    *a += i32::from(p) * wk;
                }
            }
            for (d, &a) in out[y * row_len..(y + 1) * row_len].iter_mut().zip(&acc) {
                *d = to_u8(a);
            }
        }
        cur = Rgb8 {
            width: cur.width,
            height,
            data: out,
        };
    }
    cur
}
