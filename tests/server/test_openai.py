"""The OpenAI API through the official `openai` Python client (and `requests` for what the
client hides): chat completions streamed and not, usage, token limits, stop strings, seeds,
logprobs, logit bias, response_format (json_object, json_schema checked with `jsonschema`),
tools with named and required tool choices (streamed as OpenAI deltas too), completions,
models, and the 4xx answers to bad input."""
import json

import jsonschema
import openai
import pytest
import requests

GREEDY = {"temperature": 0, "max_tokens": 24}


def chat(client, content, **kw):
    args = dict(GREEDY)
    args.update(kw)
    return client.chat.completions.create(
        model=client.models.list().data[0].id,
        messages=[{"role": "user", "content": content}], **args)


def test_models(client):
    ms = client.models.list().data
    assert len(ms) == 1 and ms[0].object == "model" and ms[0].id
    m = client.models.retrieve(ms[0].id)
    assert m.id == ms[0].id


def test_chat_basic_and_usage(client):
    r = chat(client, "What is the capital of France?")
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")


def test_max_tokens_and_max_completion_tokens(client):
    r = chat(client, "Write a long story about a dragon.", max_tokens=5)
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"
    r = client.chat.completions.create(
        model=client.models.list().data[0].id, temperature=0, max_completion_tokens=3,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}])
    assert r.usage.completion_tokens == 3


def test_streaming_equals_non_streaming(client):
    whole = chat(client, "Name three fruits.").choices[0].message.content
    pieces, finish, usage = [], None, None
    stream = client.chat.completions.create(
        model=client.models.list().data[0].id, messages=[{"role": "user", "content": "Name three fruits."}],
        stream=True, stream_options={"include_usage": True}, **GREEDY)
    for ch in stream:
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    assert "".join(pieces) == whole
    assert finish in ("stop", "length")
    assert usage is not None and usage.completion_tokens > 0


def test_stop_strings(client):
    free = chat(client, "Count from 1 to 10, separated by commas.", max_tokens=40).choices[0].message.content
    assert "3" in free
    r = chat(client, "Count from 1 to 10, separated by commas.", max_tokens=40, stop=["3"])
    assert "3" not in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"
    assert free.startswith(r.choices[0].message.content)


def test_seed_reproducible(client):
    kw = {"temperature": 1.0, "top_p": 0.95, "max_tokens": 20}
    a = chat(client, "Invent a name for a cat.", seed=42, **kw).choices[0].message.content
    b = chat(client, "Invent a name for a cat.", seed=42, **kw).choices[0].message.content
    assert a == b


def test_logprobs(client):
    r = chat(client, "Say yes.", logprobs=True, top_logprobs=3, max_tokens=6)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    for t in lp:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        tops = [x.logprob for x in t.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        # greedy: the chosen token is the most likely one
        assert abs(t.logprob - tops[0]) < 1e-4


def test_logit_bias_bans_a_token(client, server):
    r = chat(client, "What is the capital of France?", logprobs=True, top_logprobs=1, max_tokens=1)
    first = r.choices[0].logprobs.content[0].token
    tid = requests.post(server.url + "/tokenize", json={"content": first}).json()["tokens"]
    assert len(tid) == 1
    r2 = chat(client, "What is the capital of France?", max_tokens=1, logit_bias={str(tid[0]): -100})
    assert r2.choices[0].message.content != r.choices[0].message.content


def test_penalties_and_extensions_accepted(client, server):
    r = chat(client, "Repeat the word cat many times.", presence_penalty=1.5, frequency_penalty=1.0, max_tokens=16)
    assert r.choices[0].message.content
    r = requests.post(server.url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "top_k": 1, "min_p": 0.1, "max_tokens": 4})
    assert r.status_code == 200, r.text


def test_json_object(client):
    r = chat(client, "Describe a cat as a JSON object.", response_format={"type": "json_object"}, max_tokens=120)
    json.loads(r.choices[0].message.content)


def test_json_schema_validated(client):
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 15}, "legs": {"type": "integer", "minimum": 0, "maximum": 8},
        "color": {"enum": ["black", "white", "orange"]}}, "required": ["name", "legs", "color"],
        "additionalProperties": False}
    for seed in (1, 2, 3):
        r = chat(client, "Describe a cat.", temperature=0.8, seed=seed, max_tokens=120,
                 response_format={"type": "json_schema", "json_schema": {"name": "cat", "schema": schema}})
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_invalid_schema_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, "x", response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}})
    assert "schema" in str(e.value).lower()


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_named_tool_choice(client):
    r = chat(client, "What is the weather in Paris?", tools=WEATHER, max_tokens=60,
             tool_choice={"type": "function", "function": {"name": "get_weather"}})
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    assert isinstance(json.loads(call.function.arguments)["city"], str)


def test_required_tool_choice_streamed(client):
    kw = dict(model=client.models.list().data[0].id, messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
              tools=WEATHER, tool_choice="required", temperature=0, max_tokens=60)
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls
    assert whole and whole[0].function.name in ("get_weather", "get_time")
    calls, finish = {}, None
    for ch in client.chat.completions.create(stream=True, **kw):
        for c in ch.choices:
            for d in c.delta.tool_calls or []:
                cur = calls.setdefault(d.index, {"id": None, "name": None, "args": ""})
                if d.id:
                    assert cur["id"] is None, "the id comes once, in the first chunk of the call"
                    cur["id"] = d.id
                    assert d.type == "function" and d.function.name
                    cur["name"] = d.function.name
                if d.function and d.function.arguments:
                    cur["args"] += d.function.arguments
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert calls[0]["name"] == whole[0].function.name
    assert json.loads(calls[0]["args"]) == json.loads(whole[0].function.arguments)


def test_tool_result_round_trip(client):
    model = client.models.list().data[0].id
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=model, messages=msgs, tools=WEATHER, temperature=0, max_tokens=60,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = r.choices[0].message.tool_calls[0]
    msgs.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
    msgs.append({"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 18}'})
    r = client.chat.completions.create(model=model, messages=msgs, tools=WEATHER, tool_choice="none",
                                       temperature=0, max_tokens=30)
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls


def test_completions(client):
    model = client.models.list().data[0].id
    r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0,
                                  logprobs=2)
    c = r.choices[0]
    assert c.text and r.usage.completion_tokens == 8 and c.finish_reason == "length"
    assert len(c.logprobs.tokens) == 8 and len(c.logprobs.top_logprobs[0]) == 2
    text = "".join(ch.choices[0].text for ch in client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True) if ch.choices)
    assert text == c.text
    r = client.completions.create(model=model, prompt="Hi", max_tokens=2, temperature=0, echo=True)
    assert r.choices[0].text.startswith("Hi")


def post(server, path, body, **kw):
    return requests.post(server.url + path, data=body if isinstance(body, (str, bytes)) else json.dumps(body),
                         headers={"content-type": "application/json"}, timeout=60, **kw)


def err(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert e["message"] and e["type"]
    return e["message"]


def test_bad_requests(server):
    msg = [{"role": "user", "content": "hi"}]
    err(post(server, "/v1/chat/completions", "{not json"), 400)
    err(post(server, "/v1/chat/completions", ""), 400)
    assert "temperature" in err(post(server, "/v1/chat/completions", {"messages": msg, "temperature": "hot"}), 400)
    assert "messages" in err(post(server, "/v1/chat/completions", {"messages": "hi"}), 400)
    err(post(server, "/v1/chat/completions", {"messages": []}), 400)
    err(post(server, "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}), 400)
    # n > 1 is served (test_n_choices); out of range it is not
    assert "n is 0" in err(post(server, "/v1/chat/completions", {"messages": msg, "n": 0}), 400)
    err(post(server, "/v1/chat/completions", {"messages": msg, "n": 17}), 400)
    assert "best_of" in err(post(server, "/v1/completions", {"prompt": "a", "n": 3, "best_of": 2}), 400)
    assert "stream" in err(post(server, "/v1/completions", {"prompt": "a", "best_of": 2, "stream": True}), 400)
    err(post(server, "/v1/chat/completions", {"messages": msg, "temperature": 7}), 400)
    # the core's ranges, named (one check for every front end)
    assert "min_p" in err(post(server, "/v1/chat/completions", {"messages": msg, "min_p": 5}), 400)
    assert "repeat_penalty" in err(post(server, "/v1/completions", {"prompt": "a", "repeat_penalty": -1}), 400)
    assert "top_p" in err(post(server, "/api/generate", {"model": requests.get(server.url + "/api/tags").json()["models"][0]["name"], "prompt": "a", "stream": False, "options": {"top_p": 3}}), 400)
    err(post(server, "/v1/chat/completions", {"messages": msg, "logit_bias": {"abc": 1}}), 400)
    err(post(server, "/v1/chat/completions", {"messages": msg, "tool_choice": "required"}), 400)
    err(post(server, "/v1/chat/completions", {"messages": msg, "tools": WEATHER,
                                             "tool_choice": {"type": "function", "function": {"name": "nope"}}}), 400)
    assert "not served" in err(post(server, "/v1/chat/completions", {"model": "gpt-17", "messages": msg}), 404)
    err(requests.get(server.url + "/v1/nothing-here"), 404)
    # a prompt over the context: both counts named, nothing truncated
    long = "word " * 3000
    m = err(post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": long}]}), 400)
    assert "2048" in m and "tokens" in m
    m = err(post(server, "/v1/completions", {"prompt": [999999999]}), 400)
    assert "vocabulary" in m
    # the server is still fine
    assert post(server, "/v1/chat/completions", {"messages": msg, "max_tokens": 2}).status_code == 200


def test_tokenize_detokenize_metrics(server):
    t = post(server, "/tokenize", {"content": "Hello world"}).json()["tokens"]
    assert t and post(server, "/detokenize", {"tokens": t}).json()["content"] == "Hello world"
    m = requests.get(server.url + "/metrics").text
    for name in ("cera_requests_total", "cera_time_to_first_token_seconds_bucket", "cera_inter_token_latency_seconds",
                 "cera_queue_depth", "cera_slots_busy", "cera_kv_cache_tokens", "cera_prompt_tokens_total",
                 "cera_generated_tokens_total"):
        assert name in m, name
    assert 'endpoint="/v1/chat/completions",status="200"' in m


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_call_at_every_token_limit(client, choice):
    """A forced call on SmolLM2 runs on inside its argument string when nothing stops it; the
    grammar keeps room to close the call before the limit, and a reply the limit still cuts is
    a 200 with finish_reason "length" (never a 500)."""
    model = client.models.list().data[0].id
    prompts = ["What is the weather in Paris?", "Tell me a long story about the weather in every city of Europe."]
    for prompt in prompts:
        for max_tokens in (8, 64, 200):
            kw = dict(model=model, messages=[{"role": "user", "content": prompt}], tools=WEATHER,
                      tool_choice=choice, max_tokens=max_tokens, temperature=0.7, seed=max_tokens)
            c = client.chat.completions.create(**kw).choices[0]
            if c.finish_reason == "length":
                assert not c.message.tool_calls
                assert max_tokens < 64, f"the call was not closed within {max_tokens} tokens: {c.message.content!r}"
            else:
                assert c.finish_reason == "tool_calls", (prompt, max_tokens, c)
                call = c.message.tool_calls[0]
                assert isinstance(json.loads(call.function.arguments)["city"], str)
            finish = None
            for ch in client.chat.completions.create(stream=True, **kw):
                for d in ch.choices:
                    finish = d.finish_reason or finish
            assert finish in ("length", "tool_calls")


def test_n_choices(client):
    """n choices are sampled after one prefill (forks of the prompt's context), each with its
    own seed: a repeat with the same seed gives the same choices, streamed or not; greedy
    choices are all the same."""
    model = client.models.list().data[0].id
    kw = dict(model=model, messages=[{"role": "user", "content": "Write a poem about the sea."}],
              max_tokens=16, temperature=1.0, seed=5)
    r = client.chat.completions.create(n=3, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.message.content for c in r.choices]
    assert all(texts) and len(set(texts)) > 1, texts
    assert 3 <= r.usage.completion_tokens <= 3 * 16
    again = client.chat.completions.create(n=3, **kw)
    assert [c.message.content for c in again.choices] == texts
    streamed = {}
    finishes = {}
    for ch in client.chat.completions.create(n=3, stream=True, **kw):
        for c in ch.choices:
            streamed[c.index] = streamed.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    assert [streamed[i] for i in range(3)] == texts
    assert set(finishes) == {0, 1, 2}
    greedy = client.chat.completions.create(n=2, **dict(kw, temperature=0))
    assert greedy.choices[0].message.content == greedy.choices[1].message.content


def test_completions_best_of(client):
    model = client.models.list().data[0].id
    kw = dict(model=model, prompt="The best thing about mornings is", max_tokens=12, temperature=1.0, seed=9)
    five = client.completions.create(n=5, logprobs=0, **kw).choices
    total = [sum(c.logprobs.token_logprobs) for c in five]
    best = client.completions.create(n=2, best_of=5, logprobs=0, **kw).choices
    assert len(best) == 2
    # the two likeliest of the same five candidates, likeliest first
    ranked = sorted(range(5), key=lambda i: -total[i])
    assert [c.text for c in best] == [five[i].text for i in ranked[:2]]
    plain = client.completions.create(n=1, best_of=3, **kw).choices
    assert len(plain) == 1 and plain[0].logprobs is None
