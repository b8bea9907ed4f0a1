"""`cera.Llama` against what llama-cpp-python's users rely on: the same call arguments, the same
OpenAI-shaped dicts and stream chunks (checked against JSON Schemas of the OpenAI objects),
tool calls and `response_format` enforced, greedy text equal to the CLI's.
"""

import json
import os
import subprocess

import jsonschema
import pytest

import cera

SMOL = "smollm2-135m-instruct-q4_1"
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"

USAGE = {
    "type": "object",
    "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {k: {"type": "integer", "minimum": 0}
                   for k in ["prompt_tokens", "completion_tokens", "total_tokens"]},
}
TOOL_CALL = {
    "type": "object",
    "required": ["id", "type", "function"],
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "type": {"const": "function"},
        "function": {"type": "object", "required": ["name", "arguments"],
                     "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}}},
    },
}
COMPLETION = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices", "usage"],
    "properties": {
        "id": {"type": "string", "pattern": "^cmpl-"},
        "object": {"const": "text_completion"},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "choices": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["text", "index", "logprobs", "finish_reason"],
            "properties": {"text": {"type": "string"}, "index": {"type": "integer"},
                           "finish_reason": {"enum": ["stop", "length", None]}}}},
        "usage": USAGE,
    },
}
CHAT = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices", "usage"],
    "properties": {
        "id": {"type": "string", "pattern": "^chatcmpl-"},
        "object": {"const": "chat.completion"},
        "created": {"type": "integer"},
        "choices": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["index", "message", "finish_reason"],
            "properties": {
                "message": {"type": "object", "required": ["role", "content"], "properties": {
                    "role": {"const": "assistant"},
                    "content": {"type": ["string", "null"]},
                    "tool_calls": {"type": "array", "items": TOOL_CALL}}},
                "finish_reason": {"enum": ["stop", "length", "tool_calls"]}}}},
        "usage": USAGE,
    },
}
CHUNK = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        "object": {"const": "chat.completion.chunk"},
        "choices": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["index", "delta", "finish_reason"],
            "properties": {"delta": {"type": "object"},
                           "finish_reason": {"enum": ["stop", "length", "tool_calls", None]}}}},
    },
}
WEATHER = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}]


@pytest.fixture(scope="module")
def smol():
    return cera.Llama(model_path=SMOL, n_ctx=1024, n_threads=2, n_gpu_layers=-1, verbose=False)


@pytest.fixture(scope="module")
def qwen():
    return cera.Llama(model_path=QWEN, n_ctx=2048, n_threads=2)


def test_n_gpu_layers_picks_the_device(smol):
    """n_gpu_layers 0 (llama-cpp-python's default) is the CPU even where a GPU is usable; -1
    is where `Engine(device="auto")` runs (CI: the CPU, lavapipe being a software renderer)."""
    cpu = cera.Llama(model_path=SMOL, n_ctx=64, n_threads=2, verbose=False)
    assert cpu._engine.backend == "CPU"
    assert smol._engine.backend == cera.Engine(SMOL, n_threads=2, device="auto").backend
    with pytest.raises(ValueError, match="n_gpu_layers must be an integer"):
        cera.Llama(model_path=SMOL, n_gpu_layers="all")


def test_completion_shape_and_text(smol):
    prompt = "The capital of France is"
    out = smol.create_completion(prompt, max_tokens=24, temperature=0)
    jsonschema.validate(out, COMPLETION)
    cli = subprocess.run([os.environ["CERA_BIN"], "run", "-m", SMOL, "--raw", "--temp", "0",
                          "-n", "24", "-t", "2", "-p", prompt], check=True, capture_output=True)
    assert out["choices"][0]["text"] == cli.stdout.decode().rstrip("\n") or \
        out["choices"][0]["text"] == cli.stdout.decode()
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 24
    # __call__ is create_completion; streaming gives the same text in pieces
    assert smol(prompt, max_tokens=24, temperature=0)["choices"][0]["text"] == out["choices"][0]["text"]
    chunks = list(smol.create_completion(prompt, max_tokens=24, temperature=0, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == out["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    echo = smol.create_completion(prompt, max_tokens=4, temperature=0, echo=True)
    assert echo["choices"][0]["text"].startswith(prompt)


def test_chat_completion_and_stream(smol):
    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "Name a color."}]}]
    out = smol.create_chat_completion(messages=msgs, temperature=0, max_tokens=16)
    jsonschema.validate(out, CHAT)
    text = out["choices"][0]["message"]["content"]
    assert text
    chunks = list(smol.create_chat_completion(messages=msgs, temperature=0, max_tokens=16, stream=True))
    for c in chunks:
        jsonschema.validate(c, CHUNK)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == text
    assert chunks[-1]["choices"][0]["finish_reason"] == out["choices"][0]["finish_reason"]
    with pytest.raises(ValueError, match="role"):
        smol.create_chat_completion(messages=[{"role": "wizard", "content": "x"}])


def test_tool_calls(qwen):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    out = qwen.create_chat_completion(messages=msgs, tools=WEATHER, tool_choice="required",
                                      temperature=0, max_tokens=64)
    jsonschema.validate(out, CHAT)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    args = json.loads(call["function"]["arguments"])
    jsonschema.validate(args, WEATHER[0]["function"]["parameters"])
    # a named function, as llama-cpp-python's dict form; then the result goes back in
    named = qwen.create_chat_completion(
        messages=msgs, tools=WEATHER, temperature=0, max_tokens=64,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert named["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    follow = msgs + [choice["message"],
                     {"role": "tool", "tool_call_id": call["id"], "content": "18 C and sunny"}]
    after = qwen.create_chat_completion(messages=follow, tools=WEATHER, temperature=0, max_tokens=40)
    jsonschema.validate(after, CHAT)
    assert after["choices"][0]["message"]["content"]
    # streamed: the call arrives parsed, in delta.tool_calls
    chunks = list(qwen.create_chat_completion(messages=msgs, tools=WEATHER, tool_choice="required",
                                              temperature=0, max_tokens=64, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    streamed = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert streamed and streamed[0]["function"]["name"] == "get_weather"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_response_format(qwen):
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 24},
                             "age": {"type": "integer", "minimum": 0, "maximum": 150}},
              "required": ["name", "age"], "additionalProperties": False}
    msgs = [{"role": "user", "content": "Describe a person as JSON."}]
    for rf in [{"type": "json_object", "schema": schema},
               {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}]:
        out = qwen.create_chat_completion(messages=msgs, response_format=rf, temperature=0,
                                          max_tokens=200)
        jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), schema)
    out = qwen.create_chat_completion(messages=msgs, response_format={"type": "json_object"},
                                      temperature=0, max_tokens=200)
    assert isinstance(json.loads(out["choices"][0]["message"]["content"]), dict)
    with pytest.raises(ValueError, match="response_format"):
        qwen.create_chat_completion(messages=msgs, response_format={"type": "yaml"})


def test_embeddings_and_tokens(smol):
    e = smol.create_embedding(["a cat", "a dog"])
    assert e["object"] == "list" and len(e["data"]) == 2
    assert len(e["data"][0]["embedding"]) == 576
    toks = smol.tokenize(b"Hello world", add_bos=False)
    assert smol.detokenize(toks) == b"Hello world"
    assert smol.n_ctx() == 1024


def test_logprobs(smol):
    import math

    prompt = "The capital of France is"
    plain = smol.create_completion(prompt, max_tokens=12, temperature=0)["choices"][0]["text"]
    out = smol.create_completion(prompt, max_tokens=12, temperature=0, logprobs=3)
    c = out["choices"][0]
    assert c["text"] == plain, "asking for logprobs does not change the text"
    lp = c["logprobs"]
    assert set(lp) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert "".join(lp["tokens"]) == c["text"]
    assert lp["text_offset"][0] == len(prompt)
    assert all(b - a == len(t) for a, b, t in zip(lp["text_offset"], lp["text_offset"][1:], lp["tokens"]))
    for tok, l, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert l <= 0 and len(top) == 3 and tok in top
        assert top[tok] == max(top.values()), "greedy takes the most likely token"
        assert sum(math.exp(v) for v in top.values()) <= 1.0 + 1e-4
    # streamed: the same tokens and logprobs, spread over the chunks
    chunks = list(smol.create_completion(prompt, max_tokens=12, temperature=0, logprobs=3, stream=True))
    toks = [t for ch in chunks if ch["choices"][0]["logprobs"] for t in ch["choices"][0]["logprobs"]["tokens"]]
    lps = [x for ch in chunks if ch["choices"][0]["logprobs"] for x in ch["choices"][0]["logprobs"]["token_logprobs"]]
    assert toks == lp["tokens"]
    assert lps == pytest.approx(lp["token_logprobs"], abs=1e-6)
    with pytest.raises(ValueError, match="logprobs"):
        smol.create_completion(prompt, logprobs=50)

    # chat: OpenAI's `logprobs.content`
    msgs = [{"role": "user", "content": "Name a color."}]
    out = smol.create_chat_completion(messages=msgs, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
    content = out["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == out["choices"][0]["message"]["content"]
    for e in content:
        assert bytes(e["bytes"]) == e["token"].encode() and e["logprob"] <= 0
        assert len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["token"] == e["token"]
    streamed = list(smol.create_chat_completion(messages=msgs, max_tokens=8, temperature=0,
                                                logprobs=True, top_logprobs=2, stream=True))
    got = [e["token"] for ch in streamed if ch["choices"][0]["logprobs"]
           for e in ch["choices"][0]["logprobs"]["content"]]
    assert got == [e["token"] for e in content]
    assert smol.create_chat_completion(messages=msgs, max_tokens=4, temperature=0)["choices"][0]["logprobs"] is None
