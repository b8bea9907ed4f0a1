"""The Ollama API with plain HTTP, as Ollama's clients call it: /api/chat and /api/generate
streamed as NDJSON (the final line's counts and durations) and not, options, format json
and a schema, /api/tags, /api/show, /api/version."""
import json

import jsonschema
import requests


def name(server):
    return requests.get(server.url + "/api/tags").json()["models"][0]["name"]


def lines(r):
    return [json.loads(x) for x in r.iter_lines() if x]


def test_tags_show_version(server):
    tags = requests.get(server.url + "/api/tags").json()["models"]
    assert tags[0]["name"].endswith(":latest") and tags[0]["size"] > 0 and tags[0]["details"]["format"] == "gguf"
    show = requests.post(server.url + "/api/show", json={"model": tags[0]["name"]}).json()
    assert show["template"] and show["model_info"]["general.architecture"] == "llama"
    assert requests.get(server.url + "/api/version").json()["version"]
    r = requests.post(server.url + "/api/show", json={"model": "nonexistent"})
    assert r.status_code == 404


def test_chat_stream_and_final_counts(server):
    body = {"model": name(server), "messages": [{"role": "user", "content": "Name a color."}],
            "options": {"temperature": 0, "num_predict": 10}}
    with requests.post(server.url + "/api/chat", json=body, stream=True, timeout=60) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        out = lines(r)
    assert all(not x["done"] for x in out[:-1]) and out[-1]["done"]
    text = "".join(x["message"]["content"] for x in out)
    last = out[-1]
    assert last["eval_count"] == 10 and last["done_reason"] == "length"
    for k in ("total_duration", "prompt_eval_count", "prompt_eval_duration", "eval_duration", "created_at"):
        assert k in last
    whole = requests.post(server.url + "/api/chat", json={**body, "stream": False}).json()
    assert whole["done"] and whole["message"]["content"] == text


def test_generate_and_formats(server):
    body = {"model": name(server), "prompt": "Why is the sky blue?", "stream": False,
            "options": {"temperature": 0, "num_predict": 8, "seed": 3}}
    r = requests.post(server.url + "/api/generate", json=body).json()
    assert r["response"] and r["eval_count"] == 8
    r = requests.post(server.url + "/api/generate", json={**body, "raw": True, "prompt": "1, 2, 3,"}).json()
    assert r["response"]
    r = requests.post(server.url + "/api/generate", json={**body, "format": "json",
                                                       "options": {"temperature": 0, "num_predict": 80}}).json()
    json.loads(r["response"])
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 30}}, "required": ["answer"]}
    r = requests.post(server.url + "/api/chat", json={
        "model": name(server), "stream": False, "format": schema,
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        "options": {"temperature": 0, "num_predict": 80}}).json()
    jsonschema.validate(json.loads(r["message"]["content"]), schema)
    # an empty prompt loads the model
    r = requests.post(server.url + "/api/generate", json={"model": name(server)}).json()
    assert r["done"] and r["done_reason"] == "load"


def test_ollama_bad_input(server):
    r = requests.post(server.url + "/api/chat", data="{oops", headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = requests.post(server.url + "/api/chat", json={"model": name(server), "messages": [], "stream": False})
    assert r.status_code == 400
    r = requests.post(server.url + "/api/generate", json={"model": name(server), "prompt": "x", "format": 5})
    assert r.status_code == 400


def test_the_ollama_client(server):
    import ollama
    c = ollama.Client(host=server.url)
    model = c.list().models[0].model
    r = c.chat(model=model, messages=[{"role": "user", "content": "Hi!"}], options={"num_predict": 8, "temperature": 0})
    assert r["message"]["content"] and r["eval_count"] == 8
    parts = list(c.chat(model=model, messages=[{"role": "user", "content": "Hi!"}], stream=True,
                        options={"num_predict": 8, "temperature": 0}))
    assert len(parts) > 3 and parts[-1]["done"]
    assert "".join(p["message"]["content"] for p in parts) == r["message"]["content"]
    g = c.generate(model=model, prompt="Why is the sky blue?", options={"num_predict": 5})
    assert g["response"] and g["done"]
    assert c.show(model).details.format == "gguf"
