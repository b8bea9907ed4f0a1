//! An image prepared for Idefics3 / SmolVLM as llama.cpp's mtmd prepares it
//! (`mtmd_image_preprocessor_idefics3`, after Hugging Face's `Idefics3ImageProcessor`): resized
//! with Lanczos, aspect kept, so its longer side is `preproc_image_size` (the shorter rounded
//! down, then up to even); resized again to the next multiples of the tower's `image_size`
//! (each side rounded up: the aspect may change); cut into `image_size` slices row by row;
//! and the whole refined image resized to one `image_size` square, the overview. Every part is
//! encoded on its own (`(image_size / patch / scale)²` tokens each). Between them mtmd's
//! markers, slices first:
//!   `<fake_token_around_image><row_1_col_1>` (slice) `<fake_token_around_image><row_1_col_2>`
//!   (slice) … `\n` (after each row but the last) …
//!   `\n\n` `<fake_token_around_image>` `<global-img>` (overview) `<fake_token_around_image>`

use super::Piece;
use super::mmproj::VisionHparams;
use crate::error::{Error, Result};
use crate::media::{Filter, Rgb8};

/// The pieces `img` becomes in an Idefics3 prompt.
pub fn prepare(img: &Rgb8, hp: &VisionHparams) -> Result<Vec<Piece>> {
    let (tile, edge) = (hp.image_size, hp.longest_edge);
    let (rw, rh) = resized_size(img.width, img.height, edge);
    if rw == 0 || rh == 0 {
        return Err(Error::Model(format!(
            "a {} x {} image is too thin for Idefics3's resize (its longer side to {edge} \
             leaves the shorter under a pixel)",
            img.width, img.height
        )));
    }
    let (gx, gy) = (rw.div_ceil(tile), rh.div_ceil(tile));
    let resized = img.resized(rw, rh, Filter::Lanczos);
    let refined = resized.resized(gx * tile, gy * tile, Filter::Lanczos);
    let overview = refined.resized(tile, tile, Filter::Lanczos);
    let mut out = Vec::with_capacity(2 * gx * gy + 6);
    for y in 0..gy {
        for x in 0..gx {
            out.push(Piece::Text(format!(
                "<fake_token_around_image><row_{}_col_{}>",
                y + 1,
                x + 1
            )));
            out.push(Piece::Image(refined.crop(x * tile, y * tile, tile, tile)));
        }
        if y + 1 < gy {
            out.push(Piece::Text("\n".into()));
        }
    }
    // (mtmd looks each of these up as one token: tokenized on their own here)
    for t in ["\n\n", "<fake_token_around_image>", "<global-img>"] {
        out.push(Piece::Text(t.into()));
    }
    out.push(Piece::Image(overview));
    out.push(Piece::Text("<fake_token_around_image>".into()));
    Ok(out)
}

/// The first resize: the longer side to `edge`, the shorter by the aspect ratio (f64,
/// truncated), then rounded up to even.
fn resized_size(w: usize, h: usize, edge: usize) -> (usize, usize) {
    let aspect = w as f64 / h as f64;
    if w >= h {
        let s = (edge as f64 / aspect) as usize;
        (edge, s + s % 2)
    } else {
        let s = (edge as f64 * aspect) as usize;
        (s + s % 2, edge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Act;

    fn hp(edge: usize) -> VisionHparams {
        VisionHparams {
            image_size: 512,
            patch_size: 16,
            n_embd: 8,
            n_ff: 8,
            n_head: 1,
            n_layer: 1,
            eps: 1e-6,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            scale: 4,
            act: Act::Gelu,
            longest_edge: edge,
        }
    }

    fn layout(p: &[Piece]) -> Vec<String> {
        p.iter()
            .map(|p| match p {
                Piece::Text(t) => t.replace('\n', "\\n"),
                Piece::Image(i) => format!("[{}x{}]", i.width, i.height),
            })
            .collect()
    }

    #[test]
    fn sizes_follow_the_longer_side() {
        // test-1.jpeg at SmolVLM's 2048: 2048 x 1561 (truncated), then even
        assert_eq!(resized_size(640, 488, 2048), (2048, 1562));
        assert_eq!(resized_size(488, 640, 2048), (1562, 2048));
        assert_eq!(resized_size(100, 100, 1024), (1024, 1024));
        assert_eq!(resized_size(4000, 1, 1024), (1024, 0));
    }

    #[test]
    fn slices_row_by_row_then_the_overview() {
        let img = Rgb8::filled(700, 300, [10, 20, 30]);
        let p = prepare(&img, &hp(1024)).unwrap();
        // 1024 x 438 -> a 2 x 1 grid of 512 slices
        assert_eq!(
            layout(&p),
            [
                "<fake_token_around_image><row_1_col_1>",
                "[512x512]",
                "<fake_token_around_image><row_1_col_2>",
                "[512x512]",
                "\\n\\n",
                "<fake_token_around_image>",
                "<global-img>",
                "[512x512]",
                "<fake_token_around_image>",
            ]
        );
        let tall = prepare(&Rgb8::filled(300, 700, [0; 3]), &hp(1024)).unwrap();
        let l = layout(&tall);
        assert_eq!(l[2], "\\n", "a row ends between the rows: {l:?}");
        assert_eq!(l[3], "<fake_token_around_image><row_2_col_1>");
        assert_eq!(tall.len(), 10);
        // a uniform image stays uniform through every Lanczos pass
        match &p[1] {
            Piece::Image(s) => assert!(s.data.chunks(3).all(|c| c == [10, 20, 30])),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_hair_thin_image_is_an_error() {
        let e = prepare(&Rgb8::filled(5000, 1, [0; 3]), &hp(1024)).unwrap_err();
        assert!(e.to_string().contains("too thin"), "{e}");
    }
}
