//! Weights of the 32-element block formats re-laid out for the GEMM kernels ("x8" layout): rows
//! in groups of eight, and per block of 32 columns one *super-block* holding the eight rows'
//! codes interleaved four bytes at a time, so that one 256-bit vector has every row's codes
//! `4j..4j+4` in its own 32-bit lane (ready for `vpdpbusd` against a broadcast activation
//! dword), then the rows' scales.
//!
//! Super-block layout (`8` rows × 32 columns), by format:
//! - Q4_0, Q4_1, IQ4_NL, Q5_0, Q5_1: four 32-byte vectors; in vector `v`, lane `i` holds row
//!   `i`'s `qs[4v..4v+4]`. The low nibbles are then codes `4v..4v+4` and the high nibbles codes
//!   `16+4v..`, i.e. code vectors `v` and `v+4` (the formats store element `l` in the low
//!   nibble of byte `l` and element `l+16` in its high nibble).
//! - Q5_0, Q5_1 then: eight u32 masks, mask `j` bit `4i+k` = row `i`'s fifth bit of element
//!   `4j+k`.
//! - Q8_0: eight 32-byte vectors, lane `i` of vector `j` = row `i`'s codes `4j..4j+4` + 128
//!   (as unsigned bytes).
//! - then the eight rows' `d` (f16), then for Q4_1/Q5_1 their `m` (f16).
//!
//! - Q2_K (per 256-column super-block): `qs` as 16 vectors (vector `8h + g` lane `i` = row
//!   `i`'s `qs[32h + 4g..+4]`), the sub-block scale/min bytes (128 bytes: sub-block `j`, row
//!   `i` at `8j + i`), `d` and `dmin` (8 f16 each).
//! - Q3_K: `qs` as Q2_K's, `hmask` as 8 vectors, the unbiased scales (i8, laid out as Q2_K's
//!   scale bytes), `d`.
//! - Q4_K (per 256-column super-block): 32 vectors, vector `8c + g` lane `i` = row `i`'s
//!   `qs[32c + 4g..+4]` (low nibbles: sub-block `2c`, high: `2c + 1`, elements `4g..4g+4`);
//!   then the decoded 6-bit scales (64 bytes: sub-block `j`, row `i` at `8j + i`), the mins
//!   (likewise), `d` and `dmin` (8 f16 each).
//! - Q5_K: Q4_K's layout, then `qh` as 8 vectors (vector `g` lane `i` = row `i`'s
//!   `qh[4g..4g+4]`).
//! - IQ4_XS: each 32-element sub-block `j` as an IQ4_NL block's four code vectors (at `128j`),
//!   then the sub-block scales minus 32 (i8; sub-block `j`, row `i` at `1024 + 8j + i`), `d`.
//! - Q6_K: `ql` as 32 vectors (`32h + 16s + 4g`... vector `(h, s, g)` at `8(2h + s) + g`, lane
//!   `i` = row `i`'s `ql[64h + 32s + 4g..+4]`), `qh` as 16 vectors (`(h, g)` at `8h + g`, lane
//!   `i` = `qh[32h + 4g..+4]`), the i8 scales (128 bytes: sub-block `j`, row `i` at `8j + i`),
//!   and `d` (8 f16).
//!
//! Rows past the end of the matrix (the last group) are zero. The layouts hold the bytes of the
//! original blocks (Q4_K: its scales decoded, 4 bytes more per row and super-block), so a packed
//! matrix is about as large as the original (plus padding rows).
//!
//! The layout's sizes and offsets ([`GROUP_ROWS`], [`superblock_bytes`], [`block_cols`],
//! [`scale_offsets`], [`packed_len`]) are defined beside the formats, in `quant::x8_layout`,
//! because the GEMM kernels in `quant/<format>/x86.rs` read them too; they are re-exported here.

use crate::quant::GgmlType;
pub use crate::quant::x8_layout::{
    GROUP_ROWS, block_cols, packed_len, scale_offsets, superblock_bytes,
};

/// Packs `rows` rows of `k` columns (`src`, the format's plain blocks) into `dst`
/// (`packed_len` bytes).
///
/// # Panics
/// If the format has no x8 layout or a size is wrong.
pub fn pack(ty: GgmlType, rows: usize, k: usize, src: &[u8], dst: &mut [u8]) {
    use GgmlType::*;
    let sb = superblock_bytes(ty).unwrap_or_else(|| panic!("{ty} has no x8 layout"));
    let bb = ty.block_bytes().expect("a block format");
    let nb = k / block_cols(ty);
    assert_eq!(src.len(), rows * nb * bb, "{ty}: {rows} rows of {k}");
    assert_eq!(Some(dst.len()), packed_len(ty, rows, k));
    // Every byte of a whole group's super-blocks is written below (the layouts have no gaps:
    // `every_byte_of_whole_groups_is_written`); only the last group's padding rows must be
    // zeroed. (Zeroing all of `dst` first wrote every packed byte twice: a cold start packs
    // the whole model.)
    let whole = rows / GROUP_ROWS;
    dst[whole * nb * sb..].fill(0);
    if matches!(ty, Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS) {
        pack_k(ty, rows, nb, src, dst);
        return;
    }
    let (d_off, m_off) = scale_offsets(ty);
    // field offsets in the plain blocks: d first; then m (Q4_1, Q5_1), qh (Q5_0, Q5_1)
    let (qs_off, qh_off, has_m) = match ty {
        Q4_0 | IQ4_NL | Q8_0 => (2, None, false),
        Q4_1 => (4, None, true),
        Q5_0 => (6, Some(2), false),
        Q5_1 => (8, Some(4), true),
        _ => unreachable!(),
    };
    // Q8_0's codes are stored + 128 (unsigned for `vpdpbusd`): a flip of each byte's top bit
    let (n_vec, flip) = if ty == Q8_0 {
        (8, 0x8080_8080u32)
    } else {
        (4, 0)
    };
    let dword = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    for (g, group) in dst.chunks_exact_mut(nb * sb).enumerate() {
        let n_in = GROUP_ROWS.min(rows - g * GROUP_ROWS);
        for (b, out) in group.chunks_exact_mut(sb).enumerate() {
            // the fifth-bit masks of the eight rows, gathered here and stored once
            let mut masks = [0u32; 8];
            for i in 0..n_in {
                let r = g * GROUP_ROWS + i;
                let blk = &src[(r * nb + b) * bb..][..bb];
                out[d_off + 2 * i..d_off + 2 * i + 2].copy_from_slice(&blk[0..2]);
                if has_m {
                    out[m_off + 2 * i..m_off + 2 * i + 2].copy_from_slice(&blk[2..4]);
                }
                for v in 0..n_vec {
                    let w = dword(blk, qs_off + 4 * v) ^ flip;
                    out[32 * v + 4 * i..32 * v + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
                }
                if let Some(qh_off) = qh_off {
                    // bits 4j..4j+4 of qh (elements 4j..4j+4) go to mask j's bits 4i..4i+4
                    let qh = dword(blk, qh_off);
                    for (j, m) in masks.iter_mut().enumerate() {
                        *m |= (qh >> (4 * j) & 0xF) << (4 * i);
                    }
                }
            }
            if qh_off.is_some() {
                for (j, m) in masks.iter().enumerate() {
                    out[128 + 4 * j..132 + 4 * j].copy_from_slice(&m.to_le_bytes());
                }
            }
        }
    }
}

/// The K-quant x8 layouts (see the module docs).
fn pack_k(ty: GgmlType, rows: usize, nb: usize, src: &[u8], dst: &mut [u8]) {
    let sb = superblock_bytes(ty).unwrap();
    let bb = ty.block_bytes().unwrap();
    // interleaves `n` dwords of a row's `bytes` (dword v at vector v, lane i)
    let put = |out: &mut [u8], i: usize, bytes: &[u8], n: usize| {
        for v in 0..n {
            out[32 * v + 4 * i..32 * v + 4 * i + 4].copy_from_slice(&bytes[4 * v..4 * v + 4]);
        }
    };
    for g in 0..rows.div_ceil(GROUP_ROWS) {
        for b in 0..nb {
            let out = &mut dst[(g * nb + b) * sb..][..sb];
            for i in 0..GROUP_ROWS.min(rows - g * GROUP_ROWS) {
                let r = g * GROUP_ROWS + i;
                let blk = &src[(r * nb + b) * bb..][..bb];
                if ty == GgmlType::Q2_K {
                    // scales[16], qs[64], d, dmin
                    put(out, i, &blk[16..80], 16);
                    for is in 0..16 {
                        out[512 + 8 * is + i] = blk[is];
                    }
                    out[640 + 2 * i..642 + 2 * i].copy_from_slice(&blk[80..82]);
                    out[656 + 2 * i..658 + 2 * i].copy_from_slice(&blk[82..84]);
                } else if ty == GgmlType::Q3_K {
                    // hmask[32], qs[64], scales[12], d
                    put(out, i, &blk[32..96], 16);
                    put(&mut out[512..], i, &blk[0..32], 8);
                    let sc = crate::quant::k_common::scales_q3k(blk[96..108].try_into().unwrap());
                    for is in 0..16 {
                        out[768 + 8 * is + i] = sc[is] as u8;
                    }
                    out[896 + 2 * i..898 + 2 * i].copy_from_slice(&blk[108..110]);
                } else if ty == GgmlType::IQ4_XS {
                    // d, scales_h (u16), scales_l[4], qs[128]: sub-block j's 16 bytes as an
                    // IQ4_NL block's codes at 128j, its scale (minus 32, i8) at 1024 + 8j + i
                    for j in 0..8 {
                        put(&mut out[128 * j..], i, &blk[8 + 16 * j..24 + 16 * j], 4);
                    }
                    let sh = u16::from_le_bytes([blk[2], blk[3]]);
                    for j in 0..8 {
                        let lo = (blk[4 + j / 2] >> (4 * (j % 2))) & 0x0F;
                        let hi = ((sh >> (2 * j)) & 3) as u8;
                        out[1024 + 8 * j + i] = ((lo | hi << 4) as i8 - 32) as u8;
                    }
                    out[1088 + 2 * i..1090 + 2 * i].copy_from_slice(&blk[0..2]);
                } else if matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) {
                    // d, dmin, scales[12], (Q5_K: qh[32]), qs[128]
                    let qs = if ty == GgmlType::Q5_K {
                        put(&mut out[1184..], i, &blk[16..48], 8);
                        48
                    } else {
                        16
                    };
                    put(out, i, &blk[qs..qs + 128], 32);
                    let scales: &[u8; 12] = blk[4..16].try_into().unwrap();
                    let (sc, mn) = crate::quant::k_common::scales_mins_k4(scales);
                    for j in 0..8 {
                        out[1024 + 8 * j + i] = sc[j];
                        out[1088 + 8 * j + i] = mn[j];
                    }
                    out[1152 + 2 * i..1154 + 2 * i].copy_from_slice(&blk[0..2]);
                    out[1168 + 2 * i..1170 + 2 * i].copy_from_slice(&blk[2..4]);
                } else {
                    // ql[128], qh[64], scales[16], d
                    put(out, i, &blk[0..128], 32);
                    put(&mut out[1024..], i, &blk[128..192], 16);
                    for j in 0..16 {
                        out[1536 + 8 * j + i] = blk[192 + j];
                    }
                    out[1664 + 2 * i..1666 + 2 * i].copy_from_slice(&blk[208..210]);
                }
            }
        }
    }
}

/// Row `r` of a packed `k`-column matrix back in the format's plain blocks (`dst`: one row's
/// bytes), the inverse of [`pack`].
///
/// # Panics
/// If the format has no x8 layout or a size is wrong.
pub fn unpack_row(ty: GgmlType, k: usize, packed: &[u8], r: usize, dst: &mut [u8]) {
    let bb = ty.block_bytes().expect("a block format");
    let nb = k / block_cols(ty);
    assert_eq!(dst.len(), nb * bb, "{ty}: one row of {k}");
    for (b, blk) in dst.chunks_exact_mut(bb).enumerate() {
        unpack_block(ty, k, packed, r, b, blk);
    }
}

/// Block `b` of row `r` of a packed `k`-column matrix back in the format's plain bytes (`blk`:
/// one block). Lets an embedding lookup on a tied output matrix read the packed copy instead of
/// faulting the file's pages back in (the kernel maps a fault's neighbours too, so scattered
/// lookups would soon bring the whole file tensor back into the resident set).
///
/// # Panics
/// If the format has no x8 layout or a size is wrong.
pub fn unpack_block(ty: GgmlType, k: usize, packed: &[u8], r: usize, b: usize, blk: &mut [u8]) {
    use GgmlType::*;
    let sb = superblock_bytes(ty).unwrap_or_else(|| panic!("{ty} has no x8 layout"));
    let bb = ty.block_bytes().expect("a block format");
    let nb = k / block_cols(ty);
    assert!(b < nb && blk.len() == bb, "{ty}: block {b} of a row of {k}");
    let (g, i) = (r / GROUP_ROWS, r % GROUP_ROWS);
    // the inverse of `put` in `pack_k`: dwords v of lane i
    let get = |src: &[u8], out: &mut [u8], n: usize| {
        for v in 0..n {
            out[4 * v..4 * v + 4].copy_from_slice(&src[32 * v + 4 * i..32 * v + 4 * i + 4]);
        }
    };
    let src = &packed[(g * nb + b) * sb..][..sb];
    match ty {
        Q2_K => {
            get(src, &mut blk[16..80], 16);
            for is in 0..16 {
                blk[is] = src[512 + 8 * is + i];
            }
            blk[80..82].copy_from_slice(&src[640 + 2 * i..642 + 2 * i]);
            blk[82..84].copy_from_slice(&src[656 + 2 * i..658 + 2 * i]);
        }
        Q3_K => {
            get(src, &mut blk[32..96], 16);
            get(&src[512..], &mut blk[0..32], 8);
            // re-encode the 6-bit scales (see `k_common::scales_q3k`)
            blk[96..108].fill(0);
            for is in 0..16 {
                let raw = (src[768 + 8 * is + i] as i8 as i16 + 32) as u8;
                blk[96 + is % 8] |= (raw & 0x0F) << (4 * (is / 8));
                blk[104 + is % 4] |= (raw >> 4) << (2 * (is / 4));
            }
            blk[108..110].copy_from_slice(&src[896 + 2 * i..898 + 2 * i]);
        }
        IQ4_XS => {
            for j in 0..8 {
                get(&src[128 * j..], &mut blk[8 + 16 * j..24 + 16 * j], 4);
            }
            let mut sh = 0u16;
            blk[4..8].fill(0);
            for j in 0..8 {
                let raw = (src[1024 + 8 * j + i] as i8 as i16 + 32) as u8;
                blk[4 + j / 2] |= (raw & 0x0F) << (4 * (j % 2));
                sh |= ((raw >> 4) as u16 & 3) << (2 * j);
            }
            blk[2..4].copy_from_slice(&sh.to_le_bytes());
            blk[0..2].copy_from_slice(&src[1088 + 2 * i..1090 + 2 * i]);
        }
        Q4_K | Q5_K => {
            let qs = if ty == Q5_K {
                get(&src[1184..], &mut blk[16..48], 8);
                48
            } else {
                16
            };
            get(src, &mut blk[qs..qs + 128], 32);
            let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
            for j in 0..8 {
                sc[j] = src[1024 + 8 * j + i];
                mn[j] = src[1088 + 8 * j + i];
            }
            // re-encode the 6-bit scales and mins (see `k_common::scales_mins_k4`)
            for j in 0..4 {
                blk[4 + j] = sc[j] | (sc[j + 4] >> 4) << 6;
                blk[8 + j] = mn[j] | (mn[j + 4] >> 4) << 6;
                blk[12 + j] = (sc[j + 4] & 0xf) | (mn[j + 4] & 0xf) << 4;
            }
            blk[0..2].copy_from_slice(&src[1152 + 2 * i..1154 + 2 * i]);
            blk[2..4].copy_from_slice(&src[1168 + 2 * i..1170 + 2 * i]);
        }
        Q6_K => {
            get(src, &mut blk[0..128], 32);
            get(&src[1024..], &mut blk[128..192], 16);
            for j in 0..16 {
                blk[192 + j] = src[1536 + 8 * j + i];
            }
            blk[208..210].copy_from_slice(&src[1664 + 2 * i..1666 + 2 * i]);
        }
        _ => {
            let (d_off, m_off) = scale_offsets(ty);
            let (qs_off, qh_off, has_m) = match ty {
                Q4_0 | IQ4_NL | Q8_0 => (2, None, false),
                Q4_1 => (4, None, true),
                Q5_0 => (6, Some(2), false),
                Q5_1 => (8, Some(4), true),
                _ => unreachable!(),
            };
            blk[0..2].copy_from_slice(&src[d_off + 2 * i..d_off + 2 * i + 2]);
            if has_m {
                blk[2..4].copy_from_slice(&src[m_off + 2 * i..m_off + 2 * i + 2]);
            }
            let n_vec = if ty == Q8_0 { 8 } else { 4 };
            for v in 0..n_vec {
                for kk in 0..4 {
                    let x = src[32 * v + 4 * i + kk];
                    blk[qs_off + 4 * v + kk] = if ty == Q8_0 { x ^ 0x80 } else { x };
                }
            }
            if let Some(qh_off) = qh_off {
                let mut qh = 0u32;
                for j in 0..8 {
                    let at = 128 + 4 * j;
                    let mask = u32::from_le_bytes(src[at..at + 4].try_into().unwrap());
                    for kk in 0..4 {
                        qh |= (mask >> (4 * i + kk) & 1) << (4 * j + kk);
                    }
                }
                blk[qh_off..qh_off + 4].copy_from_slice(&qh.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pack` zeroes only the last group's padding: every byte of a whole group must be
    /// written, whatever `dst` held before.
    #[test]
    fn every_byte_of_whole_groups_is_written() {
        use GgmlType::*;
        for ty in [
            Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS,
        ] {
            let k = 2 * block_cols(ty);
            let rb = ty.bytes_for(k as u64).unwrap() as usize;
            for rows in [8, 13] {
                let src: Vec<u8> = (0..rows * rb).map(|i| (i * 37 % 251) as u8).collect();
                let len = packed_len(ty, rows, k).unwrap();
                let (mut zero, mut dirty) = (vec![0u8; len], vec![0xA5u8; len]);
                pack(ty, rows, k, &src, &mut zero);
                pack(ty, rows, k, &src, &mut dirty);
                assert_eq!(zero, dirty, "{ty} rows {rows}");
            }
        }
    }

    #[test]
    fn unpack_row_inverts_pack() {
        use GgmlType::*;
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for ty in [
            Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS,
        ] {
            let k = 2 * block_cols(ty);
            let rb = ty.bytes_for(k as u64).unwrap() as usize;
            for rows in [1, 8, 13] {
                // random bytes are valid blocks for every one of these formats
                let src: Vec<u8> = (0..rows * rb)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        (seed >> 24) as u8
                    })
                    .collect();
                let mut p = vec![0u8; packed_len(ty, rows, k).unwrap()];
                pack(ty, rows, k, &src, &mut p);
                let mut row = vec![0u8; rb];
                for r in 0..rows {
                    unpack_row(ty, k, &p, r, &mut row);
                    assert_eq!(row, &src[r * rb..(r + 1) * rb], "{ty} rows {rows} row {r}");
                }
            }
        }
    }
}
