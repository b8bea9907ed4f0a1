#!/usr/bin/env python3
"""Writes the embedding fixtures from llama.cpp's llama-embedding for crates/cera/tests/embed.rs.

For each real model and each pooling (none, mean, cls, last) this runs
  llama-embedding -m MODEL -p TEXTS --pooling P --embd-normalize N --embd-output-format json
with the texts below (one per line), twice: as is (flash attention auto) and with -fa off, and
stores both sets of vectors, so the test knows llama.cpp's own spread between its attention
paths. Output: crates/cera/tests/fixtures/embed/<model>.json

usage: scripts/gen-embedding-fixtures.py
Needs llama.cpp built by ../shared/tools/build-llama-cpp.sh (not needed by CI).
"""
import json
import re
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "crates", "cera", "tests", "fixtures", "embed")
MODELS = os.path.expanduser("~/.cache/cera/models")
TARGETS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen": "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
    # a random-weight BERT at the bge-small shape with the bge vocabulary, written by
    # `cargo run --example make_bert_model` (the test rebuilds it and checks the hash)
    "bge_small": None,
}
TEXTS = [
    "Castle",
    "A stronghold on the hill above the river",
    "The dog chased the cat around the garden.",
    "fn main() { println!(\"hello\"); }",
]
# (pooling, normalize, texts used)
RUNS = [("mean", 2, 4), ("cls", 2, 4), ("last", 2, 4), ("none", 2, 2), ("mean", -1, 2)]
# the encoder: its own pooling (cls, from the file) too
BERT_RUNS = [(None, 2, 4), ("mean", 2, 4), ("none", 2, 2), ("cls", -1, 2)]


def bindir() -> str:
    return subprocess.check_output(["bash", os.path.join(HERE, "..", "..", "shared", "tools", "build-llama-cpp.sh")], text=True).strip()


def embed(bin_dir: str, model: str, pooling: str, norm: int, texts: list, fa_off: bool) -> list:
    cmd = [os.path.join(bin_dir, "llama-embedding"), "-m", model, "-p", "\n".join(texts),
           "--embd-normalize", str(norm), "--embd-output-format", "json", "-t", "2", "--no-repack"]
    if pooling is not None:
        cmd += ["--pooling", pooling]
    if fa_off:
        cmd += ["-fa", "off"]
    env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
    # llama.cpp's logger writes from a thread of its own; now and then a run's JSON comes out
    # garbled, so a run that does not parse is repeated
    for attempt in range(5):
        out = subprocess.check_output(cmd, env=env, text=True, stderr=subprocess.DEVNULL)
        try:
            data = json.loads(out[out.index("{"):out.rindex("}") + 1])["data"]
            return [d["embedding"] for d in data]
        except (ValueError, KeyError):
            if attempt == 4:
                raise


QUERY = "what is a panda?"
DOCS = ["hi", "The giant panda is a bear species endemic to China.", "paris is in france",
        "Pandas eat bamboo."]


def rerank_fixture(b: str) -> None:
    """The reranker (the same BERT with a classifier head): llama-embedding --pooling rank
    --embd-normalize -1 over query<TAB>document lines; the score is each output's first value
    (llama-embedding prints the pooled buffer's width; a reranker fills the first)."""
    model = os.path.join(tempfile.mkdtemp(prefix="cera-bert-"), "rerank.gguf")
    sha = subprocess.check_output(
        ["cargo", "run", "-q", "--release", "-p", "cera", "--example", "make_bert_model", "--", model, "rerank"],
        cwd=os.path.join(HERE, ".."), text=True).strip()
    texts = [f"{QUERY}\t{d}" for d in DOCS]

    def scores(fa_off: bool) -> list:
        # the values past the first are whatever the buffer held (not always valid JSON), so
        # only each embedding's first number is read
        cmd = [os.path.join(b, "llama-embedding"), "-m", model, "-p", "\n".join(texts), "--pooling", "rank",
               "--embd-normalize", "-1", "--embd-output-format", "json", "-t", "2", "--no-repack"]
        if fa_off:
            cmd += ["-fa", "off"]
        out = subprocess.check_output(cmd, env=dict(os.environ, LD_LIBRARY_PATH=b), text=True,
                                      stderr=subprocess.DEVNULL)
        got = [float(x) for x in re.findall(r'"embedding": \[([-0-9.e+]+)', out)]
        assert len(got) == len(texts), out[:500]
        return got

    on, off = scores(False), scores(True)
    with open(os.path.join(FIX, "bge_small_rerank.json"), "w") as f:
        json.dump({"sha256": sha, "query": QUERY, "documents": DOCS, "scores": on, "scores_fa_off": off}, f, indent=1)
        f.write("\n")
    print("bge_small_rerank: done")


def cosine(a: list, b: list) -> float:
    ab = sum(x * y for x, y in zip(a, b))
    aa = sum(x * x for x in a) ** 0.5
    bb = sum(y * y for y in b) ** 0.5
    return ab / (aa * bb)


def main() -> None:
    b = bindir()
    os.makedirs(FIX, exist_ok=True)
    for name, file in TARGETS.items():
        meta = {"model": file}
        runs_plan = RUNS
        if file is None:
            model = os.path.join(tempfile.mkdtemp(prefix="cera-bert-"), f"{name}.gguf")
            sha = subprocess.check_output(
                ["cargo", "run", "-q", "--release", "-p", "cera", "--example", "make_bert_model", "--", model],
                cwd=os.path.join(HERE, ".."), text=True).strip()
            meta = {"model": None, "sha256": sha}
            runs_plan = BERT_RUNS
        else:
            model = os.path.join(MODELS, file)
        runs = []
        for pooling, norm, n in runs_plan:
            texts = TEXTS[:n]
            on = embed(b, model, pooling, norm, texts, False)
            off = embed(b, model, pooling, norm, texts, True)
            runs.append({
                "pooling": pooling, "normalize": norm, "texts": texts, "vectors": on,
                "self_cosine": [cosine(x, y) for x, y in zip(on, off)],
            })
        with open(os.path.join(FIX, f"{name}.json"), "w") as f:
            json.dump({**meta, "runs": runs}, f)
            f.write("\n")
        print(f"{name}: done")
    rerank_fixture(b)


if __name__ == "__main__":
    main()
