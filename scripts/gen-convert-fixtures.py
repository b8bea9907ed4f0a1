#!/usr/bin/env python3
"""Writes crates/cera-cli/tests/fixtures/convert.json from llama.cpp's convert_hf_to_gguf.py.

For each checkpoint (made by scripts/make-hf-checkpoint.py from one of our GGUF models, so CI can
make the same bytes without torch): the sha256 of every input file, then the sha256 of
convert_hf_to_gguf.py's output for each --outtype, of llama-quantize's quantization of its
lossless (`auto`) output for the quantized types, and the greedy continuation transformers
gives on the checkpoint itself (the "original" the converted model must reproduce).

usage: scripts/gen-convert-fixtures.py
Needs: a Python with torch, transformers, numpy and gguf (PYTHON=..., default python3), the
llama.cpp source (LLAMA_SRC=..., default the one build-llama-cpp.sh fetches) and llama-quantize
(LLAMA_BIN=a folder with it built). CI needs none of these.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "crates", "cera-cli", "tests", "fixtures", "convert.json")
MODELS = os.path.expanduser("~/.cache/cera/models")
PYTHON = os.environ.get("PYTHON", sys.executable)
SRC = os.environ.get("LLAMA_SRC", os.path.expanduser("~/.cache/cera-peers/llama.cpp-11434.0.0/src/llama.cpp"))
BIN = os.environ.get("LLAMA_BIN", os.path.join(SRC, "build", "bin"))

PROMPT = "The capital of France is"
N_GREEDY = 16

# name, source GGUF, folder name (the converter reads names from it), make-hf-checkpoint flags,
# converter outtypes, llama-quantize types (from the `auto` output)
CHECKPOINTS = [
    ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct", ["--dtype", "bf16"],
     ["f32", "f16", "bf16", "q8_0", "auto"], ["Q4_K_M", "Q4_0"]),
    ("smollm2-f32", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M", ["--dtype", "f32"],
     ["f16", "auto"], []),
    # sharded (index + 4 files), qkv biases, 151936 tokens with unused [PAD] ids
    ("qwen", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf", "Qwen2.5-Coder-0.5B-Instruct",
     ["--dtype", "bf16", "--shard-mb", "400"], ["f16", "q8_0", "auto"], ["Q4_K_M"]),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)}:\n{r.stderr[-3000:]}")
    return r


def greedy(ckpt):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32)
    ids = tok(PROMPT, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=N_GREEDY, do_sample=False, top_p=None, top_k=None,
                             temperature=None, repetition_penalty=None)
    new = out[0, ids.shape[1]:].tolist()
    return {"prompt": PROMPT, "prompt_ids": ids[0].tolist(), "tokens": new,
            "text": tok.decode(new, skip_special_tokens=False)}


def main():
    fixture = {"prompt": PROMPT, "n_greedy": N_GREEDY, "checkpoints": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, folder, flags, outtypes, quants in CHECKPOINTS:
            ckpt = os.path.join(tmp, name, folder)
            run([PYTHON, os.path.join(HERE, "make-hf-checkpoint.py"), os.path.join(MODELS, model), ckpt, *flags])
            inputs = {f: sha256(os.path.join(ckpt, f)) for f in sorted(os.listdir(ckpt))}
            cases = []
            for ot in outtypes:
                out = os.path.join(tmp, name, f"{ot}.gguf")
                run([PYTHON, os.path.join(SRC, "convert_hf_to_gguf.py"), ckpt, "--outtype", ot, "--outfile", out])
                cases.append({"outtype": ot, "sha256": sha256(out), "size": os.path.getsize(out)})
                print(f"{name} {ot}: {cases[-1]['sha256'][:16]}", file=sys.stderr)
                if ot != "auto":
                    os.remove(out)
            auto = os.path.join(tmp, name, "auto.gguf")
            for q in quants:
                out = os.path.join(tmp, name, f"{q}.gguf")
                run([os.path.join(BIN, "llama-quantize"), auto, out, q, "2"],
                    env=dict(os.environ, LD_LIBRARY_PATH=BIN))
                cases.append({"outtype": q, "sha256": sha256(out), "size": os.path.getsize(out)})
                print(f"{name} {q}: {cases[-1]['sha256'][:16]}", file=sys.stderr)
                os.remove(out)
            os.remove(auto)
            g = greedy(ckpt)
            print(f"{name} greedy: {g['text']!r}", file=sys.stderr)
            fixture["checkpoints"].append({
                "name": name, "model": model, "folder": folder, "flags": flags,
                "inputs": inputs, "cases": cases, "greedy": g,
            })
    with open(OUT, "w") as f:
        json.dump(fixture, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
