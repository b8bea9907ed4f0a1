"""Serving behaviour: isolation of concurrent requests, a client that disconnects, memory over
many requests, the bounded queue, the API key, and shutdown. Bounded in count and time; all
traffic on loopback."""
import concurrent.futures as cf
import json
import signal
import subprocess
import threading
import time

import requests

from conftest import BIN, Server

PROMPTS = [f"Tell me one fact about the number {i}." for i in range(16)]


def greedy(server, content, max_tokens=24):
    r = requests.post(server.url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": max_tokens})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_isolation_16_concurrent_on_4_slots(server):
    alone = [greedy(server, p) for p in PROMPTS]
    with cf.ThreadPoolExecutor(16) as ex:
        together = list(ex.map(lambda p: greedy(server, p), PROMPTS))
    assert together == alone


def test_disconnect_frees_the_slot(server):
    before = server.metrics().get("cera_requests_cancelled_total", 0)
    r = requests.post(server.url + "/v1/chat/completions", stream=True, timeout=60, json={
        "messages": [{"role": "user", "content": "Write a very long essay about the sea."}],
        "stream": True, "max_tokens": 2000, "temperature": 0})
    n = 0
    for line in r.iter_lines():
        if line.startswith(b"data: "):
            n += 1
            if n == 5:
                break
    r.close()
    t0 = time.time()
    while time.time() - t0 < 1.0:
        m = server.metrics()
        if m.get("cera_requests_cancelled_total", 0) > before and m.get("cera_slots_busy", 1) == 0:
            break
        time.sleep(0.05)
    m = server.metrics()
    assert m["cera_requests_cancelled_total"] > before, "the cancel did not show within 1 s"
    assert m["cera_slots_busy"] == 0


def test_memory_is_flat_over_2000_requests(server):
    def one(i):
        r = requests.post(server.url + "/v1/completions", timeout=60,
                          json={"prompt": f"Item {i % 50}:", "max_tokens": 1, "temperature": 0})
        assert r.status_code == 200
    with cf.ThreadPoolExecutor(4) as ex:
        list(ex.map(one, range(100)))
        first = server.rss_kb()
        list(ex.map(one, range(100, 2000)))
    last = server.rss_kb()
    assert last <= first * 1.05, f"RSS grew from {first} kB to {last} kB"


def test_queue_full_is_503_with_retry_after():
    s = Server("-np", "1", "--max-queue", "1", "-c", "1024")
    try:
        body = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 64, "temperature": 0}
        with cf.ThreadPoolExecutor(6) as ex:
            rs = list(ex.map(lambda _: requests.post(s.url + "/v1/chat/completions", json=body, timeout=120), range(6)))
        codes = sorted(r.status_code for r in rs)
        assert 200 in codes and 503 in codes, codes
        refused = next(r for r in rs if r.status_code == 503)
        assert refused.headers["retry-after"] and refused.json()["error"]["message"]
    finally:
        s.stop()


def test_api_key():
    s = Server("-np", "1", "--api-key", "sekret", "-c", "1024")
    try:
        msg = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert requests.get(s.url + "/health").status_code == 200
        r = requests.post(s.url + "/v1/chat/completions", json=msg)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = requests.post(s.url + "/v1/chat/completions", json=msg, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = requests.post(s.url + "/v1/chat/completions", json=msg, headers={"Authorization": "Bearer sekret"})
        assert r.status_code == 200
        import openai
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="sekret", max_retries=0)
        assert c.models.list().data
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="nope", max_retries=0)
        try:
            bad.models.list()
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError:
            pass
    finally:
        s.stop()


def test_graceful_shutdown_finishes_in_flight():
    s = Server("-np", "1", "-c", "1024", "--shutdown-timeout", "30")
    out = {}

    def long_request():
        r = requests.post(s.url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "Write a story."}], "max_tokens": 48, "temperature": 0,
            "ignore_eos": True})
        out["status"] = r.status_code
        out["tokens"] = r.json()["usage"]["completion_tokens"]

    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGTERM)
    t.join(60)
    assert out.get("status") == 200, out
    assert s.proc.wait(timeout=30) == 0
    s.log.close()


def test_timeout_body_limit_and_cors():
    s = Server("-np", "1", "-c", "2048", "--timeout", "1", "--body-limit", "100000", "--cors", "https://app.example")
    try:
        # a generation past its time limit: 504 naming it, and the slot is free again
        r = requests.post(s.url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "Write a very long story."}],
            "max_tokens": 1500, "ignore_eos": True, "temperature": 0})
        assert r.status_code == 504, r.text
        assert "timed out" in r.json()["error"]["message"]
        r = requests.post(s.url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 200
        # a body over the limit is refused
        big = {"messages": [{"role": "user", "content": "x" * 200_000}]}
        assert requests.post(s.url + "/v1/chat/completions", json=big, timeout=60).status_code == 413
        # CORS: the preflight names the allowed origin
        r = requests.options(s.url + "/v1/chat/completions", headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        assert r.headers.get("access-control-allow-origin") == "https://app.example"
        r = requests.get(s.url + "/v1/models", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers
    finally:
        s.stop()


REPEATS = [
    "Repeat this sentence twice: the quick brown fox jumps over the lazy dog.",
    "Copy this list exactly: apples, pears, plums, cherries, apples, pears, plums, cherries.",
    "Write the numbers from 1 to 20 separated by commas.",
    "Say 'hello world' five times.",
]


def test_speculation_per_slot_keeps_the_replies(server):
    """`--spec ngram`: each slot drafts by prompt lookup and verifies in the batched step. The
    greedy replies (alone and 8 at a time on 4 slots, streamed or not, with a JSON schema) equal
    the plain server's, and /metrics counts what was drafted and kept."""
    spec = Server("-np", "4", "-c", "4096", "--spec", "ngram")
    try:
        prompts = REPEATS + PROMPTS[:4]
        want = [greedy(server, p, 48) for p in prompts]
        assert [greedy(spec, p, 48) for p in prompts] == want
        with cf.ThreadPoolExecutor(8) as ex:
            assert list(ex.map(lambda p: greedy(spec, p, 48), prompts)) == want
        # streamed
        r = requests.post(spec.url + "/v1/chat/completions", stream=True, timeout=120, json={
            "messages": [{"role": "user", "content": REPEATS[0]}], "stream": True,
            "max_tokens": 48, "temperature": 0})
        text = ""
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                d = json.loads(line[6:])
                if d["choices"]:
                    text += d["choices"][0]["delta"].get("content") or ""
        assert text == want[0]
        # a schema: drafts the grammar forbids are cut, the reply is the plain server's
        body = {"messages": [{"role": "user", "content": "Give a person as JSON: name and age."}],
                "temperature": 0, "max_tokens": 40,
                "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {
                    "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                    "required": ["name", "age"]}}}}
        a = requests.post(server.url + "/v1/chat/completions", json=body, timeout=120).json()
        b = requests.post(spec.url + "/v1/chat/completions", json=body, timeout=120).json()
        assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
        m = spec.metrics()
        assert m["cera_spec_drafted_tokens_total"] > 0
        assert 0 < m["cera_spec_accepted_tokens_total"] <= m["cera_spec_drafted_tokens_total"]
    finally:
        spec.stop()


def test_quantized_kv_cache_slots():
    """`-ctk q8_0 -ctv q4_0`: every slot holds a quantized, rotated cache; replies computed four
    at a time equal the same server's replies one at a time (the batched step reads each slot's
    own compressed cache), and an unknown cache type stops the server with a message naming it."""
    s = Server("-np", "4", "-c", "4096", "-ctk", "q8_0", "-ctv", "q4_0")
    try:
        alone = [greedy(s, p, 32) for p in PROMPTS[:8]]
        assert all(alone), alone
        with cf.ThreadPoolExecutor(8) as ex:
            together = list(ex.map(lambda p: greedy(s, p, 32), PROMPTS[:8]))
        assert together == alone
    finally:
        s.stop()
    bad = subprocess.run([BIN, "serve", "-m", "smollm2", "--port", "1", "-ctk", "q3_k"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "unsupported KV cache type 'q3_k'" in bad.stderr, bad.stderr
