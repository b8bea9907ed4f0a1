#!/usr/bin/env python3
"""Generates the tokenizer fixtures: a corpus of hard strings, tokenized by llama.cpp's
`llama-tokenize --ids` for every test vocabulary we support and the two catalog models.

    python3 scripts/gen-tokenizer-fixtures.py [--jobs N] [--only NAME,...]

Writes crates/cera/tests/fixtures/tokenizer/corpus.json (the strings) and one
<vocab>.json per vocabulary. The text reaches llama-tokenize byte-exact: through --stdin with
--no-escape (so "\\n" stays two characters and trailing newlines are kept).

Modes (recorded in each file with the flags used):
  default           all strings; llama-tokenize's defaults: BOS/EOS as the model's metadata
                    says, special tokens parsed
  no_parse_special  the strings that contain special-token-looking text, with
                    --no-parse-special
  no_bos            the same strings with --no-bos (no BOS/EOS added)
  joined            the whole corpus as one text (strings joined by newlines), defaults;
                    added by a second run with --joined

Environment: LLAMA_TOKENIZE (binary; default the peer build below), CERA_HOME (data and
models, as cera's fetch step lays them out; run `cargo run -p cera --example fetch_test_data`
and `cera pull` for both catalog models first).
"""

import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "cera", "tests", "fixtures", "tokenizer")
LLAMA = os.environ.get(
    "LLAMA_TOKENIZE",
    os.path.expanduser(
        "~/.cache/cera-peers/llama.cpp-11434.0.0/src/llama.cpp/build/bin/llama-tokenize"
    ),
)
HOME = os.environ.get("CERA_HOME") or os.path.expanduser("~/.cache/cera")
DATA = os.path.join(HOME, "test-data", "llama.cpp-11434.0.0", "models")

# Test vocabularies of llama.cpp we support (nomic-bert-moe is a T5/Unigram vocabulary).
VOCABS = [
    "aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon",
    "gemma-4", "gpt-2", "gpt-neox", "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2",
    "qwen35", "refact", "starcoder",
]
# Pre-tokenizers without a llama.cpp test vocabulary, checked on another vocabulary with only
# tokenizer.ggml.pre changed (gguf-py's gguf_new_metadata.py --pre-tokenizer).
DERIVED = {
    "pre-tekken": ("llama-bpe", "tekken"),
    "pre-lfm2": ("llama-bpe", "lfm2"),
    "pre-gpt-4o": ("llama-bpe", "gpt-4o"),
    "pre-deepseek-v3": ("qwen2", "deepseek-v3"),
}
GGUF_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(LLAMA))), "gguf-py")
MODELS = {
    "smollm2-135m-instruct-q4_1": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2.5-coder-0.5b-instruct-q4_k_m": "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
}

BASE_FLAGS = ["--stdin", "--ids", "--no-escape", "--log-disable"]
MODES = {
    "default": [],
    "no_parse_special": ["--no-parse-special"],
    "no_bos": ["--no-bos"],
}


def corpus() -> list[str]:
    c: list[str] = []
    # whitespace
    c += ["", " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\n\n\n\n",
          " \n", "\n ", " \n\n ", "\r\n", "\r\n\r\n", "\r", "a\rb", "\t\n", " \t\n",
          "  leading", "trailing  ", "  both  ", "tab\tseparated\tvalues",
          "mixed \t \n \t end", "word\n\n\nword", "a  b   c    d", "line1\nline2\r\nline3",
          "\u3000ideographic space", "nbsp\u00a0here", "line\u2028separator",
          "para\u2029separator", "next\u0085line", "thin\u2009space", " " * 100, "\n" * 40,
          "\t" * 10 + "x", "x" + " " * 7 + "\n", "\v\f form feeds", "end with space ",
          "end with newline\n", "   \n   \n   "]
    # English, casing, contractions
    c += ["Hello world", " Hello world", "Hello World", " Hello World", " Hello World!",
          "Hello, world!", " this is 🦙.cpp", "don't", "DON'T", "Don't you dare",
          "I'm we'll they've she'd it's you're", "'s 't 're 've 'm 'll 'd",
          "'S'T'RE'VE'M'LL'D", "O'Neil's dog's bone", "rock 'n' roll", "y'all'd've",
          "The quick brown fox jumps over the lazy dog.", "HTTPServer XMLHttpRequest",
          "camelCaseName snake_case_name kebab-case-name SCREAMING_CASE",
          "e-mail user@example.com", "https://example.com/path?q=1&r=2#frag",
          "C:\\path\\to\\file.txt", "$100.00 50% #hashtag @mention",
          "(parens) [brackets] {braces} <angles>", "...", "!!!???", "—–-", "“smart quotes”",
          "‘single’", "«guillemets»", "…", "• bullet", "©®™", "∑∫√∞≠≤", "→⇒↔",
          "♠♣♥♦", "a" * 300, "supercalifragilisticexpialidocious" * 4,
          "ab" * 120, "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do "
          "eiusmod tempor incididunt ut labore et dolore magna aliqua."]
    # numbers
    c += ["1", "12", "123", "1234", "12345", "123456", "1234567", "1234567890",
          "1234567890" * 20, "3.14159", "1,000,000", "-42", "+7", "0x1F", "1e10", "10^6",
          "2024-01-15T12:30:00Z", "v1.2.3", "a1b2c3", "abc123def", "123abc", "٣٤٥ ١٢",
          "१२३ ४५६", "১২৩", "๑๒๓", "Ⅻ Ⅳ", "½ ¾ ⅓", "x² y³", "① ② ③", "１２３ fullwidth",
          "🔢 42", "phone: +1 (555) 123-4567", "IPv4 192.168.0.1", "3 + 4 = 7"]
    # scripts
    c += ["你好，世界！", "我喜欢吃苹果。", "中文字符测试", "こんにちは世界", "カタカナとひらがな",
          "日本語の文章です。", "안녕하세요 세계", "한국어 텍스트입니다.", "\u1100\u1161\u11a8 jamo",
          "مرحبا بالعالم", "اللغة العربية جميلة", "שלום עולם", "עברית עם ניקוד: שָׁלוֹם",
          "नमस्ते दुनिया", "हिन्दी भाषा", "สวัสดีชาวโลก", "ภาษาไทย", "Привет, мир!",
          "Съешь же ещё этих мягких французских булок", "Γειά σου Κόσμε", "Ελληνικά",
          "გამარჯობა", "Բարեւ", "வணக்கம்", "হ্যালো", "ਸਤ ਸ੍ਰੀ ਅਕਾਲ", "ನಮಸ್ಕಾರ", "നമസ്കാരം",
          "Xin chào thế giới", "İstanbul ığdır ŞĞÜÖÇ", "Grüße aus der Straße", "À bientôt, garçon",
          "Zażółć gęślą jaźń", "Ñandú pingüino", "ሰላም ዓለም", "Сайн байна уу", "བཀྲ་ཤིས་བདེ་ལེགས།",
          "សួស្តី", "ສະບາຍດີ", "မင်္ဂလာပါ", "ආයුබෝවන්", "ᐊᐃᓐᖓᓂ", "ⲛⲟⲩⲧⲉ", "𐌰𐌱𐌲",
          "Hello世界123!", "mixed русский and English", "日本語とEnglishの混在",
          "中" * 60, "한" * 30 + " " + "글" * 30]
    # emoji
    c += ["😀", "😀😃😄😁", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵🇩🇪", "❤️", "🧑🏾‍💻",
          "#️⃣ 1️⃣", "🫠🫶", "☕ coffee", "I ❤️ NY", "🎉🎉🎉 party", "🦙 llama", "👩‍🔬👨‍🚀",
          "😀" * 30, "✔ ✘ ☑", "⌚⌛", "emoji at end 🚀"]
    # combining marks and odd codepoints
    c += ["e\u0301", "é vs e\u0301", "a\u0300\u0301\u0302\u0303", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
          "ñ vs n\u0303", "क्षत्रिय", "\u0915\u094d\u0937", "ก่อน", "\u0301 leading mark",
          "zero\u200bwidth", "join\u200dme", "\ufeffBOM", "rtl\u200fmark", "vs\ufe0f16",
          "private \ue000\ue001", "replacement \ufffd", "nonchar \uffff", "max \U0010fffd",
          "ctrl \x01\x02\x1b", "del \x7f", "nul a\x00b", "Ａｂｃ fullwidth", "ﬁ ligature",
          "ſ long s", "K kelvin Å angstrom", "Ω ohm", "℃ ℉", "ℌ𝔢𝔩𝔩𝔬 𝐛𝐨𝐥𝐝"]
    # code
    c += ["def hello():\n    print(\"Hello, world!\")\n",
          "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n",
          "int main(int argc, char **argv) {\n\treturn 0;\n}",
          "for (let i = 0; i < 10; i++) { console.log(i); }",
          "{\"key\": \"value\", \"n\": [1, 2.5, null, true]}",
          "<div class=\"a\"><span>text</span></div>", "SELECT * FROM users WHERE id = 42;",
          "#!/bin/bash\necho \"$HOME\" | grep -E '^/r(oo)?t' && exit 1",
          "x = [i**2 for i in range(10) if i % 2 == 0]", "if (a && b || !c) { return -1; }",
          "        indented eight", "\t\tdouble tab", "    def f(self):\n        return self.x",
          "// comment\n/* block */\n# hash", "a->b::c<d>::e", "===!==>=<=<<>>", "```python\nx=1\n```",
          "regex: ^[a-z]+\\d{2,3}$", "path/to/some_file.rs:12:34", "0b1010 0o777 0xFF_FF",
          "@decorator\nclass Foo(Bar):\n    pass", "λx.x+1", "x := y // z", "__init__.py",
          "import numpy as np\nnp.array([[1,2],[3,4]])"]
    # special tokens written as text
    c += ["<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
          "<|endoftext|>", "text<|endoftext|>more", "<s>", "</s>", "<s> hello </s>",
          "<|eot_id|>", "<|begin_of_text|>Hello<|eot_id|>", "[CLS] hello [SEP]", "[MASK]",
          "<start_of_turn>user\nHi<end_of_turn>", "<unk>", "<|end|>", "<|assistant|>",
          "<|user|>\nQuestion<|end|>\n<|assistant|>", "<mask>", "<|im_start", "<<|im_end|>>",
          "<|im_end|><|im_end|>", " <|im_start|> ", "<|im_start|>  spaced  <|im_end|>",
          "<0x0A>", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
          "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>hi<|END_OF_TURN_TOKEN|>",
          "<｜begin▁of▁sentence｜>hello", "<bos>hello<eos>", "<pad><pad>",
          "<|endoftext|><|endoftext|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n",
          "<|file_sep|>main.py\n<|repo_name|>x", "<think>\nhmm\n</think>",
          "<|im_start|>\n\n<|im_end|>\n\n", "[INST] hi [/INST]", "<|system|>\nsys</s>\n"]
    return c


def tokenize(model: str, text: str, flags: list[str]) -> list[int]:
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(LLAMA))
    p = subprocess.run([LLAMA, "-m", model] + BASE_FLAGS + flags, input=text.encode(),
                       capture_output=True, env=env, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"{model}: llama-tokenize failed: {p.stderr.decode()[-500:]}")
    lines = [l for l in p.stdout.decode().splitlines() if l.startswith("[")]
    return json.loads(lines[-1])


def write(path: str, doc: dict) -> None:
    lines = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    # one case per line keeps diffs readable
    lines = lines.replace("]],[", "]],\n[")
    with open(path, "w") as f:
        f.write(lines + "\n")


def derive(name: str) -> str:
    """Writes the vocabulary `name` stands for (a copy with another pre-tokenizer)."""
    base, pre = DERIVED[name]
    dst = os.path.join("/tmp", f"cera-fixture-{os.getpid()}-{name}.gguf")
    if not os.path.exists(dst):
        script = os.path.join(GGUF_PY, "gguf", "scripts", "gguf_new_metadata.py")
        subprocess.run([sys.executable, script, os.path.join(DATA, f"ggml-vocab-{base}.gguf"), dst,
                        "--pre-tokenizer", pre, "--force"], check=True, capture_output=True,
                       env=dict(os.environ, PYTHONPATH=GGUF_PY))
    return dst


def special_like(s: str) -> bool:
    return "<" in s or "[" in s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--joined", action="store_true",
                    help="only add the 'joined' mode (the whole corpus as one text, joined by "
                         "newlines) to existing files")
    a = ap.parse_args()
    texts = corpus()
    assert len(texts) >= 200, len(texts)
    assert len(set(texts)) == len(texts), "duplicate corpus strings"
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "corpus.json"), "w") as f:
        json.dump(texts, f, ensure_ascii=False, indent=0)
        f.write("\n")
    targets = [(v, "llama.cpp-data", os.path.join(DATA, f"ggml-vocab-{v}.gguf")) for v in VOCABS]
    targets += [(n, "catalog", os.path.join(HOME, "models", f)) for n, f in MODELS.items()]
    targets += [(n, "derived", derive(n)) for n in DERIVED if not a.only or n in a.only]
    only = set(filter(None, a.only.split(",")))
    special_idx = [i for i, t in enumerate(texts) if special_like(t)]
    for name, source, path in targets:
        if only and name not in only:
            continue
        if a.joined:
            dst = os.path.join(OUT, f"{name}.json")
            with open(dst) as f:
                doc = json.load(f)
            ids = tokenize(path, "\n".join(texts), [])
            doc["modes"]["joined"] = {"flags": BASE_FLAGS, "cases": [[-1, ids]]}
            write(dst, doc)
            print(f"{name}: joined corpus, {len(ids)} tokens", file=sys.stderr, flush=True)
            continue
        jobs = [("default", i) for i in range(len(texts))]
        jobs += [(m, i) for m in ("no_parse_special", "no_bos") for i in special_idx]
        with cf.ThreadPoolExecutor(a.jobs) as ex:
            res = list(ex.map(lambda j: tokenize(path, texts[j[1]], MODES[j[0]]), jobs))
        modes = {m: {"flags": BASE_FLAGS + MODES[m], "cases": []} for m in MODES}
        for (m, i), ids in zip(jobs, res):
            modes[m]["cases"].append([i, ids])
        doc = {"vocab": name, "source": source, "file": os.path.basename(path),
               **({"base": DERIVED[name][0], "pre": DERIVED[name][1]} if name in DERIVED else {}),
               "tool": "llama-tokenize (llama.cpp 11434)", "modes": modes}
        write(os.path.join(OUT, f"{name}.json"), doc)
        print(f"{name}: {len(jobs)} tokenizations", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
