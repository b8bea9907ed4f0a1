"""Embeddings and LoRA adapters over HTTP: the `openai` client's embeddings.create (which asks
for base64 by default), the `ollama` client's embed, the older /api/embeddings, agreement with
`cera embed`, bad requests; and a server started with a LoRA adapter (written here with the
`gguf` package, as any tool would write one), whose replies equal `cera run --lora` and whose
per-request scale 0 equals the plain model."""
import json
import math
import os
import subprocess

import numpy as np
import ollama
import pytest
import requests
from openai import OpenAI

from conftest import BIN, ROOT, Server


def model_id(url):
    return requests.get(url + "/v1/models").json()["data"][0]["id"]


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def cera_embed(texts, pooling="mean", extra=()):
    out = subprocess.run(
        [BIN, "embed", "-m", "smollm2", "-p", "\n".join(texts), "--pooling", pooling,
         "--embd-output-format", "json", "-t", "2", *extra],
        capture_output=True, text=True, check=True).stdout
    return [d["embedding"] for d in json.loads(out)["data"]]


def test_openai_client_embeddings(client, server):
    texts = ["The castle stood on the hill.", "A dog barked."]
    m = model_id(server.url)
    r = client.embeddings.create(model=m, input=texts)
    assert [d.index for d in r.data] == [0, 1]
    vecs = [d.embedding for d in r.data]
    assert all(len(v) == 576 for v in vecs)
    assert all(abs(norm(v) - 1) < 1e-5 for v in vecs)
    assert r.usage.prompt_tokens == r.usage.total_tokens > 4
    # the float form equals the base64 form the client asked for
    f = client.embeddings.create(model=m, input=texts, encoding_format="float")
    assert np.allclose([d.embedding for d in f.data], vecs, atol=0)
    # and the CLI's vectors (printed with 7 decimals)
    cli = cera_embed(texts)
    assert np.allclose(cli, vecs, atol=1e-6)
    # token input
    toks = requests.post(server.url + "/tokenize", json={"content": texts[1], "add_special": True}).json()["tokens"]
    t = client.embeddings.create(model=m, input=toks, encoding_format="float")
    assert np.allclose(t.data[0].embedding, vecs[1], atol=1e-6)


def test_ollama_embed_and_legacy_embeddings(server):
    c = ollama.Client(host=server.url)
    m = model_id(server.url)
    r = c.embed(model=m, input=["hello there", "general kenobi"])
    assert len(r["embeddings"]) == 2 and len(r["embeddings"][0]) == 576
    assert abs(norm(r["embeddings"][0]) - 1) < 1e-5
    assert r["prompt_eval_count"] > 2
    one = c.embed(model=m, input="hello there")
    assert np.allclose(one["embeddings"][0], r["embeddings"][0], atol=1e-6)
    legacy = requests.post(server.url + "/api/embeddings", json={"model": m, "prompt": "hello there"}).json()
    v = legacy["embedding"]
    # the older endpoint returns the pooled vector as it is; normalized it is the same
    assert abs(norm(v) - 1) > 1e-3
    assert np.allclose(np.array(v) / norm(v), r["embeddings"][0], atol=1e-5)


def test_embedding_bad_requests(server):
    u = server.url + "/v1/embeddings"
    for body, param in [
        ({"input": []}, "input"),
        ({"input": [""]}, "input"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x", "dimensions": 64}, "dimensions"),
        ({"input": [[10 ** 9]]}, "input"),
        ({"input": "x", "lora": [{"id": 3, "scale": 1}]}, "lora"),
        ({"input": 5}, "input"),
    ]:
        r = requests.post(u, json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["param"] == param, (body, r.text)
    r = requests.post(u, json={"input": "x", "model": "other"})
    assert r.status_code == 404
    too_long = " ".join(["word"] * 9000)
    r = requests.post(u, json={"input": too_long})
    assert r.status_code == 400 and "context" in r.json()["error"]["message"]
    r = requests.post(server.url + "/api/embed", json={"input": too_long, "truncate": False})
    assert r.status_code == 400
    r = requests.post(server.url + "/api/embed", json={"input": too_long})
    assert r.status_code == 200 and r.json()["prompt_eval_count"] == 8192


def write_adapter(path):
    """A rank-8 adapter on every attention and FFN projection of SmolLM2, random weights."""
    import gguf
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(path, "llama")
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 16.0)
    dims = {"attn_q": (576, 576), "attn_k": (576, 192), "attn_v": (576, 192), "attn_output": (576, 576),
            "ffn_gate": (576, 1536), "ffn_up": (576, 1536), "ffn_down": (1536, 576)}
    r = 8
    for il in range(30):
        for name, (n_in, n_out) in dims.items():
            a = (rng.uniform(-1, 1, (r, n_in)) * 0.5 / math.sqrt(n_in)).astype(np.float32)
            b = (rng.uniform(-1, 1, (n_out, r)) * 0.5 / math.sqrt(r)).astype(np.float32)
            # numpy [rows, cols] is ggml [cols, rows]: lora_a [in, r], lora_b [r, out]
            w.add_tensor(f"blk.{il}.{name}.weight.lora_a", a)
            w.add_tensor(f"blk.{il}.{name}.weight.lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def adapter():
    path = os.path.join(ROOT, "target", "pytest-lora.gguf")
    write_adapter(path)
    return path


def cera_run(prompt, n, extra=()):
    return subprocess.run([BIN, "run", "-m", "smollm2", "-p", prompt, "-n", str(n), "--temp", "0", "-t", "2", *extra],
                          capture_output=True, text=True, check=True).stdout


def test_lora_server(server, adapter):
    s = Server("-np", "2", "-c", "4096", "--lora", adapter)
    try:
        listing = requests.get(s.url + "/lora-adapters").json()
        assert listing == [{"id": 0, "path": adapter, "scale": 1.0}]
        c = OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        m = model_id(s.url)
        msgs = [{"role": "user", "content": "Name three colors."}]
        with_lora = c.chat.completions.create(model=m, messages=msgs, max_tokens=24, temperature=0)
        # as the CLI with the same adapter
        assert with_lora.choices[0].message.content == cera_run("Name three colors.", 24, ["--lora", adapter])
        # scale 0 per request: the plain model, as the server without adapters replies
        off = c.chat.completions.create(model=m, messages=msgs, max_tokens=24, temperature=0,
                                        extra_body={"lora": [{"id": 0, "scale": 0.0}]})
        plain = OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0).chat.completions.create(
            model=m, messages=msgs, max_tokens=24, temperature=0)
        assert off.choices[0].message.content == plain.choices[0].message.content
        assert with_lora.choices[0].message.content != plain.choices[0].message.content
        # embeddings apply the adapter too, and scale 0 gives the plain ones
        e = c.embeddings.create(model=m, input="a castle", encoding_format="float").data[0].embedding
        e0 = c.embeddings.create(model=m, input="a castle", encoding_format="float",
                                 extra_body={"lora": [{"id": 0, "scale": 0.0}]}).data[0].embedding
        base = cera_embed(["a castle"])[0]
        assert np.allclose(e0, base, atol=1e-6)
        assert not np.allclose(e, base, atol=1e-3)
        assert np.allclose(e, cera_embed(["a castle"], extra=["--lora", adapter])[0], atol=1e-6)
    finally:
        s.stop()


def test_a_bad_adapter_fails_the_start(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 20)
    with pytest.raises(RuntimeError):
        Server("--lora", str(bad))
    r = subprocess.run([BIN, "run", "-m", "smollm2", "-p", "x", "-n", "1", "--lora", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "LoRA adapter" in r.stderr and "bad.gguf" in r.stderr


def test_rerank_endpoint():
    model = os.environ.get("CERA_RERANK_MODEL")
    assert model and os.path.exists(model), (
        "CERA_RERANK_MODEL must name a reranker GGUF: cargo run --release -p cera --example "
        "make_bert_model -- target/pytest-rerank.gguf rerank")
    docs = ["hi", "The giant panda is a bear species endemic to China.", "paris is in france", "Pandas eat bamboo."]
    s = Server("-np", "1", model=model)
    try:
        r = requests.post(s.url + "/v1/rerank", json={"query": "what is a panda?", "documents": docs, "top_n": 3,
                                                       "return_documents": True})
        assert r.status_code == 200, r.text
        res = r.json()["results"]
        assert len(res) == 3
        scores = [x["relevance_score"] for x in res]
        assert scores == sorted(scores, reverse=True)
        assert all(x["document"]["text"] == docs[x["index"]] for x in res)
        # the CLI gives the same scores
        path = os.path.join(ROOT, "target", "pytest-docs.txt")
        with open(path, "w") as f:
            f.write("\n".join(docs) + "\n")
        cli = json.loads(subprocess.run([BIN, "rerank", "-m", model, "-q", "what is a panda?", "-d", path, "--json"],
                                        capture_output=True, text=True, check=True).stdout)["results"]
        for a, b in zip(res, cli):
            assert a["index"] == b["index"] and abs(a["relevance_score"] - b["relevance_score"]) < 1e-6
        bad = requests.post(s.url + "/v1/rerank", json={"query": "q", "documents": []})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "documents"
        # an encoder does not generate
        g = requests.post(s.url + "/v1/completions", json={"prompt": "hello", "max_tokens": 2})
        assert g.status_code >= 400 and "embedding model" in g.text
    finally:
        s.stop()


def test_a_generative_model_is_not_a_reranker(server):
    r = requests.post(server.url + "/v1/rerank", json={"query": "q", "documents": ["d"]})
    assert r.status_code == 400 and "not a reranker" in r.json()["error"]["message"]
