//! `cera run --mmproj FILE --image F`: images through a random-weight mmproj of SmolLM2's width
//! (the generator of the core's tests), placed at `<__media__>` or before the prompt; what is
//! wrong with the flags or the files is named before the model loads.

use std::process::Command;

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
        !ok && err.contains("2 <__media__> markers for 1 images"),
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
