#!/usr/bin/env python3
"""Writes greedy-generation and logits fixtures from llama.cpp for the generation tests.

For each model and each prompt in crates/cera/tests/fixtures/generation/prompts.json, runs
scripts/llama-ref/dump_ref (our small program linked against llama.cpp's libllama; built here
from dump_ref.cpp) and stores:
  fixtures/generation/<model>/<i>.json    prompt tokens, 64 greedy steps (token + top-2 logits)
  fixtures/generation/<model>/<i>.logits  last-position logits after the prompt (f32 LE)
and, in the json's "self_check", how far llama.cpp is from itself when only its attention path
changes (flash attention off instead of on): max|d|/std and rms|d|/std of the last-position
logits, and the first greedy step where the two runs differ. That is the numerical noise floor
of the reference, against which the Rust test's tolerances are set.

usage: scripts/gen-generation-fixtures.py MODEL_NAME MODEL.gguf [PROMPT_INDEX ...]
Needs llama.cpp built by ../shared/tools/build-llama-cpp.sh (not needed by CI).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "crates", "cera", "tests", "fixtures", "generation")


def build_dumper() -> str:
    bindir = subprocess.check_output(["bash", os.path.join(HERE, "..", "..", "shared", "tools", "build-llama-cpp.sh")], text=True).strip()
    src = os.path.dirname(os.path.dirname(bindir))  # .../llama.cpp
    exe = os.path.join(tempfile.mkdtemp(prefix="cera_dump_"), "dump_ref")
    subprocess.check_call([
        "g++", "-O2", "-std=c++17", f"-I{src}/include", f"-I{src}/ggml/include",
        os.path.join(HERE, "llama-ref", "dump_ref.cpp"), f"-L{bindir}", "-lllama", "-lggml", "-lggml-base",
        f"-Wl,-rpath,{bindir}", "-o", exe,
    ])
    return exe


def read_f32(path: str) -> list:
    data = open(path, "rb").read()
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    name, model = sys.argv[1], sys.argv[2]
    only = {int(a) for a in sys.argv[3:]}
    exe = build_dumper()
    prompts = json.load(open(os.path.join(FIX, "prompts.json")))
    out_dir = os.path.join(FIX, name)
    os.makedirs(out_dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="cera_ref_")
    for i, p in enumerate(prompts):
        if only and i not in only:
            continue
        with tempfile.NamedTemporaryFile("wb", delete=False) as f:
            f.write(p.encode("utf-8"))
        base = os.path.join(out_dir, str(i))
        subprocess.check_call([exe, model, f.name, "64", base], stderr=subprocess.DEVNULL)
        alt = os.path.join(scratch, "nofa")
        subprocess.check_call([exe, model, f.name, "64", alt], stderr=subprocess.DEVNULL, env=dict(os.environ, CERA_REF_NO_FA="1"))
        os.unlink(f.name)
        a = read_f32(base + ".logits")
        b = read_f32(alt + ".logits")
        mean = sum(a) / len(a)
        std = (sum((x - mean) ** 2 for x in a) / len(a)) ** 0.5
        d = [abs(x - y) for x, y in zip(a, b)]
        ja = json.load(open(base + ".json"))
        jb = json.load(open(alt + ".json"))
        ta = [st["token"] for st in ja["steps"]]
        tb = [st["token"] for st in jb["steps"]]
        first = next((k for k, (x, y) in enumerate(zip(ta, tb)) if x != y), None)
        ja["self_check"] = {
            "max_d_over_std": max(d) / std,
            "rms_d_over_std": (sum(x * x for x in d) / len(d)) ** 0.5 / std,
            "logit_std": std,
            "first_greedy_divergence": first,
        }
        with open(base + ".json", "w") as out:
            json.dump(ja, out)
        print(f"{name} prompt {i} done")


if __name__ == "__main__":
    main()
