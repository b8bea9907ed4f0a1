//! TEMPORARY reference kernel table (dequantize-and-dot), replaced by the SIMD table.

use crate::quant::{self, GgmlType};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuTier {
    Scalar,
}

pub struct KernelTable {
    tier: CpuTier,
}

static TABLE: KernelTable = KernelTable {
    tier: CpuTier::Scalar,
};

impl KernelTable {
    pub fn get() -> &'static KernelTable {
        &TABLE
    }
    pub fn tier(&self) -> CpuTier {
        self.tier
    }
    pub fn vec_dot_type(&self, w: GgmlType) -> Option<GgmlType> {
        use GgmlType::*;
        Some(match w {
            F32 => F32,
            F16 => F16,
            BF16 => BF16,
            Q4_0 | Q5_0 | Q8_0 | IQ4_NL => Q8_0,
            Q4_1 | Q5_1 => Q8_1,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS => Q8_K,
            _ => return None,
        })
    }
    pub fn quantize_row(&self, act_ty: GgmlType, x: &[f32], out: &mut [u8]) {
        quant::quantize(act_ty, x, out).expect("activation quantization");
    }
    pub fn vec_dot(&self, w_ty: GgmlType, n: usize, w_row: &[u8], act_row: &[u8]) -> f32 {
        let w = quant::dequantize_to_vec(w_ty, w_row, n).unwrap();
        let a = quant::dequantize_to_vec(self.vec_dot_type(w_ty).unwrap(), act_row, n).unwrap();
        w.iter().zip(&a).map(|(x, y)| x * y).sum()
    }
    pub fn gemv(&self, w_ty: GgmlType, k: usize, w: &[u8], act_row: &[u8], out: &mut [f32]) {
        let rb = w_ty.bytes_for(k as u64).unwrap() as usize;
        for (r, o) in out.iter_mut().enumerate() {
            *o = self.vec_dot(w_ty, k, &w[r * rb..(r + 1) * rb], act_row);
        }
    }
}
