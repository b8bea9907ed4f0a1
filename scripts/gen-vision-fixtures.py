#!/usr/bin/env python3
"""Reference fixtures for images in the prompt (tests/vision_parity.rs), from llama.cpp's mtmd.

  scripts/gen-vision-fixtures.py [lfm2|idefics3]   (default lfm2)

idefics3: the pair at SmolVLM-256M's shapes instead (`make_mmproj ... 576 f16 smolvlm-256m
1024`: SigLIP base at 512, pixel shuffle by 4, the bias-free projector; its longest edge 1024
rather than 2048, so an image is 2 to 4 slices and the overview, not 4 to 16; and
`make_test_model --idefics3-tokens ... llama_576w_q8_0`), under tests/fixtures/vision-idefics3/,
on test-1.jpeg (2 x 2 slices) and a drawn 300 x 900 image (1 x 2 slices).

lfm2:

Makes, with our generators, a random-weight pair at LFM2-VL-450M's shapes: the mmproj
(`make_mmproj ... 1024 f16 lfm2-vl-450m`: SigLIP2 NaFlex base, LFM2-VL's projector) and the
language model at LFM2-350M's shape (`make_test_model --media-tokens ... lfm2_350m_q4_0`: its
vocabulary has LFM2-VL's image marker tokens, which mtmd looks up). Then, for each image, runs
scripts/llama-ref/mtmd_ref (our small program linked against llama.cpp's libllama and libmtmd)
on the prompt "<__media__>Describe the image." and stores under
crates/cera/tests/fixtures/vision/:
  index.json       the models' sha256, and per image: mtmd's chunks (text tokens, or the media
                   chunk's token count), the first step's 64 largest logits, the greedy steps
  NAME.embd.f16    every media chunk's projected embeddings (f16 LE, [n_tokens, 1024], in order)
The images: llama.cpp's tools/mtmd/test-1.jpeg (640 x 488: one thumbnail), and two drawn here
and in the test alike (`pattern`): 1100 x 520 (tiled: 2 x 1 tiles of 512 and a thumbnail) and
100 x 30 (scaled up to the fewest tokens).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "crates", "cera", "tests", "fixtures", "vision")
PROMPT = "<__media__>Describe the image."
N_PREDICT = 8


def pattern(w: int, h: int) -> np.ndarray:
    """The drawn test image (the test draws the same): ramps in red and green, a checker of 8
    with a fine texture in blue."""
    y, x = np.mgrid[0:h, 0:w]
    r = x * 255 // (w - 1)
    g = y * 255 // (h - 1)
    b = ((x // 8 + y // 8) % 2) * 160 + (x * y) % 64
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


def build_dumper() -> str:
    bindir = subprocess.check_output(["bash", os.path.join(ROOT, "..", "shared", "tools", "build-llama-cpp.sh")], text=True).strip()
    src = os.path.dirname(os.path.dirname(bindir))  # .../llama.cpp
    exe = os.path.join(tempfile.mkdtemp(prefix="cera-mtmd-ref-"), "mtmd_ref")
    subprocess.check_call([
        "g++", "-O2", "-std=c++17", f"-I{src}/include", f"-I{src}/ggml/include", f"-I{src}/tools/mtmd",
        os.path.join(HERE, "llama-ref", "mtmd_ref.cpp"), f"-L{bindir}", "-lmtmd", "-lllama", "-lggml", "-lggml-base",
        f"-Wl,-rpath,{bindir}", "-o", exe,
    ])
    return exe


def example(name: str, *args: str) -> str:
    return subprocess.check_output(
        ["cargo", "run", "-q", "--release", "-p", "cera", "--example", name, "--", *args], cwd=ROOT, text=True)


FAMILIES = {
    "lfm2": {
        "out": OUT,
        "model": ("--media-tokens", "lfm2_350m_q4_0"),
        "mmproj": ("1024", "f16", "lfm2-vl-450m"),
        "drawn": {"pattern-1100x520": (1100, 520), "pattern-100x30": (100, 30)},
    },
    "idefics3": {
        "out": OUT + "-idefics3",
        "model": ("--idefics3-tokens", "llama_576w_q8_0"),
        "mmproj": ("576", "f16", "smolvlm-256m", "1024"),
        "drawn": {"pattern-300x900": (300, 900)},
    },
}


def main() -> None:
    fam = FAMILIES[sys.argv[1] if len(sys.argv) > 1 else "lfm2"]
    out_dir = fam["out"]
    work = tempfile.mkdtemp(prefix="cera-vision-fixtures-")
    exe = build_dumper()
    flag, lm = fam["model"]
    model_sha = example("make_test_model", flag, work, lm).split()[1]
    mmproj = os.path.join(work, "mmproj.gguf")
    mmproj_sha = example("make_mmproj", mmproj, *fam["mmproj"]).strip()
    model = os.path.join(work, lm + ".gguf")
    data = example("fetch_test_data").strip().splitlines()[-1]
    images = {"test-1.jpeg": os.path.join(data, "tools", "mtmd", "test-1.jpeg")}
    for name, (w, h) in fam["drawn"].items():
        path = os.path.join(work, name + ".png")
        Image.fromarray(pattern(w, h)).save(path)
        images[name] = path
    prompt = os.path.join(work, "prompt.txt")
    with open(prompt, "w") as f:
        f.write(PROMPT)
    os.makedirs(out_dir, exist_ok=True)
    index = {"model": f"{lm} {flag}", "model_sha256": model_sha,
             "mmproj": " ".join(fam["mmproj"][1:]), "mmproj_sha256": mmproj_sha, "prompt": PROMPT, "images": {}}
    for name, path in images.items():
        prefix = os.path.join(work, name)
        subprocess.check_call([exe, model, mmproj, prompt, str(N_PREDICT), prefix, path], stderr=subprocess.DEVNULL)
        with open(prefix + ".json") as f:
            ref = json.load(f)
        embd = np.fromfile(prefix + ".embd", dtype="<f4")
        embd.astype("<f2").tofile(os.path.join(out_dir, name + ".embd.f16"))
        del ref["encode_ms"]
        index["images"][name] = ref
        media = sum(c.get("n_tokens", 0) for c in ref["chunks"] if c["type"] != "text")
        print(f"{name}: {media} image tokens, steps {[s['token'] for s in ref['steps']]}", file=sys.stderr)
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
