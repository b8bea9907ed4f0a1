#!/usr/bin/env python3
"""Writes the context-shift fixtures: greedy generation on SmolLM2 with llama-completion's
context shift (-c 128 -n 400 --keep 16), for the prompts in
crates/cera/tests/fixtures/shift/prompts.json, by scripts/llama-ref/shift_ref (our small
program linked against llama.cpp's libllama, built here). Each step records the token and the
top-2 logits, so the Rust test can tell a near-tie from a real divergence.

usage: scripts/gen-shift-fixtures.py MODEL.gguf
Needs llama.cpp built by ../shared/tools/build-llama-cpp.sh (not needed by CI).
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "crates", "cera", "tests", "fixtures", "shift")
N_CTX, N_KEEP, N_PREDICT = 128, 16, 400


def build() -> str:
    bindir = subprocess.check_output(["bash", os.path.join(HERE, "..", "..", "shared", "tools", "build-llama-cpp.sh")], text=True).strip()
    src = os.path.dirname(os.path.dirname(bindir))
    exe = os.path.join(tempfile.mkdtemp(prefix="cera_shift_"), "shift_ref")
    subprocess.check_call([
        "g++", "-O2", "-std=c++17", f"-I{src}/include", f"-I{src}/ggml/include",
        os.path.join(HERE, "llama-ref", "shift_ref.cpp"), f"-L{bindir}", "-lllama", "-lggml", "-lggml-base",
        f"-Wl,-rpath,{bindir}", "-o", exe,
    ])
    return exe


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    exe = build()
    prompts = json.load(open(os.path.join(FIX, "prompts.json")))
    for i, p in enumerate(prompts):
        with tempfile.NamedTemporaryFile("wb", delete=False) as f:
            f.write(p.encode("utf-8"))
        out = os.path.join(FIX, f"{i}.json")
        subprocess.check_call([exe, sys.argv[1], f.name, str(N_CTX), str(N_KEEP), str(N_PREDICT), out],
                              stderr=subprocess.DEVNULL)
        d = json.load(open(out))
        d.update({"n_ctx": N_CTX, "keep": N_KEEP, "n_predict": N_PREDICT})
        json.dump(d, open(out, "w"))
        print(f"prompt {i}: {len(d['steps'])} steps, shifts at {d['shifts']}")


if __name__ == "__main__":
    main()
