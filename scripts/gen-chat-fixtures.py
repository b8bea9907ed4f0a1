#!/usr/bin/env python3
"""Writes the chat-template fixtures that `crates/cera/tests/chat_templates.rs` compares against,
byte for byte.

Reference: Python `jinja2` set up the way Hugging Face transformers' `apply_chat_template` sets
it up (written out here, so transformers need not be installed):

  * `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with the
    `loopcontrols` extension and a `{% generation %}...{% endgeneration %}` tag that renders its
    body unchanged (transformers uses it only to track assistant token positions);
  * the `tojson` filter replaced by `json.dumps(x, ensure_ascii=False, indent=indent,
    separators=separators, sort_keys=sort_keys)` (no HTML escaping);
  * globals `raise_exception(msg)` (raises `TemplateError(msg)`) and `strftime_now(fmt)`;
  * render variables: `messages`, `tools` (None when absent), `documents` (None),
    `add_generation_prompt`, and the special tokens `bos_token` / `eos_token`.

`strftime_now` uses the fixed date below instead of the clock; the Rust tests inject the same.

Output (compact JSON):
  crates/cera/tests/fixtures/chat/templates.json
      {"date": [y, m, d, H, M, S], "bos_token", "eos_token",
       "conversations": {name: {"messages", "tools", "add_generation_prompt"}},
       "templates": {file name: {"sha256": of the template bytes,
                                 "cases": {conversation: {"ok": rendered} | {"error": message}}}}}
  crates/cera/tests/fixtures/chat/smollm2.json
      the SmolLM2 model's own template (read from its GGUF with the `gguf` package), its
      bos/eos token texts, and the rendering of the "system_user" conversation.

usage: scripts/gen-chat-fixtures.py [TEMPLATES_DIR [SMOLLM2.gguf]]
  defaults: $CERA_HOME (~/.cache/cera)/test-data/llama.cpp-11434.0.0/models/templates and
            $CERA_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf (run the Rust tests once, or
            `cera pull smollm2`, to fetch them).
"""
import copy
import datetime
import hashlib
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "crates", "cera", "tests", "fixtures", "chat")

FIXED_DATE = datetime.datetime(2025, 3, 14, 9, 26, 53)
BOS = "<s>"
EOS = "</s>"


class GenerationTag(jinja2.ext.Extension):
    """`{% generation %}body{% endgeneration %}` renders `body` (as transformers' tag does when
    it is not tracking assistant tokens)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, conv, bos, eos):
    try:
        template = env.from_string(source)
        out = template.render(
            messages=conv["messages"],
            tools=conv["tools"],
            documents=None,
            add_generation_prompt=conv["add_generation_prompt"],
            bos_token=bos,
            eos_token=eos,
        )
        return {"ok": out}
    except Exception as e:  # noqa: BLE001 - every failure is recorded as the expected outcome
        return {"error": f"{type(e).__name__}: {e}"}


SYSTEM = "You are a helpful assistant. Keep answers short."

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather forecast for a place.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "City and country, e.g. \"Paris, France\""},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                    "options": {
                        "type": "object",
                        "description": "Forecast options",
                        "properties": {
                            "days": {"type": "integer", "description": "Number of days (1-7)"},
                            "hourly": {"type": "boolean", "description": "Include hourly data"},
                            "fields": {"type": "array", "items": {"type": "string"}, "description": "Extra fields"},
                        },
                        "required": ["days"],
                    },
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web; returns the top results.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Search terms"},
                    "limit": {"type": "integer", "description": "Maximum number of results"},
                },
                "required": ["query"],
            },
        },
    },
]

CONVERSATIONS = {
    "system_user": {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What is the capital of France? Réponds en français ☕"},
        ],
        "tools": None,
        "add_generation_prompt": True,
    },
    "multi_turn": {
        "messages": [
            {"role": "user", "content": "Hi there!"},
            {"role": "assistant", "content": "Hello! How can I help you today?"},
            {"role": "user", "content": "Tell me a joke about \"quotes\" & <tags>."},
            {"role": "assistant", "content": "Why did the <tag> close itself? It needed some space.\n\nGet it?"},
            {"role": "user", "content": "  Another one, please.  "},
        ],
        "tools": None,
        "add_generation_prompt": True,
    },
    "tools_user": {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What's the weather in Paris?"},
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    "tool_call_result": {
        "messages": [
            {"role": "user", "content": "What's the weather in Paris for the next two days?"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "type": "function",
                        "id": "call00001",
                        "function": {
                            "name": "get_weather",
                            "arguments": {
                                "location": "Paris, France",
                                "unit": "celsius",
                                "options": {"days": 2, "hourly": False, "threshold": 0.5, "fields": ["wind", "uv"]},
                            },
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "content": "{\"temperature\": 18, \"condition\": \"sunny\", \"note\": \"été ensoleillé\"}",
                "tool_call_id": "call00001",
                "name": "get_weather",
            },
        ],
        "tools": TOOLS,
        "add_generation_prompt": True,
    },
    # The same exchange as an OpenAI client sends it: `content: null` beside the tool calls.
    "tool_call_null_content": None,
    "no_generation_prompt": {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Say hello."},
            {"role": "assistant", "content": "Hello!"},
        ],
        "tools": None,
        "add_generation_prompt": False,
    },
}

CONVERSATIONS["tool_call_null_content"] = copy.deepcopy(CONVERSATIONS["tool_call_result"])
CONVERSATIONS["tool_call_null_content"]["messages"][1] = {
    "role": "assistant",
    "content": None,
    "tool_calls": CONVERSATIONS["tool_call_result"]["messages"][1]["tool_calls"],
}

# A longer agent exchange: two parallel calls with text beside them, both results, an answer
# with reasoning in <think> tags, and a follow-up question.
CONVERSATIONS["agent_loop"] = {
    "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Weather in Paris and Oslo? Also search for 'fjords'."},
        {
            "role": "assistant",
            "content": "Let me check both.",
            "tool_calls": [
                {
                    "type": "function",
                    "id": "call00002",
                    "function": {"name": "get_weather", "arguments": {"location": "Oslo, Norway", "unit": "celsius"}},
                },
                {
                    "type": "function",
                    "id": "call00003",
                    "function": {"name": "search_web", "arguments": {"query": "fjords", "limit": 3}},
                },
            ],
        },
        {"role": "tool", "content": "{\"temperature\": 4}", "tool_call_id": "call00002", "name": "get_weather"},
        {"role": "tool", "content": "1. Geirangerfjord\n2. Nærøyfjord", "tool_call_id": "call00003", "name": "search_web"},
        {
            "role": "assistant",
            "content": "<think>\nOslo is cold; list the fjords.\n</think>\n\nOslo: 4 °C. Fjords: Geirangerfjord, Nærøyfjord.",
        },
        {"role": "user", "content": "Thanks! And tomorrow?"},
    ],
    "tools": TOOLS,
    "add_generation_prompt": True,
}

# Earlier assistant turns that carry reasoning, as thinking models produce them.
CONVERSATIONS["thinking_history"] = {
    "messages": [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHi! What can I do for you?"},
        {"role": "user", "content": "Count to three."},
    ],
    "tools": None,
    "add_generation_prompt": True,
}


def cera_home():
    h = os.environ.get("CERA_HOME")
    return h if h else os.path.join(os.path.expanduser("~"), ".cache", "cera")


def write_json(name, obj):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}")


def gen_templates(templates_dir):
    env = make_env(FIXED_DATE)
    templates = {}
    for fname in sorted(os.listdir(templates_dir)):
        if not fname.endswith(".jinja"):
            continue
        with open(os.path.join(templates_dir, fname), "rb") as f:
            raw = f.read()
        source = raw.decode("utf-8")
        cases = {name: render(env, source, conv, BOS, EOS) for name, conv in CONVERSATIONS.items()}
        templates[fname] = {"sha256": hashlib.sha256(raw).hexdigest(), "cases": cases}
        n_err = sum("error" in c for c in cases.values())
        print(f"{fname}: {len(cases) - n_err} rendered, {n_err} raised")
    d = FIXED_DATE
    write_json(
        "templates.json",
        {
            "date": [d.year, d.month, d.day, d.hour, d.minute, d.second],
            "bos_token": BOS,
            "eos_token": EOS,
            "conversations": CONVERSATIONS,
            "templates": templates,
        },
    )


def field_str(reader, key):
    field = reader.fields[key]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def gen_smollm2(path):
    import gguf

    reader = gguf.GGUFReader(path)
    source = field_str(reader, "tokenizer.chat_template")
    tokens = reader.fields["tokenizer.ggml.tokens"]

    def token_text(id_key):
        field = reader.fields[id_key]
        tid = int(field.parts[field.data[0]][0])
        return bytes(tokens.parts[tokens.data[tid]]).decode("utf-8")

    bos = token_text("tokenizer.ggml.bos_token_id")
    eos = token_text("tokenizer.ggml.eos_token_id")
    env = make_env(FIXED_DATE)
    conv = CONVERSATIONS["system_user"]
    write_json(
        "smollm2.json",
        {
            "template": source,
            "bos_token": bos,
            "eos_token": eos,
            "conversation": "system_user",
            "expected": render(env, source, conv, bos, eos),
        },
    )


def main():
    home = cera_home()
    templates_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        home, "test-data", "llama.cpp-11434.0.0", "models", "templates"
    )
    smol = sys.argv[2] if len(sys.argv) > 2 else os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    gen_templates(templates_dir)
    gen_smollm2(smol)


if __name__ == "__main__":
    main()
