#!/usr/bin/env python3
"""Load benchmark: `cera serve` against `llama-server`, same model, same slots, same prompts.

For each concurrency level, N streaming chat requests (greedy, a fixed number of generated
tokens with ignore_eos, so both do the same work) are sent with that many in flight; measured:
aggregate output tokens/s (all tokens over the wall time of the level), time to first token
and inter-token latency (p50, p99, from the SSE chunks as the client sees them), errors.
The two servers alternate level by level, several rounds; the table shows medians.

usage: scripts/bench-serve.py [-m MODEL.gguf] [-np 4] [-c 8192] [-t 2] [--levels 1,4,8]
       [--requests 8,16,32] [--max-tokens 64] [--rounds 3] [--cera-bin BIN] [--peer-cera BIN]
--peer-cera compares against another `cera` binary (a build of an earlier commit, for a
before/after table) instead of llama-server.
Needs llama.cpp built by ../shared/tools/build-llama-cpp.sh and `cargo build --release -p
cera-cli`. Only loopback traffic.
"""
import argparse
import concurrent.futures as cf
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TOPICS = ["the sea", "mountains", "a small town", "the moon", "trains", "bread", "rain", "music",
          "a library", "winter", "bees", "a lighthouse", "rivers", "chess", "a garden", "clocks"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=180):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.returncode}")
        try:
            r = requests.get(url + "/health", timeout=2)
            if r.status_code == 200 and r.json().get("status") == "ok":
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise SystemExit("server not ready")


def one(url, i, max_tokens):
    body = {"messages": [{"role": "user", "content": f"Write a short paragraph about {TOPICS[i % len(TOPICS)]} (request {i})."}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    times, n_tokens, err = [], 0, None
    try:
        with requests.post(url + "/v1/chat/completions", json=body, stream=True, timeout=600) as r:
            if r.status_code != 200:
                return None, [], 0, f"HTTP {r.status_code}"
            for line in r.iter_lines():
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                ch = json.loads(line[6:])
                if ch.get("usage"):
                    n_tokens = ch["usage"]["completion_tokens"]
                for c in ch.get("choices", []):
                    if c.get("delta", {}).get("content"):
                        times.append(time.perf_counter())
    except requests.RequestException as e:
        err = str(e)
    ttft = times[0] - t0 if times else None
    itl = [b - a for a, b in zip(times, times[1:])]
    return ttft, itl, n_tokens, err


def level(url, conc, n_req, max_tokens):
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(conc) as ex:
        res = list(ex.map(lambda i: one(url, i, max_tokens), range(n_req)))
    wall = time.perf_counter() - t0
    ttfts = [r[0] for r in res if r[0] is not None]
    itls = [x for r in res for x in r[1]]
    toks = sum(r[2] for r in res)
    errs = sum(1 for r in res if r[3])
    return {"tps": toks / wall, "ttft": ttfts, "itl": itls, "errors": errs, "tokens": toks}


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=os.path.expanduser("~/.cache/cera/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-np", type=int, default=4)
    ap.add_argument("-c", type=int, default=8192)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--levels", default="1,4,8")
    ap.add_argument("--requests", default="8,16,32")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cera-bin", default=os.path.join(ROOT, "target", "release", "cera"))
    ap.add_argument("--peer-cera", help="another cera binary to compare with, instead of llama-server")
    a = ap.parse_args()
    cp, lp = free_port(), free_port()

    def cera_serve(binary, port):
        return subprocess.Popen([binary, "serve", "-m", a.model, "--port", str(port), "-np", str(a.np), "-c", str(a.c),
                                 "-t", str(a.t), "--no-access-log"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    cera = cera_serve(a.cera_bin, cp)
    if a.peer_cera:
        peer_name = "peer"
        llama = cera_serve(a.peer_cera, lp)
    else:
        peer_name = "llama.cpp"
        bindir = subprocess.check_output(["bash", os.path.join(ROOT, "..", "shared", "tools", "build-llama-cpp.sh")],
                                         text=True).strip()
        env = dict(os.environ, LD_LIBRARY_PATH=bindir)
        llama = subprocess.Popen([os.path.join(bindir, "llama-server"), "-m", a.model, "--port", str(lp), "--host",
                                  "127.0.0.1", "-np", str(a.np), "-c", str(a.c), "-t", str(a.t), "--no-repack",
                                  "--no-webui"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        servers = {"cera": f"http://127.0.0.1:{cp}", peer_name: f"http://127.0.0.1:{lp}"}
        for name, url in servers.items():
            wait_ready(url, cera if name == "cera" else llama)
            level(url, 2, 2, 8)  # warm up
        levels = [int(x) for x in a.levels.split(",")]
        nreq = [int(x) for x in a.requests.split(",")]
        results = {(s, c): [] for s in servers for c in levels}
        for rnd in range(a.rounds):
            for c, n in zip(levels, nreq):
                order = list(servers) if rnd % 2 == 0 else list(reversed(servers))
                for s in order:
                    results[(s, c)].append(level(servers[s], c, n, a.max_tokens))
                    print(f"round {rnd} c={c} {s}: {results[(s, c)][-1]['tps']:.1f} tok/s", file=sys.stderr)
        print(f"model {os.path.basename(a.model)}, -np {a.np}, -c {a.c}, -t {a.t}, {a.max_tokens} tokens per request "
              f"(ignore_eos), {a.rounds} rounds interleaved, medians\n")
        print("| concurrency | server | requests | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | errors |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for c, n in zip(levels, nreq):
            for s in servers:
                rs = results[(s, c)]
                med = lambda f: statistics.median(f(r) for r in rs)
                print(f"| {c} | {s} | {n} | {med(lambda r: r['tps']):.1f} | {med(lambda r: pct(r['ttft'], 50)) * 1e3:.0f} | "
                      f"{med(lambda r: pct(r['ttft'], 99)) * 1e3:.0f} | {med(lambda r: pct(r['itl'], 50)) * 1e3:.1f} | "
                      f"{med(lambda r: pct(r['itl'], 99)) * 1e3:.1f} | {sum(r['errors'] for r in rs)} |")
            a_ = statistics.median(r["tps"] for r in results[("cera", c)])
            b_ = statistics.median(r["tps"] for r in results[(peer_name, c)])
            print(f"| {c} | ratio | | {a_ / b_:.2f}× | | | | | |")
    finally:
        for p in (cera, llama):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
