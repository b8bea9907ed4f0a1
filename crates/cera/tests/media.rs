//! Media before a model sees it: resampling equals Pillow's bytes (the reference llama.cpp's
//! mtmd follows) for every filter, shrinking and growing, odd sizes; the smart-resize sizes;
//! decoding a real JPEG and PNG; hostile files refused by name without a panic or a large
//! allocation.
//!
//! Fixtures: `fixtures/media/resize.json` from `scripts/gen-resize-fixtures.py` (Pillow 13.0.0).

use cera::media::{Filter, Rgb8, smart_size};
use sha2::{Digest, Sha256};

/// The synthetic image `scripts/gen-resize-fixtures.py` makes: a red gradient, a green
/// checkerboard of 7 × 5 cells, xorshift noise in blue.
fn pattern(w: usize, h: usize) -> Rgb8 {
    let mut s: u32 = 0x9E37_79B9;
    let mut data = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            data.push((x * 255 / (w - 1).max(1)) as u8);
            data.push(if (x / 7 + y / 5) % 2 == 1 { 255 } else { 0 });
            data.push(s as u8);
        }
    }
    Rgb8 {
        width: w,
        height: h,
        data,
    }
}

#[test]
fn resampling_equals_pillow() {
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/media/resize.json")).unwrap();
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for c in cases {
        let dim = |k: &str, i: usize| c[k][i].as_u64().unwrap() as usize;
        let (sw, sh, tw, th) = (dim("src", 0), dim("src", 1), dim("dst", 0), dim("dst", 1));
        let f = match c["filter"].as_str().unwrap() {
            "bilinear" => Filter::Bilinear,
            "bicubic" => Filter::Bicubic,
            "lanczos" => Filter::Lanczos,
            other => panic!("filter {other}"),
        };
        let out = pattern(sw, sh).resized(tw, th, f);
        assert_eq!(
            (out.width, out.height, out.data.len()),
            (tw, th, tw * th * 3)
        );
        let want_row: Vec<u8> = c["first_row"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(
            out.data[..tw * 3],
            want_row[..],
            "{sw}x{sh} -> {tw}x{th} {f:?}: first row"
        );
        let hash = format!("{:x}", Sha256::digest(&out.data));
        assert_eq!(
            hash,
            c["sha256"].as_str().unwrap(),
            "{sw}x{sh} -> {tw}x{th} {f:?}"
        );
    }
}

#[test]
fn smart_sizes_keep_the_aspect_within_the_token_bounds() {
    // LFM2-VL: multiples of 32, 64..256 tokens of 32 x 32 pixels; the sizes from a
    // transcription of llama.cpp's `calc_size_preserved_ratio` in numpy float32
    let (lo, hi) = (64 * 32 * 32, 256 * 32 * 32);
    for (w, h, want) in [
        (640, 488, (576, 416)),
        (512, 512, (512, 512)),
        (100, 30, (480, 160)),
        (3000, 200, (1952, 128)),
        (1, 1, (256, 256)),
    ] {
        let got = smart_size(w, h, 32, lo, hi);
        assert_eq!(got, want, "{w}x{h}");
        assert!(got.0.is_multiple_of(32) && got.1.is_multiple_of(32));
    }
}

/// A PNG whose header claims `w` × `h` (valid chunk CRCs), with no image data.
fn png_header(w: u32, h: u32) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
    let mut ihdr = b"IHDR".to_vec();
    ihdr.extend(w.to_be_bytes());
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]); // 8-bit RGB
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend(13u32.to_be_bytes());
    out.extend(&ihdr);
    out.extend(crc32(&ihdr).to_be_bytes());
    out
}

#[test]
fn hostile_images_are_refused_by_name() {
    for (what, bytes, needle) in [
        ("empty", Vec::new(), "not an image"),
        ("text", b"hello, not an image".to_vec(), "not an image"),
        (
            "a 30000 x 30000 PNG header",
            png_header(30_000, 30_000),
            "Png",
        ),
        ("a PNG header with no data", png_header(64, 64), "Png"),
        (
            "a truncated JPEG",
            b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01".to_vec(),
            "Jpeg",
        ),
    ] {
        let e = Rgb8::decode(&bytes).expect_err(what);
        let m = e.to_string();
        assert!(m.starts_with("image") && m.contains(needle), "{what}: {m}");
    }
}

#[test]
fn real_files_decode() {
    let data = cera::fetch::llama_cpp_data(&mut |_| {}).expect("llama.cpp's test data");
    let jpeg = std::fs::read(data.join("tools/mtmd/test-1.jpeg")).unwrap();
    let img = Rgb8::decode(&jpeg).unwrap();
    assert_eq!((img.width, img.height), (640, 488));
    assert_eq!(img.data.len(), 640 * 488 * 3);
    let png = std::fs::read(data.join("tools/mtmd/tests/test-1-positive.png")).unwrap();
    let img = Rgb8::decode(&png).unwrap();
    assert!(img.width > 0 && img.height > 0);
    // a cut file fails naming the format, whatever the cut
    for cut in [2, 100, jpeg.len() / 2] {
        let e = Rgb8::decode(&jpeg[..cut]).expect_err("cut JPEG");
        assert!(e.to_string().starts_with("image"), "{e}");
    }
}
