#!/usr/bin/env python3
"""Writes the architecture parity fixtures from llama.cpp for crates/cera/tests/arch_parity.rs.

The tiny random-weight models come from `cargo run --example make_test_model` (the generator is
crates/cera/tests/common/arch_models.rs); they are written to a temporary folder, never committed.
For each model and each prompt of crates/cera/tests/fixtures/arch/prompts.json this runs
scripts/llama-ref/dump_ref (our small program linked against llama.cpp's libllama; built here
from dump_ref.cpp) and stores under crates/cera/tests/fixtures/arch/<model>/:
  model.json    the sha256 of the generated GGUF (the test rebuilds the model and checks it)
  <i>.json      prompt tokens (llama.cpp's tokenization), 32 greedy steps (token + top-2 logits)
  <i>.logits    last-position logits after the prompt (f32 LE)

usage: scripts/gen-arch-fixtures.py [MODEL...]      (default: every model)
Needs llama.cpp built by ../shared/tools/build-llama-cpp.sh (not needed by CI).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
FIX = os.path.join(ROOT, "crates", "cera", "tests", "fixtures", "arch")
N_STEPS = 32


def build_dumper() -> str:
    bindir = subprocess.check_output(["bash", os.path.join(ROOT, "..", "shared", "tools", "build-llama-cpp.sh")], text=True).strip()
    src = os.path.dirname(os.path.dirname(bindir))  # .../llama.cpp
    exe = os.path.join(tempfile.gettempdir(), "cera_dump_ref")
    subprocess.check_call([
        "g++", "-O2", "-std=c++17", f"-I{src}/include", f"-I{src}/ggml/include",
        os.path.join(HERE, "llama-ref", "dump_ref.cpp"), f"-L{bindir}", "-lllama", "-lggml", "-lggml-base",
        f"-Wl,-rpath,{bindir}", "-o", exe,
    ])
    return exe


def make_models(out_dir: str, names: list) -> dict:
    """Runs the generator; returns {name: sha256} as it reports them."""
    out = subprocess.check_output(
        ["cargo", "run", "-q", "--profile", "test", "-p", "cera", "--example", "make_test_model", "--", out_dir, *names],
        cwd=ROOT, text=True)
    shas = {}
    for line in out.splitlines():
        name, sha = line.split()
        shas[name] = sha
    return shas


def main() -> None:
    names = sys.argv[1:]
    exe = build_dumper()
    prompts = json.load(open(os.path.join(FIX, "prompts.json")))
    tmp = tempfile.mkdtemp(prefix="cera-arch-")
    try:
        shas = make_models(tmp, names)
        for name, sha in shas.items():
            path = os.path.join(tmp, f"{name}.gguf")
            with open(path, "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == sha, name
            out_dir = os.path.join(FIX, name)
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            for i, p in enumerate(prompts):
                pf = os.path.join(tmp, "prompt.txt")
                with open(pf, "wb") as f:
                    f.write(p.encode("utf-8"))
                log = os.path.join(tmp, f"{name}.{i}.log")
                with open(log, "w") as lf:
                    rc = subprocess.call([exe, path, pf, str(N_STEPS), os.path.join(out_dir, str(i))], stderr=lf)
                if rc != 0:
                    sys.stderr.write(open(log).read()[-3000:])
                    raise SystemExit(f"{name}: llama.cpp failed on prompt {i}")
            with open(os.path.join(out_dir, "model.json"), "w") as f:
                json.dump({"sha256": sha, "n_prompts": len(prompts), "n_steps": N_STEPS}, f, indent=1)
                f.write("\n")
            print(f"{name}: done")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
