//! An image prepared for LFM2-VL as llama.cpp's mtmd prepares it (`mtmd_image_preprocessor_
//! lfm2`): resized, aspect kept, to multiples of 32 pixels (a token is 2 × 2 patches of 16)
//! holding 64 to 256 tokens; an image whose rounded size is over twice the 256-token area is
//! also cut into 512 × 512 tiles (2 to 10 of them, the grid whose aspect is nearest the
//! image's), each encoded on its own, before the whole image as a thumbnail. Between them the
//! marker tokens, in mtmd's order:
//!   `<|image_start|>` (image) `<|image_end|>`
//!   `<|image_start|>` `<|img_row_1_col_1|>` (tile) … `<|img_thumbnail|>` (thumbnail) `<|image_end|>`

use super::mmproj::VisionHparams;
use crate::media::{Filter, Rgb8, smart_size};

/// Fewest and most tokens of the thumbnail (LFM2.5-VL's processor config).
pub const MIN_TOKENS: usize = 64;
pub const MAX_TOKENS: usize = 256;
/// A tile's side in pixels, and the fewest and most tiles.
pub const TILE: usize = 512;
pub const MIN_TILES: usize = 2;
pub const MAX_TILES: usize = 10;
/// Tiling starts past this many times the thumbnail's largest area.
const TILE_OVER: f64 = 2.0;

pub use super::Piece;

/// The pieces `img` becomes in an LFM2-VL prompt.
pub fn prepare(img: &Rgb8, hp: &VisionHparams) -> Vec<Piece> {
    let align = hp.patch_size * hp.scale;
    let area = align * align;
    let (ow, oh) = smart_size(
        img.width,
        img.height,
        align,
        MIN_TOKENS * area,
        MAX_TOKENS * area,
    );
    let thumb = img.resized(ow, oh, Filter::Bilinear);
    let mut out = vec![Piece::Text("<|image_start|>".into())];
    if !needs_tiles(
        img.width,
        img.height,
        hp.patch_size,
        align,
        MAX_TOKENS * area,
    ) {
        out.push(Piece::Image(thumb));
    } else {
        let (gw, gh) = grid(img.width, img.height);
        let refined = img.fitted(TILE * gw, TILE * gh, Filter::Bilinear, [0, 0, 0]);
        for r in 0..gh {
            for c in 0..gw {
                out.push(Piece::Text(format!("<|img_row_{}_col_{}|>", r + 1, c + 1)));
                out.push(Piece::Image(refined.crop(c * TILE, r * TILE, TILE, TILE)));
            }
        }
        out.push(Piece::Text("<|img_thumbnail|>".into()));
        out.push(Piece::Image(thumb));
    }
    out.push(Piece::Text("<|image_end|>".into()));
    out
}

/// Whether the image is cut into tiles: its sides rounded to multiples of `align` (ties to
/// even, in f64, at least one patch) cover more than twice the largest thumbnail.
fn needs_tiles(w: usize, h: usize, patch: usize, align: usize, max_pixels: usize) -> bool {
    let round =
        |x: usize| ((x as f64 / align as f64).round_ties_even() as usize * align).max(patch);
    (round(h) as f64) * (round(w) as f64) > max_pixels as f64 * TILE_OVER
}

/// The tile grid `(columns, rows)`: of the grids of `MIN_TILES..=MAX_TILES` tiles (by
/// increasing count), the one whose aspect ratio is nearest the image's; on a tie the later
/// one when the image covers more than half of its area.
fn grid(w: usize, h: usize) -> (usize, usize) {
    let mut ratios: Vec<(usize, usize)> = Vec::new();
    for n in MIN_TILES..=MAX_TILES {
        for gw in 1..=n {
            for gh in 1..=n {
                let t = gw * gh;
                if (MIN_TILES..=MAX_TILES).contains(&t) && !ratios.contains(&(gw, gh)) {
                    ratios.push((gw, gh));
                }
            }
        }
    }
    // (stable; the reference's sort may order grids of one count otherwise, which matters
    // only for an exact tie in aspect between two of them)
    ratios.sort_by_key(|&(a, b)| a * b);
    let aspect = w as f32 / h as f32;
    let area = (w * h) as f32;
    let mut best = (1, 1);
    let mut best_diff = f32::MAX;
    for &(gw, gh) in &ratios {
        let diff = (aspect - gw as f32 / gh as f32).abs();
        if diff < best_diff {
            best_diff = diff;
            best = (gw, gh);
        } else if diff == best_diff && area > 0.5 * (TILE * TILE * gw * gh) as f32 {
            best = (gw, gh);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp() -> VisionHparams {
        VisionHparams {
            image_size: 256,
            patch_size: 16,
            n_embd: 8,
            n_ff: 8,
            n_head: 1,
            n_layer: 0,
            eps: 1e-6,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            scale: 2,
            act: crate::backend::Act::Gelu,
            longest_edge: 0,
        }
    }

    fn sizes(p: &[Piece]) -> Vec<String> {
        p.iter()
            .map(|x| match x {
                Piece::Text(t) => t.clone(),
                Piece::Image(i) => format!("{}x{}", i.width, i.height),
            })
            .collect()
    }

    #[test]
    fn small_images_are_one_piece_large_ones_tiles_and_a_thumbnail() {
        let one = prepare(&Rgb8::filled(640, 488, [9, 9, 9]), &hp());
        assert_eq!(sizes(&one), ["<|image_start|>", "576x416", "<|image_end|>"]);
        // 1600 x 1000 rounds to 1600 x 992, over twice 256 tokens' area: tiles
        let big = prepare(&Rgb8::filled(1600, 1000, [9, 9, 9]), &hp());
        let s = sizes(&big);
        assert_eq!(s[0], "<|image_start|>");
        assert_eq!(s[1], "<|img_row_1_col_1|>");
        assert_eq!(s[2], "512x512");
        assert_eq!(s[s.len() - 3], "<|img_thumbnail|>");
        assert_eq!(s[s.len() - 1], "<|image_end|>");
        let tiles = s.iter().filter(|t| t.as_str() == "512x512").count();
        let (gw, gh) = grid(1600, 1000);
        assert_eq!(tiles, gw * gh);
        assert!((MIN_TILES..=MAX_TILES).contains(&tiles));
        assert_eq!(s[s.len() - 4 - 1], format!("<|img_row_{gh}_col_{gw}|>"));
    }

    #[test]
    fn the_grid_follows_the_aspect() {
        // 2:1 ties between 2 x 1 and 4 x 2: the larger grid once the image covers more than
        // half of it
        assert_eq!(grid(2000, 1000), (4, 2));
        assert_eq!(grid(900, 450), (2, 1));
        assert_eq!(grid(1000, 3000), (1, 3));
        assert_eq!(grid(3000, 1000), (3, 1));
    }
}
