#!/usr/bin/env python3
"""Writes crates/cera/tests/fixtures/tools/render.json, which `crates/cera/tests/tools.rs`
compares against byte for byte: prompts with tools rendered by Python jinja2, set up exactly
as scripts/gen-chat-fixtures.py sets it up (transformers' `apply_chat_template` environment).

The tools are given in both OpenAI forms, wrapped ({"type": "function", "function": {...}})
and bare ({name, description, parameters}); like transformers, the template receives every
tool in the wrapped form (the normalization is written out below). Cera must read the same
mixed list (`cera::tools::parse_tools`), pass it to the template (`tools_value`) and render the
same text. Each template's tool-call format, as `ToolFormat::detect` must find it, is
recorded too.

usage: scripts/gen-tool-fixtures.py [TEMPLATES_DIR]
  default: $CERA_HOME (~/.cache/cera)/test-data/llama.cpp-11434.0.0/models/templates
"""
import datetime
import importlib.util
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "crates", "cera", "tests", "fixtures", "tools")

spec = importlib.util.spec_from_file_location("chatfx", os.path.join(ROOT, "scripts", "gen-chat-fixtures.py"))
chatfx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(chatfx)

FIXED_DATE = datetime.datetime(2025, 3, 14, 9, 26, 53)
BOS = "<s>"
EOS = "</s>"

# template file -> (the architecture of its models, the tool-call format its text shows)
TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("qwen2", "hermes"),
    "Qwen-Qwen3-0.6B.jinja": ("qwen3", "hermes"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("llama", "hermes"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("llama", "llama3"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("llama", "llama3"),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("llama", "llama3"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("llama", "mistral"),
    "LFM2-8B-A1B.jinja": ("lfm2moe", "lfm2"),
    "LFM2.5-Instruct.jinja": ("lfm2", "lfm2"),
}

TOOLS_IN = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city"],
            },
        },
    },
    {
        "name": "send_email",
        "description": "Send an e-mail. Returns \"ok\" or an error.",
        "parameters": {
            "type": "object",
            "properties": {
                "to": {"type": "string", "format": "email"},
                "subject": {"type": "string"},
                "urgent": {"type": "boolean"},
            },
            "required": ["to", "subject"],
        },
    },
    {"name": "list_files"},
]


def normalize(tools):
    out = []
    for t in tools:
        f = t["function"] if "function" in t else t
        g = {"name": f["name"]}
        if "description" in f:
            g["description"] = f["description"]
        g["parameters"] = f.get("parameters") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": g})
    return out


def main():
    home = os.environ.get("CERA_HOME", os.path.expanduser("~/.cache/cera"))
    tdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(home, "test-data", "llama.cpp-11434.0.0", "models", "templates")
    env = chatfx.make_env(FIXED_DATE)
    conv = {
        "messages": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "What's the weather in Paris, and mail it to bob@example.com?"},
        ],
        "tools": normalize(TOOLS_IN),
        "add_generation_prompt": True,
    }
    out = {
        "date": [FIXED_DATE.year, FIXED_DATE.month, FIXED_DATE.day, FIXED_DATE.hour, FIXED_DATE.minute, FIXED_DATE.second],
        "bos_token": BOS,
        "eos_token": EOS,
        "tools_in": TOOLS_IN,
        "messages": conv["messages"],
        "templates": {},
    }
    for name, (arch, fmt) in TEMPLATES.items():
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            source = f.read()
        r = chatfx.render(env, source, conv, BOS, EOS)
        out["templates"][name] = {"arch": arch, "format": fmt, **r}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "render.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out['templates'])} renderings")


if __name__ == "__main__":
    main()
