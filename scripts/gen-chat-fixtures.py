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
  crates/cera/tests/fixtures/chat/snippets.json
      {"vars": variables, "snippets": {name: {"template", "ok" | "error"}}}: one-line templates
      that each probe one behaviour (printing, filters, methods, tests, loops, whitespace).
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


# Small templates that probe one behaviour each (printing, filters, methods, tests, loops,
# whitespace control), rendered with `messages=[]` and these variables besides the standard ones.
SNIPPET_VARS = {
    "d": {"a": 1, "b": [True, None, "x'y"], "c": {"n": 2.0}},
    "l": [1, "two", 3.0],
    "s": "hello world",
    "ds": [{"n": 1, "t": "a"}, {"n": 0, "t": "b"}, {"n": 2, "t": "c"}],
    "x": None,
    "y": True,
    "u": "café ☕ \u2028 \x1b",
    "big": 12345678901234567890,
}

SNIPPETS = [
    # printing
    ("print_scalars", "{{ none }}|{{ true }}|{{ false }}|{{ 1 }}|{{ 1.5 }}|{{ 2.0 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ 1e-7 }}|{{ big }}"),
    ("print_containers", "{{ d }}|{{ l }}|{{ s }}|{{ ds[0] }}|{{ [] }}|{{ {} }}"),
    ("print_tuples", "{{ (1, 'a') }}|{{ (1,) }}"),
    ("tilde_concat", "{{ x ~ y ~ '|' ~ d.c ~ '|' ~ l ~ '|' ~ 1.0 ~ 2 }}"),
    ("arithmetic", "{{ 7 // 2 }}|{{ 7 / 2 }}|{{ 7 % 3 }}|{{ -7 // 2 }}|{{ 2 ** 10 }}|{{ 4 / 2 }}|{{ 10 / 4 }}|{{ 1 / 3 }}"),
    ("string_repeat_and_list_add", "{{ 'ab' * 3 }}|{{ [1, 2] + [3] }}|{{ 'a' + 'b' }}"),
    ("str_plus_int", "{{ 'x' + 1 }}"),
    ("str_plus_none", "{{ 'x' + x }}"),
    ("str_plus_undefined", "{{ 'x' + nope }}"),
    ("undefined_print", "[{{ nope }}]|{{ nope is defined }}|{{ nope | length }}|{{ nope is none }}"),
    ("undefined_attr", "{{ nope.attr }}"),
    ("undefined_attr_defined", "{{ nope.attr is defined }}"),
    ("missing_key", "[{{ d.missing }}][{{ d['missing'] }}]{{ d.missing is defined }}"),
    ("missing_key_deeper", "{{ d.missing.deeper }}"),
    ("none_attr", "[{{ x.attr }}]"),
    ("loop_undefined", "{% for i in nope %}x{% endfor %}done"),
    ("loop_none", "{% for i in x %}x{% endfor %}done"),
    ("loop_string", "{% for c in 'ab' %}{{ c }};{% endfor %}"),
    ("loop_dict", "{% for k in d %}{{ k }};{% endfor %}"),
    ("slicing", "{{ s[1:] }}|{{ s[::-1] }}|{{ l[-1] }}|{{ l[5] is defined }}|{{ l[0:2] }}|{{ s[1:3] }}|{{ u[3] }}"),
    # filters
    ("trim", "[{{ '  a b  ' | trim }}][{{ 'xxaxx' | trim('x') }}][{{ x | trim }}][{{ 1 | trim }}]"),
    ("join", "{{ l | join(', ') }}|{{ [none, true, 1] | join }}|{{ ds | join(',', attribute='t') }}|{{ 'abc' | join('-') }}"),
    ("tojson_values", "{{ d | tojson }}|{{ l | tojson }}|{{ 0.1 | tojson }}|{{ 1e16 | tojson }}|{{ none | tojson }}|{{ u | tojson }}|{{ '\"<>&\\'' | tojson }}|{{ (1, 2) | tojson }}"),
    ("tojson_options", "{{ d | tojson(indent=2) }}|{{ l | tojson(indent=0) }}|{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true, indent=1) }}|{{ u | tojson(ensure_ascii=true) }}"),
    ("tojson_indent_nested", "{{ [1, [2, [3, {}]], {'a': []}] | tojson(indent=3) }}"),
    ("tojson_positional", "{{ u | tojson(true) }}|{{ d | tojson(false, 2) }}"),
    ("tojson_undefined", "{{ nope | tojson }}"),
    ("tojson_generator", "{{ l | select | tojson }}"),
    ("indent", "[{{ 'a\\nb\\n\\nc' | indent(2) }}][{{ 'a\\nb' | indent(2, true) }}][{{ 'a\\n\\nb' | indent(width=3, first=true, blank=true) }}][{{ 'a\\nb' | indent('> ') }}]"),
    ("default", "{{ nope | default('d') }}|{{ x | default('d') }}|{{ '' | default('d', true) }}|{{ x | default('d', boolean=true) }}|{{ nope | d('e') }}"),
    ("length", "{{ l | length }}|{{ 'abc' | length }}|{{ d | length }}|{{ l | count }}"),
    ("dictsort_items", "{{ d | dictsort }}|{{ {'B': 1, 'a': 2} | dictsort }}|{{ d | items | list }}|{{ {'b': 1, 'a': 2} | dictsort(reverse=true) }}"),
    ("list_filter", "{{ d | list }}|{{ 'ab' | list }}|{{ range(3) | list }}|{{ range(1, 10, 3) | list }}"),
    ("sort_unique", "{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort }}|{{ [1, 2, 2, 1] | unique | list }}|{{ ds | sort(attribute='n') | map(attribute='t') | join }}|{{ [3, 1] | sort(reverse=true) }}"),
    ("map_select", "{{ ds | map(attribute='n') | list }}|{{ ds | selectattr('n', 'equalto', 1) | list }}|{{ ds | rejectattr('n') | map(attribute='t') | list }}|{{ l | select('string') | list }}|{{ l | reject('string') | list }}|{{ ['a', 'b'] | map('upper') | list }}"),
    ("generator_truthy", "{% if [] | select %}yes{% else %}no{% endif %}|{% if [] | map('upper') %}yes{% else %}no{% endif %}"),
    ("first_last_sum", "{{ l | first }}|{{ l | last }}|{{ [1, 2, 3] | sum }}|{{ [1, 5, 3] | max }}|{{ [1, 5, 3] | min }}|{{ 'abc' | first }}"),
    ("case_filters", "{{ 'Hello World' | upper }}|{{ 'Hello' | lower }}|{{ 'hello world-x' | title }}|{{ 'hELLO there' | capitalize }}|{{ 'é ß' | upper }}"),
    ("replace_int_float_round", "{{ 'a-b-c' | replace('-', '+') }}|{{ 'a-b-c' | replace('-', '+', 1) }}|{{ 3.7 | int }}|{{ '5' | int }}|{{ 5 | float }}|{{ 2.5 | round }}|{{ 3.14159 | round(2) }}|{{ 'x' | int }}"),
    ("string_filter", "{{ l | string }}|{{ x | string }}|{{ 1 | string }}|{{ y | string }}|{{ d | string }}"),
    ("format_filter", "{{ '%s and %d' | format('x', 3) }}|{{ '%s' | format(x) }}"),
    ("reverse", "{{ ['a', 'b'] | reverse | list }}|{{ 'abc' | reverse }}"),
    # Python methods
    ("str_split", "{{ s.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a  b '.split(none, 1) }}|{{ ''.split(',') }}|{{ ''.split() }}"),
    ("str_strip", "[{{ ' x '.strip() }}][{{ 'xyx'.strip('x') }}][{{ ' x '.lstrip() }}][{{ ' x '.rstrip() }}][{{ '\\n\\nx\\n'.strip('\\n') }}]"),
    ("str_predicates", "{{ 'ab'.startswith('a') }}|{{ 'ab'.endswith(('x', 'b')) }}|{{ 'ab'.startswith('b') }}|{{ '12'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ 'AB'.isupper() }}"),
    ("str_misc_methods", "{{ 'a{}b{}'.format(1, 'z') }}|{{ '{x}!'.format(x=2) }}|{{ 'Ab'.upper() }}|{{ 'Ab'.lower() }}|{{ 'a b'.title() }}|{{ 'abc'.replace('b', 'X') }}|{{ 'abc'.find('c') }}|{{ 'a\\nb'.splitlines() }}|{{ 'ab'.count('a') }}|{{ 'abc'.capitalize() }}"),
    ("dict_methods", "{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 5) }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.items() | list }}"),
    ("list_append_refused", "{% set xs = [] %}{{ xs.append(1) }}"),
    ("unknown_method", "{{ s.frobnicate() }}"),
    ("unknown_filter", "{{ s | frobnicate }}"),
    # control flow
    ("loop_vars", "{% for i in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{% if not loop.last %},{% endif %}{% endfor %}"),
    ("loop_adjacent", "{% for i in l %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}"),
    ("loop_cycle", "{% for i in l %}{{ loop.cycle('a', 'b') }}{% endfor %}"),
    ("loop_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"),
    ("loop_filter_else", "{% for i in l if i is string %}{{ i }}{% else %}empty{% endfor %}|{% for i in [] %}x{% else %}empty{% endfor %}"),
    ("loop_controls", "{% for i in [1, 2, 3, 4] %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
    ("loop_recursive", "{% for n in [{'v': 1, 'c': [{'v': 2, 'c': []}]}] recursive %}{{ n.v }}({{ loop(n.c) }}){% endfor %}"),
    ("namespace", "{% set ns = namespace(c=0, s='') %}{% for i in l %}{% set ns.c = ns.c + 1 %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.c }}|{{ ns.s }}"),
    ("scoping", "{% set c = 0 %}{% for i in l %}{% set c = c + 1 %}{% endfor %}{{ c }}|{% if true %}{% set c = 5 %}{% endif %}{{ c }}"),
    ("macro", "{% macro m(a, b='x') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}{{ m(a=3) }}"),
    ("macro_call_block", "{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"),
    ("set_block_filter_block", "{% set v %}  a {% endset %}[{{ v }}]{% filter upper %}abc{% endfilter %}"),
    ("inline_if_truthiness", "{{ 'y' if x else 'n' }}|{{ 'y' if [] else 'n' }}|{{ 'y' if {} else 'n' }}|{{ 'y' if '0' else 'n' }}|{{ 'y' if 0.0 else 'n' }}|{{ 'y' if nope else 'n' }}|{{ 'y' if 'a' }}"),
    ("tests", "{{ 'a' is string }}{{ 1 is number }}{{ y is number }}{{ 1.0 is integer }}{{ 1 is integer }}{{ y is integer }}{{ 1.5 is float }}{{ y is boolean }}{{ 'a' is sequence }}{{ d is sequence }}{{ d is mapping }}{{ l is iterable }}{{ 'a' is iterable }}{{ x is iterable }}{{ 1 is iterable }}{{ x is none }}{{ 2 is even }}{{ 3 is odd }}{{ 6 is divisibleby 3 }}{{ 'a' is in 'abc' }}{{ 1 is eq 1 }}{{ l is not none }}{{ y is true }}{{ 1 is true }}{{ x is false }}"),
    ("in_operator", "{{ 'a' in 'abc' }}{{ 1 in l }}{{ 'a' in d }}{{ 'zz' not in d }}{{ 'two' in l }}"),
    ("in_none", "{{ 'a' in x }}"),
    ("comparisons", "{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ [1] == [1] }}{{ x == none }}{{ 1 != 'a' }}{{ y == 1 }}{{ (1, 2) == [1, 2] }}"),
    ("compare_str_int", "{{ 'a' < 1 }}"),
    ("len_none", "{{ x | length }}"),
    ("raise", "{{ raise_exception('boom: ' ~ 1) }}"),
    ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S %a %A %b %B %j %p %I %y %e %-d %%') }}"),
    ("dict_literal", "{% set v = {'b': 1, 'a': [2]} %}{{ v }}{{ v | tojson }}{{ dict(a=1, b=2) }}"),
    ("standard_vars", "{{ messages | length }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ bos_token }}{{ eos_token }}"),
    ("unicode", "{{ u | length }}|{{ u | upper }}|{{ u[0] }}{{ u[3] }}|{{ 'ß'.upper() }}"),
    # whitespace control (trim_blocks, lstrip_blocks, no trailing newline)
    ("ws_lstrip_trim", "  {% if true %}\n  x\n  {% endif %}\n  y\n"),
    ("ws_minus", "{%- if true -%}  a  {%- endif %}\n\nb {{- ' c' -}} \n d"),
    ("ws_comment", "a  {# c #}\n  {# d #}\ne"),
    ("ws_var_lines", "{% if true %}\n{{ 'x' }}\n{% endif %}\n"),
    ("ws_plus", "line\n    {%+ if true %}y{% endif %}\n"),
    ("ws_trailing_newlines", "abc\n\n"),
    ("ws_raw", "{% raw %}\n  {{ not rendered }}\n{% endraw %}\nafter"),
    ("ws_set_and_for", "{% set a = 1 %}\n{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\nend"),
    ("ws_tabs_and_macros", "\t{%- macro m() -%}\n\t  x\n\t{%- endmacro %}\n\t{% if true %}[{{ m() }}]{% endif %}\n\t{{ 'v' }}\n"),
    # more syntax and builtins
    ("tuple_unpacking", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% for p, q in [[1, 2], [3, 4]] %}{{ p * q }};{% endfor %}"),
    ("string_literal_escapes", "{{ 'a\\nb\\t|\\u00e9|\\x41|\\\\|\\'' }}|{{ \"x\" \"y\" }}"),
    ("number_literals", "{{ -1 }}|{{ 1_000 }}|{{ 0.5e1 }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}"),
    ("percent_format", "{{ '%s-%s' % (1, 'a') }}|{{ '%.2f' % 3.14159 }}|{{ '%d items' % 3 }}"),
    ("format_float", "{{ '%.2f' | format(3.14159) }}|{{ '%5s|%-5s|' | format('a', 'b') }}"),
    ("not_in_and_not", "{{ not 'a' in 'abc' }}{{ 'a' not in 'abc' }}{{ not (x or y) }}{{ x is not none }}"),
    ("selectattr_in", "{{ ds | selectattr('t', 'in', ['a', 'c']) | map(attribute='n') | list }}|{{ ds | map(attribute='missing', default='z') | list }}"),
    ("batch_groupby", "{{ range(5) | batch(2) | list }}|{% for g in ds | groupby('n') %}{{ g.grouper }}:{{ g.list | length }};{% endfor %}"),
    ("loop_changed_depth", "{% for i in [1, 1, 2] %}{% if loop.changed(i) %}{{ i }}{% endif %}{{ loop.depth }}{% endfor %}"),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}"),
    ("macro_caller_args", "{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(a, b) m() %}{{ a + b }}{% endcall %}"),
    ("set_default_plus", "{% set acc = nope | default([]) + [1] %}{{ acc }}{% set acc = acc + [2] %}{{ acc | length }}"),
    ("escape_filter", "{{ '<a href=\"x\">&\\'</a>' | e }}|{{ '<b>' | escape }}"),
    ("str_join_method", "{{ ', '.join(['a', 'b']) }}|{{ '-'.join('xyz') }}"),
    ("str_join_non_str", "{{ ', '.join(l) }}"),
    ("dict_int_keys_tojson", "{{ {1: 'a', 2.5: 'b', none: 'c'} | tojson }}|{{ {1: 'a'} }}"),
    ("items_of_none", "{{ x | items | list }}"),
    ("attr_and_sum", "{{ ds | sum(attribute='n') }}|{{ ds | map(attribute='n') | max }}|{{ ds | min(attribute='n') }}"),
    ("abs_and_bool_math", "{{ -3 | abs }}|{{ y + 1 }}|{{ 1.5 + 1 }}|{{ 3 * 1.0 }}"),
    ("wordcount_center_truncate", "{{ 'a b  c' | wordcount }}|{{ 'ab' | center(6) }}|{{ 'hello world foo' | truncate(9) }}"),
    ("string_in_list_membership", "{{ 'two' in l }}|{{ 3 in l }}|{{ [1] in [[1], 2] }}"),
    ("undefined_in_condition", "{% if nope and nope.x %}y{% else %}n{% endif %}{% if nope is defined and nope.x %}y{% endif %}"),
    ("messages_index_error", "{{ l[10] }}|{{ d['zz'] }}"),
    ("mapping_tests_on_objects", "{% set ns = namespace(a=1) %}{{ ns is mapping }}|{{ range(2) is sequence }}|{{ l | select is iterable }}"),
    ("loop_over_items_method", "{% for k, v in d.items() | list %}{{ k }}{% endfor %}|{{ d.items() | length }}"),
    ("strftime_padding", "{{ strftime_now('%e|%-m|%-d|%d|%H|%-H|%I|%M|%S|%y|%U|%W|%u|%w') }}"),
    ("replace_none", "{{ 'a' | replace('a', none) }}"),
    ("title_capitalize_methods", "{{ 'hello WORLD'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'a-b c'.title() }}"),
    ("upper_on_none", "{{ x | upper }}|{{ 1 | lower }}"),
    ("split_filter", "{{ 'a b' | split | list }}"),
    ("concat_list_tuple", "{{ [1] + (2,) }}"),
    ("slice_none", "{{ x[1:] }}"),
    ("int_division_by_zero", "{{ 1 // 0 }}"),
    ("string_multiply_negative", "[{{ 'ab' * 0 }}][{{ 'ab' * -1 }}]"),
    ("deep_tojson_key_order", "{{ {'z': {'b': 1, 'a': 2}, 'a': [{'y': 1, 'x': 2}]} | tojson }}"),
    ("tojson_sort_nested", "{{ {'z': {'b': 1, 'a': 2}, 'a': 1} | tojson(sort_keys=true) }}"),
    ("generator_loops", "{% for i in l | select %}{{ loop.index }}{{ loop.last }}{{ loop.length }};{% endfor %}|{{ l | select | first }}|{{ l | map('string') | join(',') }}|{{ ds | selectattr('n') | list | last }}|{{ ds | selectattr('n') | list | length }}"),
    ("generator_length", "{{ l | select | length }}"),
    ("generator_consumed_once", "{% set g = l | select %}{{ g | list }}{{ g | list }}"),
    ("tojson_float_forms", "{{ [1.0, 1e16, 1.5e-7, 123456789.125, -0.0, 100.0, 1e22] | tojson }}"),
]


def gen_snippets():
    env = make_env(FIXED_DATE)
    out = {}
    for name, source in SNIPPETS:
        try:
            rendered = env.from_string(source).render(
                messages=[], tools=None, documents=None, add_generation_prompt=False,
                bos_token=BOS, eos_token=EOS, **SNIPPET_VARS,
            )
            out[name] = {"template": source, "ok": rendered}
        except Exception as e:  # noqa: BLE001 - recorded as the expected outcome
            out[name] = {"template": source, "error": f"{type(e).__name__}: {e}"}
    write_json("snippets.json", {"vars": SNIPPET_VARS, "snippets": out})


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
    gen_snippets()
    gen_smollm2(smol)


if __name__ == "__main__":
    main()
