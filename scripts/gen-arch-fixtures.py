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

The LFM2 family (models named lfm2*) follows its issue's plan instead: the 12 prompts of
prompts_lfm2.json (4 for the LFM2-350M shapes, whose runs are long), 64 greedy steps, and
last-position logits kept for the first 4 prompts only (the vocabulary makes each file 196 KB;
the greedy steps still compare the winning logit at every step). lfm2moe models (and the
LFM2-350M shapes, whose 16 wide quantized layers amplify the same noise) use an f32 KV
cache on both sides and llama.cpp's attention without flash attention ("kv": "f32" in
model.json; llama.cpp's flash attention keeps an f16 cache whatever the cache type asked for):
choosing the top 4 of 32 experts is discontinuous, and the f16 cache's rounding (~1e-3 of the
logits' spread) is enough to flip near-tied choices somewhere in 12 prompts x 64 steps, which
then moves the logits by far more than the tolerance. With both in f32 the engines agree to
~4e-6 of the spread on these models.

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


def plan(name: str) -> tuple:
    """(prompts file, prompts used, greedy steps, prompts whose logits are kept, KV type)."""
    if name.startswith("lfm2"):
        n = 4 if "350m" in name else 12
        f32 = name.startswith("lfm2moe") or "350m" in name
        return "prompts_lfm2.json", n, 64, 4, "f32" if f32 else "f16"
    return "prompts.json", None, N_STEPS, None, "f16"


def build_dumper() -> str:
    bindir = subprocess.check_output(["bash", os.path.join(ROOT, "..", "shared", "tools", "build-llama-cpp.sh")], text=True).strip()
    src = os.path.dirname(os.path.dirname(bindir))  # .../llama.cpp
    # a private path: concurrent runs must not rebuild a binary another run is using
    exe = os.path.join(tempfile.mkdtemp(prefix="cera-dump-ref-"), "dump_ref")
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
    tmp = tempfile.mkdtemp(prefix="cera-arch-")
    try:
        shas = make_models(tmp, names)
        for name, sha in shas.items():
            path = os.path.join(tmp, f"{name}.gguf")
            with open(path, "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == sha, name
            pfile, n_prompts, n_steps, n_logits, kv = plan(name)
            env = dict(os.environ)
            if kv == "f32":
                env["CERA_REF_KV_F32"] = "1"
                env["CERA_REF_NO_FA"] = "1"
            prompts = json.load(open(os.path.join(FIX, pfile)))[:n_prompts]
            out_dir = os.path.join(FIX, name)
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            for i, p in enumerate(prompts):
                pf = os.path.join(tmp, "prompt.txt")
                with open(pf, "wb") as f:
                    f.write(p.encode("utf-8"))
                log = os.path.join(tmp, f"{name}.{i}.log")
                with open(log, "w") as lf:
                    rc = subprocess.call([exe, path, pf, str(n_steps), os.path.join(out_dir, str(i))], stderr=lf, env=env)
                if rc != 0:
                    sys.stderr.write(open(log).read()[-3000:])
                    raise SystemExit(f"{name}: llama.cpp failed on prompt {i}")
                if n_logits is not None and i >= n_logits:
                    os.remove(os.path.join(out_dir, f"{i}.logits"))
            with open(os.path.join(out_dir, "model.json"), "w") as f:
                meta = {"sha256": sha, "n_prompts": len(prompts), "n_steps": n_steps}
                if kv != "f16":
                    meta["kv"] = kv
                json.dump(meta, f, indent=1)
                f.write("\n")
            print(f"{name}: done")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
