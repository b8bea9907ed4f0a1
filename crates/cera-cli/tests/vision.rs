//! `cera run --mmproj FILE --image F` / `--audio F`: images and audio through random-weight
//! mmproj files of SmolLM2's width (the generators of the core's tests), placed at
//! `<__media__>` or before the prompt; what is wrong with the flags or the files is named
//! before the model loads. `cera chat`'s `/image` and `/audio`.

use std::process::Command;

#[path = "../../cera/tests/common/audio_mmproj.rs"]
mod audio_mmproj;
#[path = "../../cera/tests/common/mmproj_model.rs"]
mod mmproj_model;

fn mmproj(dir: &std::path::Path) -> std::path::PathBuf {
    let shape = mmproj_model::VisionShape {
        n_embd_out: 576, // SmolLM2-135M
        ..mmproj_model::TINY
    };
    let p = dir.join("mmproj-smol.gguf");
    std::fs::write(
        &p,
        mmproj_model::build("smol", &shape, cera::quant::GgmlType::F16, None),
    )
    .unwrap();
    p
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn images_go_through_the_mmproj() {
    let dir = std::env::temp_dir().join(format!("cera-vision-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mm = mmproj(&dir);
    let data = cera::fetch::llama_cpp_data(&mut |_| {}).expect("llama.cpp's test data");
    let jpeg = data.join("tools/mtmd/test-1.jpeg");
    let (mm, jpeg) = (mm.to_str().unwrap(), jpeg.to_str().unwrap());
    let base = [
        "run", "-m", "smollm2", "-t", "2", "--temp", "0", "-n", "6", "--mmproj", mm,
    ];
    let with = |extra: &[&str]| {
        let mut v: Vec<&str> = base.to_vec();
        v.extend_from_slice(extra);
        run(&v)
    };
    let (ok, out, err) = with(&["--image", jpeg, "-p", "Describe the image."]);
    assert!(ok, "{err}");
    assert!(!out.trim().is_empty(), "{err}");
    // a marker of its own, the same image, the same place: the same reply
    let (ok, out2, err) = with(&["--image", jpeg, "-p", "<__media__>Describe the image."]);
    assert!(ok, "{err}");
    assert_eq!(out, out2);
    // what is wrong is named
    let (ok, _, err) = with(&["--image", jpeg, "-p", "<__media__><__media__>x"]);
    assert!(
        !ok && err.contains("2 <__media__> markers for 1 media"),
        "{err}"
    );
    let (ok, _, err) = run(&["run", "-m", "smollm2", "--image", jpeg, "-p", "x"]);
    assert!(!ok && err.contains("--mmproj"), "{err}");
    let bad = dir.join("not-an-image.jpg");
    std::fs::write(&bad, b"hello").unwrap();
    let (ok, _, err) = with(&["--image", bad.to_str().unwrap(), "-p", "x"]);
    assert!(
        !ok && err.contains("not-an-image.jpg") && err.contains("not an image"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `cera chat --mmproj`: `/image F` goes with the next message, whose reply is `cera run`'s
/// with the same image; the next turn keeps the image in the context (prefilling only the new
/// message); a bad file or a missing --mmproj is reported and the chat goes on.
#[test]
fn chat_takes_images() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("cera-vision-chat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mm = mmproj(&dir);
    let data = cera::fetch::llama_cpp_data(&mut |_| {}).expect("llama.cpp's test data");
    let jpeg = data.join("tools/mtmd/test-1.jpeg");
    let (mm, jpeg) = (mm.to_str().unwrap(), jpeg.to_str().unwrap());
    let (ok, want, err) = run(&[
        "run",
        "-m",
        "smollm2",
        "-t",
        "2",
        "--temp",
        "0",
        "-n",
        "6",
        "--mmproj",
        mm,
        "--image",
        jpeg,
        "-p",
        "Describe the image.",
    ]);
    assert!(ok, "{err}");
    let chat = |args: &[&str], input: String| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cera"))
            .args([
                "chat", "-m", "smollm2", "-t", "2", "--temp", "0", "-n", "6", "-v",
            ])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = chat(
        &["--mmproj", mm],
        format!("/image /nonexistent.png\n/image {jpeg}\nDescribe the image.\nAnd again?\n"),
    );
    assert!(ok, "{err}");
    assert!(err.contains("/nonexistent.png"), "{err}");
    assert!(
        out.starts_with(want.trim_end()),
        "chat: {out:?}\nrun: {want:?}"
    );
    assert!(out.len() > want.trim_end().len(), "a second reply: {out:?}");
    let (ok, _, err) = chat(&[], format!("/image {jpeg}\n"));
    assert!(ok && err.contains("--mmproj"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An mmproj with both halves, as wide as SmolLM2.
fn mmproj_both(dir: &std::path::Path) -> std::path::PathBuf {
    let ty = cera::quant::GgmlType::F16;
    let v = mmproj_model::VisionShape {
        n_embd_out: 576,
        ..mmproj_model::TINY
    };
    let a = audio_mmproj::AudioShape {
        n_embd_out: 576,
        ..audio_mmproj::TINY_AUDIO
    };
    let p = dir.join("mmproj-both.gguf");
    let bytes = audio_mmproj::combine(
        mmproj_model::build("smol", &v, ty, None),
        audio_mmproj::build("smol", &a, ty, None, None),
    );
    std::fs::write(&p, bytes).unwrap();
    p
}

/// 0.8 s of a 16-bit stereo WAV at 22.05 kHz (resampled and downmixed on the way in).
fn wav(dir: &std::path::Path) -> std::path::PathBuf {
    let (rate, n) = (22_050u32, 17_640usize);
    let mut data = Vec::new();
    for i in 0..n {
        let t = i as f32 / rate as f32;
        let l = (2.0 * std::f32::consts::PI * 330.0 * t).sin() * 9000.0;
        let r = (2.0 * std::f32::consts::PI * 990.0 * t).sin() * 6000.0;
        data.extend_from_slice(&(l as i16).to_le_bytes());
        data.extend_from_slice(&(r as i16).to_le_bytes());
    }
    let mut b = b"RIFF".to_vec();
    b.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    for v in [16u32, 0x0002_0001, rate, rate * 4, 0x0010_0004] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(&data);
    let p = dir.join("chord.wav");
    std::fs::write(&p, b).unwrap();
    p
}

/// `--audio` and `--image` fill one list in order, each file told by its bytes; `/audio` in
/// chat goes with the next message as `cera run --audio` does; bad audio is named.
#[test]
fn audio_goes_through_the_mmproj() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("cera-audio-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mm = mmproj_both(&dir);
    let clip = wav(&dir);
    let data = cera::fetch::llama_cpp_data(&mut |_| {}).expect("llama.cpp's test data");
    let jpeg = data.join("tools/mtmd/test-1.jpeg");
    let (mm, clip, jpeg) = (
        mm.to_str().unwrap(),
        clip.to_str().unwrap(),
        jpeg.to_str().unwrap(),
    );
    let base = [
        "run", "-m", "smollm2", "-t", "2", "--temp", "0", "-n", "6", "--mmproj", mm,
    ];
    let with = |extra: &[&str]| {
        let mut v: Vec<&str> = base.to_vec();
        v.extend_from_slice(extra);
        run(&v)
    };
    let (ok, want, err) = with(&["--audio", clip, "-p", "What is this sound?"]);
    assert!(ok, "{err}");
    assert!(!want.trim().is_empty(), "{err}");
    // an image and a clip in the order given, each at its marker
    // (--verbose prints where the media's rows are: the image's run is longer than the clip's)
    let runs = |err: &str| -> Vec<(usize, usize)> {
        let line = err
            .lines()
            .find_map(|l| l.split("media rows (position+rows): ").nth(1))
            .unwrap_or_else(|| panic!("no media layout in: {err}"));
        line.split_whitespace()
            .map(|r| {
                let (p, n) = r.split_once('+').unwrap();
                (p.parse().unwrap(), n.parse().unwrap())
            })
            .collect()
    };
    let (ok, both, err) = with(&[
        "-v",
        "--image",
        jpeg,
        "--audio",
        clip,
        "-p",
        "<__media__> and <__media__>: what?",
    ]);
    assert!(ok && !both.trim().is_empty(), "{err}");
    let first = runs(&err);
    let (ok, _, err) = with(&[
        "-v",
        "--audio",
        clip,
        "--image",
        jpeg,
        "-p",
        "<__media__> and <__media__>: what?",
    ]);
    assert!(ok, "{err}");
    let swapped = runs(&err);
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(swapped.len(), 2, "{swapped:?}");
    // the media's order is the flags' order: the rows trade places
    assert!(first[0].1 > first[1].1, "image first: {first:?}");
    assert_eq!((swapped[0].1, swapped[1].1), (first[1].1, first[0].1));
    // bad audio is named by file
    let bad = dir.join("cut.wav");
    std::fs::write(&bad, b"RIFF\x24\0\0\0WAVEfmt ").unwrap();
    let (ok, _, err) = with(&["--audio", bad.to_str().unwrap(), "-p", "x"]);
    assert!(
        !ok && err.contains("cut.wav") && err.contains("audio"),
        "{err}"
    );
    // chat: /audio goes with the next message, its reply as cera run's
    let mut c = Command::new(env!("CARGO_BIN_EXE_cera"))
        .args([
            "chat", "-m", "smollm2", "-t", "2", "--temp", "0", "-n", "6", "--mmproj", mm,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(format!("/audio {clip}\nWhat is this sound?\n").as_bytes())
        .unwrap();
    let out = c.wait_with_output().unwrap();
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert!(err.contains("goes with the next message"), "{err}");
    assert!(
        text.starts_with(want.trim_end()),
        "chat: {text:?}\nrun: {want:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
