//! Media in a prompt, before any model sees it: images decoded (JPEG, PNG, WebP, GIF's first
//! frame, through the `image` crate, under limits that refuse a hostile header before any
//! allocation), resampled as the reference engines do ([`resize`]), cropped, padded and
//! normalized. What an encoder does with the pixels lives beside the models
//! (`models/vision/`).

#[cfg(feature = "media")]
pub mod audio;
pub mod mel;
pub mod resize;
pub mod whisper_mel;

#[cfg(feature = "media")]
use crate::error::{Error, Result};
pub use resize::Filter;

/// An 8-bit RGB image, row-major, three bytes a pixel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rgb8 {
    pub width: usize,
    pub height: usize,
    /// `[height, width, 3]`
    pub data: Vec<u8>,
}

/// A decoded image or audio clip, as an mmproj takes it.
#[derive(Clone, Debug, PartialEq)]
pub enum MediaInput {
    Image(Rgb8),
    /// Mono samples at 16 kHz (what audio encoders read).
    Audio(Vec<f32>),
}

/// Whether a file's first bytes say audio, as llama.cpp's mtmd tells audio from images: RIFF
/// WAVE, an ID3 tag or an MPEG frame sync, FLAC's `fLaC`; and Ogg's `OggS`.
pub fn is_audio(bytes: &[u8]) -> bool {
    let b = |r: std::ops::Range<usize>| bytes.get(r);
    (b(0..4) == Some(b"RIFF") && b(8..12) == Some(b"WAVE"))
        || b(0..3) == Some(b"ID3")
        || (bytes.len() >= 2 && bytes[0] == 0xFF && bytes[1] & 0xE0 == 0xE0)
        || b(0..4) == Some(b"fLaC")
        || b(0..4) == Some(b"OggS")
}

#[cfg(feature = "media")]
impl MediaInput {
    /// A media file's bytes decoded: audio ([`is_audio`]) to 16 kHz mono samples, anything
    /// else as an image.
    pub fn decode(bytes: &[u8]) -> Result<MediaInput> {
        if is_audio(bytes) {
            Ok(MediaInput::Audio(audio::decode_audio(bytes, 16_000)?))
        } else {
            Ok(MediaInput::Image(Rgb8::decode(bytes)?))
        }
    }
}

/// The largest image side decoded (a 30,000-pixel header is refused before it allocates).
pub const MAX_SIDE: u32 = 16_384;
/// The most bytes a decoder may allocate for one image.
pub const MAX_ALLOC: u64 = 512 << 20;

impl Rgb8 {
    /// A `width` × `height` image of one colour.
    pub fn filled(width: usize, height: usize, rgb: [u8; 3]) -> Rgb8 {
        Rgb8 {
            width,
            height,
            data: rgb.repeat(width * height),
        }
    }

    #[cfg(feature = "media")]
    /// Decodes an image file's bytes (the format from its signature: JPEG, PNG, WebP, GIF —
    /// the first frame), as RGB: alpha is dropped, grey widened, 16-bit narrowed.
    pub fn decode(bytes: &[u8]) -> Result<Rgb8> {
        let fmt = image::guess_format(bytes).map_err(|_| {
            bad("not an image this build reads (JPEG, PNG, WebP or GIF), by its first bytes".into())
        })?;
        if fmt == image::ImageFormat::Jpeg {
            return decode_jpeg(bytes);
        }
        let mut r = image::ImageReader::with_format(std::io::Cursor::new(bytes), fmt);
        let mut lim = image::Limits::default();
        lim.max_image_width = Some(MAX_SIDE);
        lim.max_image_height = Some(MAX_SIDE);
        lim.max_alloc = Some(MAX_ALLOC);
        r.limits(lim);
        let img = r.decode().map_err(|e| match e {
            image::ImageError::Limits(_) => over_limits(&format!("{fmt:?}")),
            e => bad(format!("{fmt:?}: {e}")),
        })?;
        let rgb = img.into_rgb8();
        let (w, h) = rgb.dimensions();
        Rgb8::checked(w as usize, h as usize, rgb.into_raw(), &format!("{fmt:?}"))
    }

    #[cfg(feature = "media")]
    fn checked(width: usize, height: usize, data: Vec<u8>, fmt: &str) -> Result<Rgb8> {
        if width == 0 || height == 0 || data.len() != width * height * 3 {
            return Err(bad(format!(
                "{fmt}: the image is {width} x {height} with {} bytes of pixels",
                data.len()
            )));
        }
        Ok(Rgb8 {
            width,
            height,
            data,
        })
    }

    /// The `w` × `h` rectangle at `(x, y)`, which must lie inside.
    pub fn crop(&self, x: usize, y: usize, w: usize, h: usize) -> Rgb8 {
        assert!(x + w <= self.width && y + h <= self.height && w > 0 && h > 0);
        let mut data = Vec::with_capacity(w * h * 3);
        for r in y..y + h {
            let at = (r * self.width + x) * 3;
            data.extend_from_slice(&self.data[at..at + w * 3]);
        }
        Rgb8 {
            width: w,
            height: h,
            data,
        }
    }

    /// Resampled to exactly `w` × `h` (the aspect ratio may change).
    pub fn resized(&self, w: usize, h: usize, f: Filter) -> Rgb8 {
        resize::resize(self, w, h, f)
    }

    /// Fitted inside `w` × `h` with its aspect ratio kept (each side scaled by the smaller
    /// ratio, rounded up and capped at the box), centred on a `pad` background (offsets
    /// rounded down): llama.cpp's `PAD_CEIL`.
    pub fn fitted(&self, w: usize, h: usize, f: Filter, pad: [u8; 3]) -> Rgb8 {
        if (w, h) == (self.width, self.height) {
            return self.clone();
        }
        // f32 as the reference computes the scale
        let s = (w as f32 / self.width as f32).min(h as f32 / self.height as f32);
        let nw = ((self.width as f32 * s).ceil() as usize).clamp(1, w);
        let nh = ((self.height as f32 * s).ceil() as usize).clamp(1, h);
        let inner = self.resized(nw, nh, f);
        let mut out = Rgb8::filled(w, h, pad);
        let (ox, oy) = ((w - nw) / 2, (h - nh) / 2);
        for r in 0..nh {
            let dst = ((oy + r) * w + ox) * 3;
            out.data[dst..dst + nw * 3].copy_from_slice(&inner.data[r * nw * 3..(r + 1) * nw * 3]);
        }
        out
    }

    /// The pixels as f32 `(v / 255 - mean[c]) / std[c]`, interleaved: `[height, width, 3]`.
    pub fn normalized(&self, mean: [f32; 3], std: [f32; 3]) -> Vec<f32> {
        self.data
            .chunks_exact(3)
            .flat_map(|p| (0..3).map(move |c| (f32::from(p[c]) / 255.0 - mean[c]) / std[c]))
            .collect()
    }
}

#[cfg(feature = "media")]
fn bad(reason: String) -> Error {
    Error::Media {
        what: "image".into(),
        reason,
    }
}

#[cfg(feature = "media")]
fn over_limits(fmt: &str) -> Error {
    bad(format!(
        "{fmt}: over the limits of {MAX_SIDE} pixels a side and {} MiB decoded",
        MAX_ALLOC >> 20
    ))
}

#[cfg(feature = "media")]
/// JPEG through `jpeg-decoder`, whose inverse DCT, chroma upsampling and colour conversion
/// follow stb_image's (what llama.cpp's mtmd decodes with): on `test-1.jpeg` no value is more
/// than 3 apart from stb_image's, where the `image` crate's decoder is up to 4 apart in twice
/// as many values; that is the difference between the embeddings' cosine of 0.99997 and
/// 0.99987 against mtmd's. The header is read and checked before anything is allocated.
fn decode_jpeg(bytes: &[u8]) -> Result<Rgb8> {
    use jpeg_decoder::{Decoder, PixelFormat};
    if !jpeg_complete(bytes) {
        return Err(bad(
            "Jpeg: the file ends inside its image data (no end-of-image marker after the last \
             scan): truncated"
                .into(),
        ));
    }
    let mut d = Decoder::new(bytes);
    d.set_max_decoding_buffer_size(MAX_ALLOC as usize);
    d.read_info().map_err(|e| bad(format!("Jpeg: {e}")))?;
    let info = d
        .info()
        .ok_or_else(|| bad("Jpeg: no frame header".into()))?;
    let (w, h) = (info.width as usize, info.height as usize);
    if w > MAX_SIDE as usize || h > MAX_SIDE as usize || (w * h * 4) as u64 > MAX_ALLOC {
        return Err(over_limits("Jpeg"));
    }
    let px = d.decode().map_err(|e| bad(format!("Jpeg: {e}")))?;
    let rgb = match info.pixel_format {
        PixelFormat::RGB24 => px,
        PixelFormat::L8 => px.iter().flat_map(|&v| [v, v, v]).collect(),
        // big-endian 16-bit grey: the high byte
        PixelFormat::L16 => px
            .chunks_exact(2)
            .flat_map(|v| [v[0], v[0], v[0]])
            .collect(),
        // the decoder has undone Adobe's inversion: ink amounts, scaled by black
        PixelFormat::CMYK32 => px
            .chunks_exact(4)
            .flat_map(|p| {
                let k = p[3] as u32;
                let f = |c: u8| ((255 - c as u32) * (255 - k) / 255) as u8;
                [f(p[0]), f(p[1]), f(p[2])]
            })
            .collect(),
    };
    Rgb8::checked(w, h, rgb, "Jpeg")
}

#[cfg(feature = "media")]
/// Whether a JPEG stream has an end-of-image marker after its last start-of-scan. The decoder
/// fills a cut file's missing rows with grey instead of failing; byte stuffing keeps `FF D9`
/// out of scan data, and an embedded thumbnail's markers all come before the main scans.
fn jpeg_complete(bytes: &[u8]) -> bool {
    let last_sos = bytes.windows(2).rposition(|w| w == [0xFF, 0xDA]);
    match last_sos {
        Some(i) => bytes[i..].windows(2).any(|w| w == [0xFF, 0xD9]),
        None => false,
    }
}

/// The size an image is resized to keeping its aspect ratio, each side a multiple of `align`
/// ("smart resize", as llama.cpp computes it, in f32): each side rounded to the nearest
/// multiple (at least `align`); over `max_pixels` (when positive), both sides scaled down by
/// the square root of the excess and rounded down; under `min_pixels`, scaled up and rounded
/// up.
pub fn smart_size(
    width: usize,
    height: usize,
    align: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> (usize, usize) {
    assert!(align > 0 && width > 0 && height > 0);
    let a = align as f32;
    let by = |x: f32, f: fn(f32) -> f32| (f(x / a) as i64).max(0) as usize * align;
    let (wf, hf) = (width as f32, height as f32);
    let mut w = by(wf, f32::round).max(align);
    let mut h = by(hf, f32::round).max(align);
    if max_pixels > 0 && w * h > max_pixels {
        let beta = (hf * wf / max_pixels as f32).sqrt();
        h = by(hf / beta, f32::floor).max(align);
        w = by(wf / beta, f32::floor).max(align);
    } else if min_pixels > 0 && w * h < min_pixels {
        let beta = (min_pixels as f32 / (hf * wf)).sqrt();
        h = by(hf * beta, f32::ceil);
        w = by(wf * beta, f32::ceil);
    }
    (w, h)
}
