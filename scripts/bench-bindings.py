"""Decode speed through the Python bindings against `cera run`, interleaved in one process
tree: per round the CLI (its own decode tok/s), `Session.generate` whole, and streamed. The
Python legs count decode only, as the CLI does: the whole call's time minus a 1-token call's
(prompt and first token) for `generate`, first piece to last for the stream. Each Python leg
also reads the engine's own decode time of the same call (`Session.timings`), so the
bindings' overhead (Python-timed against engine-timed, one call) is told apart from the
engine's speed in this process against the CLI's (two processes: this VM's noise).

usage: python scripts/bench-bindings.py CERA_BIN MODEL N ROUNDS THREADS
"""

import re
import statistics
import subprocess
import sys
import time

import cera

cera_bin, model, n, rounds, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
PROMPT = "Once upon a time"
engine = cera.Engine(model, n_threads=threads)


def cli() -> float:
    out = subprocess.run([cera_bin, "run", "-m", model, "--raw", "--temp", "0", "-n", str(n), "--ignore-eos",
                          "-t", str(threads), "-p", PROMPT], check=True, capture_output=True, text=True)
    m = re.search(r"generated (\d+) tokens in ([\d.]+) ms", out.stderr)
    return int(m.group(1)) / (float(m.group(2)) / 1000)


inner = {"generate": [], "stream": []}


def whole() -> float:
    s = engine.session(n_ctx=n + 64)
    t = time.perf_counter()
    s.generate(PROMPT, max_tokens=1, temperature=0)
    first = time.perf_counter() - t
    s = engine.session(n_ctx=n + 64)
    t = time.perf_counter()
    s.generate(PROMPT, max_tokens=n, temperature=0)
    dt = time.perf_counter() - t - first
    got = len(s.tokens) - len(engine.tokenize(PROMPT))
    inner["generate"].append(s.timings["decode_tps"])
    return (got - 1) / dt


def streamed() -> float:
    s = engine.session(n_ctx=n + 64)
    st = s.generate(PROMPT, max_tokens=n, temperature=0, stream=True)
    next(st)
    t = time.perf_counter()
    for _ in st:
        pass
    dt = time.perf_counter() - t
    got = len(s.tokens) - len(engine.tokenize(PROMPT))
    inner["stream"].append(s.timings["decode_tps"])
    return (got - 1) / dt


whole()  # warm up: weights packed, pages in
inner["generate"].clear()
res = {"cli": [], "generate": [], "stream": []}
for r in range(rounds):
    for name, f in (("cli", cli), ("generate", whole), ("stream", streamed)):
        res[name].append(f())
    print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in res.items()), file=sys.stderr)
med = {k: statistics.median(v) for k, v in res.items()}
eng = {k: statistics.median(v) for k, v in inner.items()}
print(f"python  cli {med['cli']:.1f} tok/s; generate {med['generate']:.1f} ({med['generate'] / med['cli']:.3f}); "
      f"stream {med['stream']:.1f} ({med['stream'] / med['cli']:.3f})  [{model}, {n} tokens, -t {threads}, "
      f"medians of {rounds}]")
print(f"python  engine-timed in this process: generate {eng['generate']:.1f} tok/s "
      f"(Python-timed / engine-timed {med['generate'] / eng['generate']:.3f}), stream {eng['stream']:.1f} "
      f"({med['stream'] / eng['stream']:.3f}); engine here / cli {eng['generate'] / med['cli']:.3f}")
