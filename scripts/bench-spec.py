#!/usr/bin/env python3
"""Speculative decoding, side by side: for each prompt of benchmarks/spec-prompts.json (`edit`:
small functions rewritten with a change; `file`: whole files of 40-60 lines with a small
change, which copy most of their input; `open`: open-ended prompts), greedy, up to N tokens (to the end of the reply), `-t 2`:
cera plain, cera --spec ngram, and llama.cpp's llama-lookup (prompt lookup) on the same
templated prompt, alternating per prompt. Prints decode tokens/s summed over the set
(total tokens / total decode time), the speedups and the acceptance rates.

usage: scripts/bench-spec.py [-m MODEL.gguf] [-n 256] [--set edit,file,open]
       [--draft MODEL.gguf]   (also cera --spec draft and llama-speculative with that draft)
"""
import argparse
import json
import os
import re
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CERA = os.path.join(ROOT, "target", "release", "cera")

CHATML = "<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def cera(model, prompt, n, spec, draft=None):
    args = [CERA, "run", "-m", model, "--raw", "-p", prompt, "-n", str(n), "--temp", "0", "-t", "2",
            "--spec", spec]
    if draft:
        args += ["-md", draft]
    err = subprocess.run(args, capture_output=True, text=True, check=True).stderr
    m = re.search(r"generated (\d+) tokens in ([\d.]+) ms", err)
    acc = re.search(r"drafted (\d+), accepted (\d+)", err)
    return int(m.group(1)), float(m.group(2)) / 1e3, (int(acc.group(1)), int(acc.group(2))) if acc else (0, 0)


def llama(bindir, tool, model, prompt, n, draft=None):
    args = [os.path.join(bindir, tool), "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "2",
            "--no-repack", "--spec-draft-n-max", "8"]
    if draft:
        args += ["-md", draft]
    out = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, LD_LIBRARY_PATH=bindir))
    text = out.stdout + out.stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", text)
    nd = re.search(r"n_drafted\s*=\s*(\d+)", text)
    na = re.search(r"n_accept\s*=\s*(\d+)", text)
    if not m:
        raise SystemExit(f"{tool} output not understood:\n{text[-2000:]}")
    return int(m.group(1)), float(m.group(2)), (int(nd.group(1)) if nd else 0, int(na.group(1)) if na else 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=os.path.expanduser("~/.cache/cera/models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"))
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--set", default="edit,file,open")
    ap.add_argument("--draft")
    a = ap.parse_args()
    bindir = subprocess.check_output(["bash", os.path.join(ROOT, "..", "shared", "tools", "build-llama-cpp.sh")], text=True).strip()
    sets = json.load(open(os.path.join(ROOT, "benchmarks", "spec-prompts.json")))
    for name in a.set.split(","):
        runs = {"cera plain": [], "cera ngram": [], "llama-lookup": []}
        if a.draft:
            runs["cera draft"] = []
            runs["llama-speculative"] = []
        for p in sets[name]:
            prompt = CHATML.format(p)
            runs["cera plain"].append(cera(a.model, prompt, a.n, "off"))
            runs["cera ngram"].append(cera(a.model, prompt, a.n, "ngram"))
            runs["llama-lookup"].append(llama(bindir, "llama-lookup", a.model, prompt, a.n))
            if a.draft:
                runs["cera draft"].append(cera(a.model, prompt, a.n, "draft", a.draft))
                runs["llama-speculative"].append(llama(bindir, "llama-speculative", a.model, prompt, a.n, a.draft))
        print(f"\n{name} prompts ({len(sets[name])}), {os.path.basename(a.model)}, greedy, {a.n} tokens, -t 2\n")
        print("| run | tokens | decode s | tok/s | vs cera plain | drafted | accepted | acceptance |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        base = None
        for k, rs in runs.items():
            toks = sum(r[0] for r in rs)
            secs = sum(r[1] for r in rs)
            d = sum(r[2][0] for r in rs)
            acc = sum(r[2][1] for r in rs)
            tps = toks / secs
            base = base or tps
            print(f"| {k} | {toks} | {secs:.2f} | {tps:.1f} | {tps / base:.2f}× | {d} | {acc} | "
                  f"{(100 * acc / d) if d else 0:.1f}% |")


if __name__ == "__main__":
    main()
