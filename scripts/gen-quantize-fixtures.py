#!/usr/bin/env python3
"""Writes crates/cera-cli/tests/fixtures/quantize.json from llama.cpp's llama-quantize.

For each real model: an F16 source (llama-quantize --allow-requantize MODEL F16: the model's
blocks dequantized), then llama-quantize of that F16 file to each case's type and flags, with
no importance matrix. The fixture keeps the sha256 of every file and the type of every tensor,
so the test (crates/cera-cli/tests/quantize.rs) can require cera's files to be the same bytes
and, when not, say which tensors' types differ.

usage: scripts/gen-quantize-fixtures.py
Needs llama.cpp built by ../shared/tools/build-llama-cpp.sh and the `gguf` package (pip);
CI needs neither.
"""
import hashlib
import json
import os
import subprocess
import tempfile

import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "crates", "cera-cli", "tests", "fixtures", "quantize.json")
MODELS = os.path.expanduser("~/.cache/cera/models")
# LLAMA_BIN: a folder with llama-quantize already built (e.g. `cmake --build build --target
# llama-quantize`), instead of the whole build
BIN = os.environ.get("LLAMA_BIN") or subprocess.run(
    ["bash", os.path.join(HERE, "..", "..", "shared", "tools", "build-llama-cpp.sh")],
    check=True, capture_output=True, text=True).stdout.strip()

# catalog name (what the test passes to `cera quantize`), file, cases (type first, then flags)
TARGETS = [
    ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", [
        ["Q8_0"], ["Q4_0"], ["Q4_1"], ["Q5_0"], ["Q5_1"], ["Q2_K"], ["Q3_K_S"], ["Q3_K_M"],
        ["Q3_K_L"], ["Q4_K_S"], ["Q4_K_M"], ["Q5_K_S"], ["Q5_K_M"], ["Q6_K"], ["IQ4_NL"],
        ["IQ4_XS"], ["BF16"], ["Q4_K_M", "--pure"], ["Q6_K", "--output-tensor-type", "f16"],
        ["Q4_0", "--token-embedding-type", "q4_1"],
    ]),
    # grouped-query attention of 7 (the Q2_K and IQ4 rules change at 4) and 896-wide rows
    # (not whole K blocks: the fallbacks)
    ("qwen", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf", [["Q2_K"], ["Q4_K_M"]]),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def quantize(src, dst, args):
    ty, flags = args[0], args[1:]
    cmd = [os.path.join(BIN, "llama-quantize"), *flags, src, dst, ty, "2"]
    env = dict(os.environ, LD_LIBRARY_PATH=BIN)
    subprocess.run(cmd, check=True, capture_output=True, env=env)


def types(path):
    r = gguf.GGUFReader(path)
    return {t.name: t.tensor_type.name for t in r.tensors}


def main():
    out = {"tool": "llama-quantize (llama.cpp 11434), no importance matrix, 2 threads",
           "models": []}
    with tempfile.TemporaryDirectory() as d:
        for name, file, cases in TARGETS:
            f16 = os.path.join(d, f"{name}-f16.gguf")
            quantize(os.path.join(MODELS, file), f16, ["F16", "--allow-requantize"])
            entry = {"model": name, "file": file, "f16_sha256": sha256(f16), "cases": []}
            for args in cases:
                dst = os.path.join(d, "out.gguf")
                quantize(f16, dst, args)
                entry["cases"].append({"args": args, "sha256": sha256(dst), "types": types(dst)})
                print(name, args, entry["cases"][-1]["sha256"][:16], flush=True)
                os.remove(dst)
            out["models"].append(entry)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
