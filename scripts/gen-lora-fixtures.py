#!/usr/bin/env python3
"""Writes the LoRA parity fixtures from llama.cpp for crates/cera/tests/lora.rs.

For each base model and rank below:
  1. `cargo run --example make_lora` writes a random PEFT adapter (adapter_config.json +
     adapter_model.safetensors, f32, every linear projection) and the base's HF config.json;
     the generator is crates/cera/tests/common/lora_gen.rs, so the test rebuilds the very same
     adapter and checks the sha256 recorded here. Tiny models come from make_test_model.
  2. llama.cpp's convert_lora_to_gguf.py converts it (--outtype f32); the sha256 of every
     tensor of the GGUF it writes is recorded, so the test can check that Cera's own reading
     of the PEFT files yields the same tensors (names, layout, the llama Q/K permutation).
  3. scripts/llama-ref/dump_ref (linked against libllama) runs each prompt with the adapter
     (CERA_REF_LORA) at each scale: prompt tokens, greedy steps with top-2 logits, and the
     last-position logits reduced to their 64 largest entries plus the std of all of them;
     also with flash attention off, to record llama.cpp's own spread (the noise floor).

Output: crates/cera/tests/fixtures/lora/<name>/fixture.json

usage: scripts/gen-lora-fixtures.py [NAME...]
Needs llama.cpp built by ../shared/tools/build-llama-cpp.sh and a Python with torch,
transformers and safetensors for the converter ($LORA_PYTHON, default: python3). Not needed
by CI.
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
FIX = os.path.join(ROOT, "crates", "cera", "tests", "fixtures", "lora")
MODELS = os.path.expanduser("~/.cache/cera/models")

# name -> (base: catalog file or test model, rank, alpha, seed, amplitude[, embed]); `embed`
# adds a pair on the token embeddings. The lfm2moe ones adapt the MoE router and every
# expert's projections too (every linear projection of the model).
CONFIGS = {
    "smollm2_r8": ("SmolLM2-135M-Instruct.Q4_1.gguf", 8, 16.0, 1, 0.5),
    "smollm2_r16": ("SmolLM2-135M-Instruct.Q4_1.gguf", 16, 32.0, 2, 0.5),
    "qwen_r8": ("Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf", 8, 16.0, 3, 0.5),
    "lfm2_q8_0_r8": ("test:lfm2_q8_0", 8, 16.0, 4, 0.5),
    "lfm2_q8_0_r16": ("test:lfm2_q8_0", 16, 16.0, 5, 0.5),
    "lfm2moe_q8_0_r8": ("test:lfm2moe_q8_0", 8, 16.0, 6, 0.5),
    # llama.cpp aborts on an embedding pair when the output is tied to the embeddings
    "lfm2moe_untied_r8_embd": ("test:lfm2moe_untied_q8_0", 8, 16.0, 7, 0.5, True),
}
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
]
SCALES = [1.0, 0.5]
N_STEPS = 16
TOP = 64


def build_dumper() -> tuple:
    bindir = subprocess.check_output(["bash", os.path.join(ROOT, "..", "shared", "tools", "build-llama-cpp.sh")], text=True).strip()
    src = os.path.dirname(os.path.dirname(bindir))
    exe = os.path.join(tempfile.mkdtemp(prefix="cera-dump-ref-"), "dump_ref")
    subprocess.check_call([
        "g++", "-O2", "-std=c++17", f"-I{src}/include", f"-I{src}/ggml/include",
        os.path.join(HERE, "llama-ref", "dump_ref.cpp"), f"-L{bindir}", "-lllama", "-lggml", "-lggml-base",
        f"-Wl,-rpath,{bindir}", "-o", exe,
    ])
    return exe, src


def cargo_example(name: str, *args: str) -> str:
    return subprocess.check_output(
        ["cargo", "run", "-q", "--release", "-p", "cera", "--example", name, "--", *args], cwd=ROOT, text=True)


def tensor_hashes(src: str, path: str) -> dict:
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    from gguf import GGUFReader  # noqa: E402
    r = GGUFReader(path)
    return {t.name: hashlib.sha256(bytes(t.data.tobytes())).hexdigest() for t in r.tensors}


def read_f32(path: str) -> list:
    data = open(path, "rb").read()
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def run(exe: str, model: str, prompt: str, adapter: str, scale: float, tmp: str, no_fa: bool) -> tuple:
    pf = os.path.join(tmp, "prompt.txt")
    with open(pf, "wb") as f:
        f.write(prompt.encode())
    env = dict(os.environ, CERA_REF_LORA=adapter, CERA_REF_LORA_SCALE=str(scale))
    if no_fa:
        env["CERA_REF_NO_FA"] = "1"
    out = os.path.join(tmp, "ref")
    with open(os.path.join(tmp, "log"), "w") as log:
        if subprocess.call([exe, model, pf, str(N_STEPS), out], env=env, stderr=log) != 0:
            sys.stderr.write(open(os.path.join(tmp, "log")).read()[-3000:])
            raise SystemExit("dump_ref failed")
    return json.load(open(out + ".json")), read_f32(out + ".logits")


def main() -> None:
    names = sys.argv[1:] or list(CONFIGS)
    exe, src = build_dumper()
    py = os.environ.get("LORA_PYTHON", "python3")
    for name in names:
        base, rank, alpha, seed, amp, *rest = CONFIGS[name]
        embed = bool(rest and rest[0])
        tmp = tempfile.mkdtemp(prefix="cera-lora-")
        try:
            if base.startswith("test:"):
                test_name = base[5:]
                cargo_example("make_test_model", tmp, test_name)
                model = os.path.join(tmp, f"{test_name}.gguf")
            else:
                model = os.path.join(MODELS, base)
            peft = os.path.join(tmp, "peft")
            sha = cargo_example("make_lora", model, peft, str(rank), str(alpha), str(seed), str(amp),
                                *(["embed"] if embed else [])).strip()
            gguf = os.path.join(tmp, "adapter.gguf")
            subprocess.check_call([py, os.path.join(src, "convert_lora_to_gguf.py"), "--base", peft,
                                   "--outtype", "f32", "--outfile", gguf, peft],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            runs = []
            for scale in SCALES:
                for i, p in enumerate(PROMPTS):
                    fx, logits = run(exe, model, p, gguf, scale, tmp, False)
                    _, logits_nofa = run(exe, model, p, gguf, scale, tmp, True)
                    n = len(logits)
                    mean = sum(logits) / n
                    std = (sum((x - mean) ** 2 for x in logits) / n) ** 0.5
                    spread = max(abs(a - b) for a, b in zip(logits, logits_nofa)) / std
                    top = sorted(range(n), key=lambda k: -logits[k])[:TOP]
                    runs.append({
                        "scale": scale, "prompt": i,
                        "prompt_tokens": fx["prompt_tokens"], "steps": fx["steps"],
                        "top": [[k, logits[k]] for k in top], "logit_std": std,
                        "self_spread": spread,
                    })
            out_dir = os.path.join(FIX, name)
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "fixture.json"), "w") as f:
                json.dump({
                    "base": base, "rank": rank, "alpha": alpha, "seed": seed, "amplitude": amp,
                    "embed": embed,
                    "prompts": PROMPTS, "safetensors_sha256": sha,
                    "gguf_tensor_sha256": tensor_hashes(src, gguf), "runs": runs,
                }, f, indent=1)
                f.write("\n")
            print(f"{name}: done")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
