#!/usr/bin/env python3
"""Writes greedy-generation and logits fixtures from llama.cpp for the generation tests.

For each model and each prompt in crates/cera/tests/fixtures/generation/prompts.json, runs
scripts/llama-ref/dump_ref (our small program linked against llama.cpp's libllama; built here
from dump_ref.cpp) and stores:
  fixtures/generation/<model>/<i>.json    prompt tokens, 64 greedy steps (token + top-2 logits)
  fixtures/generation/<model>/<i>.logits  last-position logits after the prompt (f32 LE)

usage: scripts/gen-generation-fixtures.py MODEL_NAME MODEL.gguf
Needs llama.cpp built by ../shared/tools/build-llama-cpp.sh (not needed by CI).
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "crates", "cera", "tests", "fixtures", "generation")


def build_dumper() -> str:
    bindir = subprocess.check_output(["bash", os.path.join(HERE, "..", "..", "shared", "tools", "build-llama-cpp.sh")], text=True).strip()
    src = os.path.dirname(os.path.dirname(bindir))  # .../llama.cpp
    exe = os.path.join(tempfile.gettempdir(), "cera_dump_ref")
    subprocess.check_call([
        "g++", "-O2", "-std=c++17", f"-I{src}/include", f"-I{src}/ggml/include",
        os.path.join(HERE, "llama-ref", "dump_ref.cpp"), f"-L{bindir}", "-lllama", "-lggml", "-lggml-base",
        f"-Wl,-rpath,{bindir}", "-o", exe,
    ])
    return exe


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    name, model = sys.argv[1], sys.argv[2]
    exe = build_dumper()
    prompts = json.load(open(os.path.join(FIX, "prompts.json")))
    out_dir = os.path.join(FIX, name)
    os.makedirs(out_dir, exist_ok=True)
    for i, p in enumerate(prompts):
        with tempfile.NamedTemporaryFile("wb", delete=False) as f:
            f.write(p.encode("utf-8"))
        subprocess.check_call([exe, model, f.name, "64", os.path.join(out_dir, str(i))], stderr=subprocess.DEVNULL)
        os.unlink(f.name)
        print(f"{name} prompt {i} done")


if __name__ == "__main__":
    main()
