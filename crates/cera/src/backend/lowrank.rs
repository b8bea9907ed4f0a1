//! A LoRA pair as the backends apply it ([`LowRank`]): `A` a weight like any other, `B` kept
//! transposed and blocked by output columns ([`Transposed`]), so its product is `rank` scaled
//! row additions that vectorize over the output. The CPU's kernels are `cpu/lowrank.rs`, the
//! GPU's `gpu/lora.rs`.

use crate::backend::Weight;
use crate::error::Result;
use crate::quant::GgmlType;

/// B transposed and blocked by 16 output columns: for each block, its `rank × 16` values
/// (row `j` of the block is `B[c0..c0 + 16][j]`), the blocks end to end (the last padded
/// with zeros). A block of columns is then one sequential stream of the adapter, however
/// many rank rows it sums. Kept in the adapter's own precision: half the bytes per token for
/// a 16-bit adapter, and the same values either way.
#[derive(Clone, Debug)]
pub enum Transposed {
    F32(std::sync::Arc<[f32]>),
    F16(std::sync::Arc<[half::f16]>),
    BF16(std::sync::Arc<[half::bf16]>),
}

/// Output columns per block of [`Transposed`].
pub const BLOCK: usize = 16;

/// Where `B[c][j]` lives in [`Transposed`] for a pair of rank `rank`.
#[inline(always)]
pub fn at(rank: usize, j: usize, c: usize) -> usize {
    (c / BLOCK) * rank * BLOCK + j * BLOCK + c % BLOCK
}

impl Transposed {
    /// The address of the values: what identifies this B while its pair lives (a backend's
    /// resident copy is keyed by it).
    pub fn key(&self) -> usize {
        match self {
            Transposed::F32(v) => v.as_ptr() as usize,
            Transposed::F16(v) => v.as_ptr() as usize,
            Transposed::BF16(v) => v.as_ptr() as usize,
        }
    }

    /// Element `i` (an index from [`at`]) as f32.
    pub fn get(&self, i: usize) -> f32 {
        match self {
            Transposed::F32(v) => v[i],
            Transposed::F16(v) => v[i].to_f32(),
            Transposed::BF16(v) => v[i].to_f32(),
        }
    }

    /// `B[c][j]` of a pair of rank `rank`.
    pub fn b(&self, rank: usize, j: usize, c: usize) -> f32 {
        self.get(at(rank, j, c))
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Transposed::F32(v) => v.len(),
            Transposed::F16(v) => v.len(),
            Transposed::BF16(v) => v.len(),
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        match self {
            Transposed::F32(v) => v.len() * 4,
            Transposed::F16(v) => v.len() * 2,
            Transposed::BF16(v) => v.len() * 2,
        }
    }
}

/// A LoRA pair in the form the backends apply it ([`super::Backend::lora`]).
#[derive(Clone, Debug)]
pub struct LowRank {
    /// `rank` rows of the projection's input width
    pub a: Weight,
    /// B transposed
    pub bt: Transposed,
    pub rank: usize,
    pub out: usize,
}

impl LowRank {
    /// From A and rows `start..start + n` of B (the part of a fused projection an output
    /// belongs to; all of B for a plain one).
    pub fn new(a: Weight, b: &Weight, start: usize, n: usize) -> Result<LowRank> {
        let rank = a.rows;
        assert_eq!(b.cols, rank, "{}: B's width is the rank", b.name);
        let mut lr = LowRank::transposed_b(b, rank, start, n)?;
        lr.a = a;
        Ok(lr)
    }

    /// Rows `start..start + n` of B in [`Transposed`] form (A left as B, to be replaced).
    fn transposed_b(b: &Weight, rank: usize, start: usize, n: usize) -> Result<LowRank> {
        let mut bt = vec![0f32; rank * n.next_multiple_of(BLOCK)];
        let mut row = vec![0f32; rank];
        for o in 0..n {
            b.row_f32(start + o, &mut row)?;
            for (j, &v) in row.iter().enumerate() {
                bt[at(rank, j, o)] = v;
            }
        }
        // f16 and bf16 values are exact in f32 and back
        let bt = match b.ty {
            GgmlType::F16 => Transposed::F16(bt.iter().map(|&v| half::f16::from_f32(v)).collect()),
            GgmlType::BF16 => {
                Transposed::BF16(bt.iter().map(|&v| half::bf16::from_f32(v)).collect())
            }
            _ => Transposed::F32(bt.into()),
        };
        Ok(LowRank {
            a: b.clone(),
            bt,
            rank,
            out: n,
        })
    }
}

impl LowRank {
    /// A token embeddings' pair in llama.cpp's layout: `a` holds a row of `rank` values per
    /// token, `b` is `[out, rank]`; the delta of token `t` is `B · a[t]`.
    pub fn embedding(a: Weight, b: &Weight) -> Result<LowRank> {
        let rank = a.cols;
        assert_eq!(b.cols, rank, "{}: B's width is the rank", b.name);
        let mut lr = LowRank::transposed_b(b, rank, 0, b.rows)?;
        lr.a = a;
        Ok(lr)
    }
}
