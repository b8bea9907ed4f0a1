#!/usr/bin/env python3
"""Writes the `kv_cache_types` part of crates/cera-cli/tests/fixtures/perplexity.json from
llama-perplexity, for the test `kv_cache_types_match_llama_cpp`.

It runs SmolLM2 over the first 4 chunks of 512 tokens of the GPL-3 text once with an f16 cache
(saving its logits with --kl-divergence-base), then once per quantized cache type with
--kl-divergence against those logits, and keeps what llama-perplexity prints for each: the
perplexity, ln(PPL(Q)/PPL(base)) and the mean KL divergence from the f16 run, each with the
standard error llama-perplexity gives. Those errors are what the test's bounds are made of: the
same engine on two CPUs (other summation orders, so other roundings of the q8_1 activations and
the 4-bit cache) lands a whole standard error or two apart.

usage: scripts/gen-kv-perplexity-fixture.py
Needs llama.cpp built by ../shared/tools/build-llama-cpp.sh (not needed by CI).
"""
import json
import os
import platform
import re
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "crates", "cera-cli", "tests", "fixtures", "perplexity.json")
MODEL = os.path.expanduser("~/.cache/cera/models/SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = "/usr/share/common-licenses/GPL-3"
CHUNKS = 4
# (cache type, Hadamard rotation on)
CASES = [("q8_0", True), ("q4_0", True), ("q4_0", False)]
ARGS = ["-c", "512", "-t", "2", "--no-repack", "-fa", "on", "--chunks", str(CHUNKS)]


def cpu_name():
    with open("/proc/cpuinfo") as f:
        info = f.read()
    name = re.search(r"model name\s*:\s*(.*)", info)
    flags = re.search(r"flags\s*:\s*(.*)", info).group(1).split()
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{name.group(1).strip() if name else platform.machine()} ({simd})"


def run(bindir, args, env_extra):
    env = dict(os.environ, LD_LIBRARY_PATH=bindir, **env_extra)
    out = subprocess.run(
        [os.path.join(bindir, "llama-perplexity"), "-m", MODEL, "-f", TEXT] + ARGS + args,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout + out.stderr


def stat(text, label):
    """`label : value ± error` from llama-perplexity's KL summary."""
    m = re.search(re.escape(label) + r"\s*:\s*(-?[0-9.]+)\s*±\s*([0-9.]+)", text)
    if not m:
        raise SystemExit(f"no '{label}' in llama-perplexity's output:\n{text[-3000:]}")
    return float(m.group(1)), float(m.group(2))


def main():
    bindir = subprocess.run(
        [os.path.join(HERE, "..", "..", "shared", "tools", "build-llama-cpp.sh")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base.kld")
        out = run(bindir, ["--kl-divergence-base", base], {})
        ppl_base = float(re.search(r"Final estimate: PPL = ([0-9.]+)", out).group(1))
        cases = []
        for ty, rotate in CASES:
            env = {} if rotate else {"LLAMA_ATTN_ROT_DISABLE": "1"}
            out = run(
                bindir,
                ["-ctk", ty, "-ctv", ty, "--kl-divergence-base", base, "--kl-divergence"],
                env,
            )
            ppl, _ = stat(out, "Mean PPL(Q)")
            ln_ratio, ln_err = stat(out, "Mean ln(PPL(Q)/PPL(base))")
            kld, kld_err = stat(out, "Mean    KLD")
            cases.append(
                {
                    "type": ty,
                    "rotate": rotate,
                    "ppl": ppl,
                    "ln_ppl_ratio": ln_ratio,
                    "ln_ppl_ratio_err": ln_err,
                    "kld": kld,
                    "kld_err": kld_err,
                }
            )
            print(ty, "rotation", "on" if rotate else "off", cases[-1])
    with open(FIX) as f:
        fx = json.load(f)
    fx["kv_cache_types"] = {
        "model": "smollm2-135m-instruct-q4_1",
        "file": TEXT,
        "n_ctx": 512,
        "chunks": CHUNKS,
        "tool": "llama-perplexity (llama.cpp 11434) " + " ".join(ARGS)
        + " -ctk T -ctv T --kl-divergence against an f16 run's --kl-divergence-base"
        + " (LLAMA_ATTN_ROT_DISABLE=1 for rotation off)",
        "cpu": cpu_name(),
        "ppl_base": ppl_base,
        "cases": cases,
    }
    with open(FIX, "w") as f:
        json.dump(fx, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
