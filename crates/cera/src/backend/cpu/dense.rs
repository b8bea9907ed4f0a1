//! Encoder products ([`Backend::matmul_encoder`]): a vision or audio tower multiplies hundreds
//! of rows by each float weight once, and has no decode step whose sums it must equal, so the
//! AVX-512 tier runs them in the broadcast form: a panel of 32 weight rows laid out column by
//! column (`[k][32]`; F16 weights packed so once, into the weight, and converted in registers;
//! f32 and bf16 ones widened per call), then for twelve input rows at a time keeps
//! 12 × 2 vector accumulators and, per column, loads two weight vectors and broadcasts twelve
//! inputs: 24 multiply-adds for 2 loads and 12 broadcasts, where the GEMM that decode shares
//! (`kernels`) reads 8 vectors per 16 (its 16-lane partial sums per output are what make one
//! token's sums equal many tokens'). The inputs are rounded as ggml pairs them (to f16 for F16
//! weights, bf16 for BF16), so the products are ggml's up to the order of the sums.
//!
//! [`Backend::matmul_encoder`]: crate::backend::Backend::matmul_encoder

use super::{Cpu, SyncPtr};
use crate::backend::Weight;
use crate::kernels::CpuTier;
use crate::quant::GgmlType;

/// Output rows per panel (two 16-lane vectors).
pub(super) const PANEL: usize = 32;
/// Input rows per block of accumulators (12 × 2 of the 32 vector registers).
#[cfg(target_arch = "x86_64")]
const BLOCK: usize = 12;

thread_local! {
    /// A thread's widened panel of weights (`[k][PANEL]`) and its rows before the transpose
    /// (`[PANEL][k]`).
    static PANEL_BUF: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

impl Cpu {
    /// Whether [`Cpu::dense_matmul`] runs `w` here.
    pub(crate) fn dense_supported(&self, w: &Weight) -> bool {
        cfg!(target_arch = "x86_64")
            && self.table.tier() == CpuTier::Avx512
            && matches!(w.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
            && w.cols > 0
    }

    /// `x` rounded into `out` as ggml pairs it with weights of type `ty` (f16 for F16, bf16
    /// for BF16); `scratch` holds the f16 values (both kept by the caller: an encoder's inputs
    /// are megabytes, and fresh pages each time cost as much as the rounding).
    pub(crate) fn dense_input(
        ty: GgmlType,
        x: &[f32],
        out: &mut Vec<f32>,
        scratch: &mut Vec<half::f16>,
    ) {
        out.resize(x.len(), 0.0);
        match ty {
            GgmlType::F16 => {
                use half::slice::HalfFloatSliceExt;
                // (through the slice conversions: F16C when the host has it), a chunk at a
                // time: the f16 copy of a whole encoder input would be megabytes more at the
                // encoder's peak
                const CHUNK: usize = 1 << 14;
                scratch.resize(CHUNK.min(x.len()), half::f16::ZERO);
                for (xs, os) in x.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
                    let h = &mut scratch[..xs.len()];
                    h.convert_from_f32_slice(xs);
                    h.convert_to_f32_slice(os);
                }
            }
            GgmlType::BF16 => {
                for (o, &v) in out.iter_mut().zip(x) {
                    *o = half::bf16::from_f32(v).to_f32();
                }
            }
            _ => out.copy_from_slice(x),
        }
    }

    /// `o = x · wᵀ` (`[n, w.rows]`) in the broadcast form (see the module docs), `xr` being the input
    /// `[n, k]` as [`Cpu::dense_input`] rounds it for `w`; `w` must be
    /// [`Cpu::dense_supported`].
    pub(crate) fn dense_matmul(&self, w: &Weight, xr: &[f32], n: usize, o: &mut [f32]) {
        let (k, rows) = (w.cols, w.rows);
        assert_eq!(xr.len(), n * k, "encoder product: input width");
        assert_eq!(o.len(), n * rows, "encoder product: output size");
        let optr = SyncPtr(o.as_mut_ptr());
        let data = w.data();
        let rb = w.row_bytes();
        let threads = self.width_for_step(rows * rb * n, n);
        if w.ty == GgmlType::F16 {
            let packed = self.f16_panels(w);
            self.pool
                .for_chunks(rows.div_ceil(PANEL), 1, threads, &|panels| {
                    for p in panels {
                        let r0 = p * PANEL;
                        let nr = (rows - r0).min(PANEL);
                        let panel = &packed[p * k * PANEL..(p + 1) * k * PANEL];
                        // SAFETY: columns r0..r0+nr of every output row are written only by
                        // this panel; the kernel writes exactly those.
                        unsafe {
                            panel_product(Panel::F16(panel), k, nr, xr, n, optr.at(r0), rows)
                        };
                    }
                });
            return;
        }
        self.pool
            .for_chunks(rows.div_ceil(PANEL), 1, threads, &|panels| {
                PANEL_BUF.with(|buf| {
                    let (buf, tmp) = &mut *buf.borrow_mut();
                    buf.resize(k * PANEL, 0.0);
                    tmp.resize(k * PANEL, 0.0);
                    for p in panels {
                        let r0 = p * PANEL;
                        let nr = (rows - r0).min(PANEL);
                        let b = &data[r0 * rb..(r0 + nr) * rb];
                        widen_panel(w.ty, b, k, nr, tmp, buf);
                        // SAFETY: columns r0..r0+nr of every output row are written only by this
                        // panel; the kernel writes exactly those.
                        unsafe { panel_product(Panel::F32(buf), k, nr, xr, n, optr.at(r0), rows) };
                    }
                });
            });
    }
}

impl Cpu {
    /// `w`'s f16 panels (`[panel][k][PANEL]`, the missing rows of a last panel zero), packed
    /// on first use by the pool's threads and kept in the weight: each product then reads
    /// them as they are, where widening to f32 per call cost as much as a tenth of an
    /// encoder's time (the model file's pages, no longer read, can leave memory).
    fn f16_panels<'w>(&self, w: &'w Weight) -> &'w [u16] {
        w.packed.panels.get_or_init(|| {
            let (k, rows) = (w.cols, w.rows);
            let (data, rb) = (w.data(), w.row_bytes());
            let np = rows.div_ceil(PANEL);
            let mut out = vec![0u16; np * k * PANEL];
            let optr = SyncPtr(out.as_mut_ptr());
            self.pool.for_chunks(np, 1, self.n_threads(), &|panels| {
                for p in panels {
                    // SAFETY: panel p's k · PANEL values are written by this chunk alone.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(optr.at(p * k * PANEL), k * PANEL)
                    };
                    let nr = PANEL.min(rows - p * PANEL);
                    for j in 0..nr {
                        let b = &data[(p * PANEL + j) * rb..(p * PANEL + j + 1) * rb];
                        for (kk, c) in b.chunks_exact(2).enumerate() {
                            dst[kk * PANEL + j] = u16::from_le_bytes([c[0], c[1]]);
                        }
                    }
                    // the file's pages of these rows are not read again here: out of memory
                    w.file.release_range(w.offset + p * PANEL * rb, nr * rb);
                }
            });
            out
        })
    }
}

/// A panel as the kernel reads it: widened f32, or packed f16 converted in registers.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) enum Panel<'a> {
    F32(&'a [f32]),
    F16(&'a [u16]),
}

/// Rows of `bytes` (`nr` rows of `k` values of type `ty`) as f32 in `[k][PANEL]` order, the
/// missing rows of a last panel zero: each row converted whole into `rows` (`[PANEL][k]`),
/// then transposed 16 columns at a time, so the stores of a block stay in 16 cache lines
/// (column by column over the whole panel they would stream it through L2 once per row).
fn widen_panel(ty: GgmlType, bytes: &[u8], k: usize, nr: usize, rows: &mut [f32], out: &mut [f32]) {
    let rb = bytes.len() / nr;
    for j in 0..PANEL {
        let row = &mut rows[j * k..(j + 1) * k];
        if j >= nr {
            row.fill(0.0);
            continue;
        }
        let b = &bytes[j * rb..(j + 1) * rb];
        match ty {
            GgmlType::F32 => {
                for (v, c) in row.iter_mut().zip(b.chunks_exact(4)) {
                    *v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            GgmlType::F16 => {
                use half::slice::HalfFloatSliceExt;
                // SAFETY: f16 has no invalid bit patterns; the alignment is checked.
                match unsafe { b.align_to::<half::f16>() } {
                    ([], h, []) => h.convert_to_f32_slice(row),
                    _ => {
                        for (v, c) in row.iter_mut().zip(b.chunks_exact(2)) {
                            *v = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
                        }
                    }
                }
            }
            _ => {
                for (v, c) in row.iter_mut().zip(b.chunks_exact(2)) {
                    *v = half::bf16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
        }
    }
    const KB: usize = 16;
    for k0 in (0..k).step_by(KB) {
        let kb = (k - k0).min(KB);
        let block = &mut out[k0 * PANEL..(k0 + kb) * PANEL];
        for j in 0..PANEL {
            let src = &rows[j * k + k0..j * k + k0 + kb];
            for (d, &v) in src.iter().enumerate() {
                block[d * PANEL + j] = v;
            }
        }
    }
}

/// `out[t · ldo + j] = Σ_kk panel[kk][j] · x[t][kk]` for the `nr` rows of a panel and every
/// input row `t` of `x` (`[n, k]`).
///
/// # Safety
/// `out` must be valid for writes at `t · ldo + j` for `t < n`, `j < nr`; the host has
/// AVX-512 (the caller checked the tier).
pub(super) unsafe fn panel_product(
    panel: Panel<'_>,
    k: usize,
    nr: usize,
    x: &[f32],
    n: usize,
    out: *mut f32,
    ldo: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut t0 = 0;
        while t0 < n {
            let nt = (n - t0).min(BLOCK);
            macro_rules! blocks {
                ($($t:literal)*) => {
                    match nt {
                        $($t => match panel {
                            Panel::F32(p) => x86::block::<$t, f32>(p, k, nr, &x[t0 * k..], out.add(t0 * ldo), ldo),
                            Panel::F16(p) => x86::block::<$t, u16>(p, k, nr, &x[t0 * k..], out.add(t0 * ldo), ldo),
                        },)*
                        _ => unreachable!(),
                    }
                };
            }
            // SAFETY: as the caller promises, for rows t0..t0+nt.
            unsafe { blocks!(1 2 3 4 5 6 7 8 9 10 11 12) };
            t0 += nt;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (panel, k, nr, x, n, out, ldo);
        unreachable!("the encoder products run on the AVX-512 tier only");
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::PANEL;

    /// A panel's element: how 16 of them become a vector of f32.
    pub(super) trait Lane: Copy {
        /// # Safety
        /// AVX-512F (and F16C for f16); `p` valid for 16 reads.
        unsafe fn load16(p: *const Self) -> __m512;
    }

    impl Lane for f32 {
        #[inline(always)]
        unsafe fn load16(p: *const f32) -> __m512 {
            // SAFETY: as the trait says.
            unsafe { _mm512_loadu_ps(p) }
        }
    }

    impl Lane for u16 {
        #[inline(always)]
        unsafe fn load16(p: *const u16) -> __m512 {
            // SAFETY: as the trait says (AVX-512F implies F16C's 512-bit conversion).
            unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
        }
    }

    /// `T` input rows (`x`: `[T, k]`) against one panel, stored to `out` (`T` rows of `ldo`,
    /// the panel's `nr` columns).
    ///
    /// # Safety
    /// AVX-512F; `x` holds `T · k` values; `out` as [`super::panel_product`] says.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn block<const T: usize, L: Lane>(
        panel: &[L],
        k: usize,
        nr: usize,
        x: &[f32],
        out: *mut f32,
        ldo: usize,
    ) {
        const NV: usize = PANEL / 16;
        assert!(panel.len() >= k * PANEL && x.len() >= T * k);
        let mut acc = [[_mm512_setzero_ps(); NV]; T];
        let (p, xp) = (panel.as_ptr(), x.as_ptr());
        for kk in 0..k {
            // SAFETY: kk < k, so these lie inside the asserted lengths.
            unsafe {
                let b: [__m512; NV] =
                    std::array::from_fn(|v| L::load16(p.add(kk * PANEL + 16 * v)));
                for (t, acc) in acc.iter_mut().enumerate() {
                    let a = _mm512_set1_ps(*xp.add(t * k + kk));
                    for (acc, b) in acc.iter_mut().zip(&b) {
                        *acc = _mm512_fmadd_ps(*b, a, *acc);
                    }
                }
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            for (v, acc) in acc.iter().enumerate() {
                let left = nr.saturating_sub(16 * v).min(16);
                if left == 0 {
                    break;
                }
                let m: __mmask16 = if left == 16 { !0 } else { (1u16 << left) - 1 };
                // SAFETY: the caller's bounds for row t, the mask stopping at nr.
                unsafe { _mm512_mask_storeu_ps(out.add(t * ldo + 16 * v), m, *acc) };
            }
        }
    }
}
