#!/usr/bin/env python3
"""Writes a Hugging Face-format checkpoint (config.json, *.safetensors, tokenizer.json,
tokenizer_config.json, generation_config.json) from one of our GGUF test models, so that
`cera convert` can be checked against llama.cpp's convert_hf_to_gguf.py on the same input.

    make-hf-checkpoint.py MODEL.gguf OUT_DIR [--dtype f32|f16|bf16] [--shard-mb N]

Only numpy and the `gguf` package: the safetensors files are written here (the format is an
8-byte header length, a JSON header, the data), so the bytes depend on nothing but this script
and the input. Weights are the GGUF's dequantized values in the chosen dtype; llama's Q/K rows
are put back in Hugging Face's order (the GGUF stores them permuted for interleaved RoPE).

Architectures: llama and qwen2 with a byte-level BPE ("gpt2") tokenizer.

    make-hf-checkpoint.py TOKENIZER.gguf OUT_DIR --recipe RECIPE.json [--dtype ...]

writes a random-weight checkpoint of any architecture instead: RECIPE.json holds the
config.json to write and the tensors (name, shape) in the order a Hugging Face model saves
them (scripts/gen-convert-fixtures.py records both from transformers); the tokenizer comes
from TOKENIZER.gguf. The values come from a counter-based hash (splitmix64), the same bytes on
every numpy: uniform in ±sqrt(3/fan_in) (unit-variance outputs), norms 1 ± 0.1.
"""

import argparse
import json
import os
import sys

import numpy as np
import gguf

# The pre-tokenizer sections of tokenizer.json for the GGUF pre-tokenizer names we write. These
# are the Hugging Face tokenizers' own definitions for these models.
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {
    "smollm": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    },
    "qwen2": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_RE}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        ],
    },
}
NORMALIZERS = {"smollm": None, "qwen2": {"type": "NFC"}}

HF_ARCH = {"llama": ("LlamaForCausalLM", "llama"), "qwen2": ("Qwen2ForCausalLM", "qwen2")}

# GGUF tensor name (after "blk.N.") -> Hugging Face name (after "model.layers.N.")
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def field(r, key, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


def to_bf16_bits(x):
    """f32 -> bf16 bit patterns, rounding to nearest even (NaN kept quiet)."""
    b = x.astype(np.float32).view(np.uint32)
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (b >> 16) | 0x40, rounded).astype(np.uint16)


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf.py's llama permutation of Q/K rows."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def splitmix_uniform(seed, n):
    """n floats uniform in [-1, 1) from splitmix64 of (seed, index): plain integer arithmetic."""
    with np.errstate(over="ignore"):
        z = np.arange(n, dtype=np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)
        z = z * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(40)).astype(np.float64) / float(1 << 23) - 1.0).astype(np.float32)


def random_tensors(recipe):
    out = []
    for i, (name, shape) in enumerate(recipe["tensors"]):
        n = int(np.prod(shape)) if shape else 1
        u = splitmix_uniform(i + 1, n)
        if "norm" in name or "layernorm" in name:
            w = 1.0 + 0.1 * u
        elif name.endswith(".bias") or len(shape) == 1:
            w = 0.1 * u
        else:
            fan_in = int(np.prod(shape[1:]))
            w = u * np.float32(np.sqrt(3.0 / fan_in))
        out.append((name, np.asarray(w, dtype=np.float32).reshape(shape)))
    return out


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype string, shape, bytes), written in this order."""
    header = {}
    offset = 0
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for _, _, _, data in tensors:
            f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="bf16")
    ap.add_argument("--shard-mb", type=int, default=0, help="split the weights into shards of about this size")
    ap.add_argument("--layers", type=int, default=0, help="keep only the first N layers (small test checkpoints)")
    ap.add_argument("--recipe", help="a random-weight checkpoint from this recipe (see above); the model gives the tokenizer")
    a = ap.parse_args()

    r = gguf.GGUFReader(a.model)
    arch = field(r, "general.architecture")
    recipe = None
    if a.recipe:
        with open(a.recipe) as f:
            recipe = json.load(f)
    if arch not in HF_ARCH and not recipe:
        sys.exit(f"error: architecture {arch!r} is not one this script writes (llama, qwen2)")
    pre = field(r, "tokenizer.ggml.pre")
    spm = field(r, "tokenizer.ggml.model") == "llama"
    wpm = field(r, "tokenizer.ggml.model") == "bert"
    if not spm and not wpm and (field(r, "tokenizer.ggml.model") != "gpt2" or pre not in PRE_TOKENIZERS):
        sys.exit(f"error: tokenizer {field(r, 'tokenizer.ggml.model')}/{pre} is not one this script writes")
    kv = lambda k, d=None: field(r, f"{arch}.{k}", d)  # noqa: E731
    n_head = kv("attention.head_count")
    n_head_kv = kv("attention.head_count_kv", n_head)
    os.makedirs(a.out, exist_ok=True)

    # --- weights
    st_dtype = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[a.dtype]

    def encode(w):
        if a.dtype == "f32":
            return w.astype("<f4").tobytes()
        if a.dtype == "f16":
            return w.astype("<f2").tobytes()
        return to_bf16_bits(w).astype("<u2").tobytes()

    out = []
    n_layers = kv("block_count")
    source = [] if recipe else r.tensors
    if a.layers:
        n_layers = min(n_layers, a.layers)
    for t in source:
        name = t.name
        if name.startswith("blk."):
            _, bid, rest = name.split(".", 2)
            if int(bid) >= n_layers:
                continue
            hf = f"model.layers.{bid}.{LAYER_NAMES[rest]}"
        else:
            hf = GLOBAL_NAMES[name]
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)]) if len(t.shape) > 1 else w.reshape(-1)
        if arch == "llama" and name.endswith("attn_q.weight"):
            w = unpermute(w, n_head)
        elif arch == "llama" and name.endswith("attn_k.weight"):
            w = unpermute(w, n_head_kv)
        out.append((hf, st_dtype, w.shape, encode(w)))
    out.sort(key=lambda e: e[0])
    if recipe:
        # the order the model saves them in (not sorted)
        out = [(name, st_dtype, w.shape, encode(w)) for name, w in random_tensors(recipe)]
    tied = "lm_head.weight" not in {e[0] for e in out}

    shards = [[]]
    size = 0
    for e in out:
        if a.shard_mb and shards[-1] and size + len(e[3]) > a.shard_mb << 20:
            shards.append([])
            size = 0
        shards[-1].append(e)
        size += len(e[3])
    if len(shards) == 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), shards[0])
    else:
        weight_map = {}
        for i, s in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors(os.path.join(a.out, fname), s)
            weight_map.update({e[0]: fname for e in s})
        index = {"metadata": {"total_size": sum(len(e[3]) for e in out)}, "weight_map": weight_map}
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)

    # --- tokenizer
    if wpm:
        write_wordpiece(r, a.out)
    elif spm:
        gemma = bool(recipe) and str(recipe["config"].get("model_type", "")).startswith("gemma")
        write_sentencepiece(r, a.out, gemma)
    else:
        write_tokenizer_json(r, pre, a.out, kv)
    write_config(r, a, kv, n_head, n_head_kv, n_layers, tied, recipe, arch)


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_field(num, wire, payload):
    """A protobuf field: wire 0 varint (payload int), 2 bytes, 5 fixed32 (payload bytes)."""
    key = varint((num << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def write_sentencepiece(r, out_dir, gemma):
    """tokenizer.model (a sentencepiece ModelProto) with the GGUF's pieces, scores and types:
    a BPE model with byte fallback and an identity normalizer that adds a dummy prefix, as
    Llama's (Gemma's: no dummy prefix, and the Gemma tokenizer class)."""
    tokens = field(r, "tokenizer.ggml.tokens")
    scores = field(r, "tokenizer.ggml.scores")
    types = field(r, "tokenizer.ggml.token_type")
    body = bytearray()
    for t, sc, ty in zip(tokens, scores, types):
        piece = pb_field(1, 2, t.encode("utf-8")) + pb_field(2, 5, np.float32(sc).tobytes())
        piece += pb_field(3, 0, int(ty))
        body += pb_field(1, 2, piece)
    trainer = (pb_field(3, 0, 2) + pb_field(4, 0, len(tokens)) + pb_field(35, 0, 1)
               + pb_field(40, 0, 0) + pb_field(41, 0, 1) + pb_field(42, 0, 2))
    body += pb_field(2, 2, trainer)
    normalizer = (pb_field(1, 2, b"identity") + pb_field(3, 0, 0 if gemma else 1) + pb_field(4, 0, 0)
                  + pb_field(5, 0, 1))
    body += pb_field(3, 2, normalizer)
    with open(os.path.join(out_dir, "tokenizer.model"), "wb") as f:
        f.write(bytes(body))
    tok = lambda k: None if field(r, k) is None else tokens[field(r, k)]  # noqa: E731
    tcfg = {"tokenizer_class": "GemmaTokenizer" if gemma else "LlamaTokenizer", "legacy": False,
            "clean_up_tokenization_spaces": False,
            "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", True)),
            "add_eos_token": bool(field(r, "tokenizer.ggml.add_eos_token", False))}
    for key, name in (("tokenizer.ggml.bos_token_id", "bos_token"), ("tokenizer.ggml.eos_token_id", "eos_token"),
                      ("tokenizer.ggml.unknown_token_id", "unk_token")):
        if tok(key) is not None:
            tcfg[name] = tok(key)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tcfg, f, ensure_ascii=False, indent=2)


def write_wordpiece(r, out_dir):
    """A BERT WordPiece tokenizer.json from the GGUF's phantom-space vocabulary (a leading
    U+2581 marks a word start; other pieces are `##` continuations), uncased, with the
    [CLS] A [SEP] template; and a sentence-transformers CLS pooling module."""
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    vocab = {}
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty == gguf.TokenType.CONTROL:
            text = t
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True})
        elif t.startswith("\u2581"):
            text = t[1:]
        else:
            text = "##" + t
        vocab.setdefault(text, i)
    sid = lambda name: next(i for i, t in enumerate(tokens) if t == name)  # noqa: E731
    cls, sep = sid("[CLS]"), sid("[SEP]")
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]}},
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
    tcfg = {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "clean_up_tokenization_spaces": True,
            "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
            "mask_token": "[MASK]", "model_max_length": 512}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tcfg, f, ensure_ascii=False, indent=2)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    with open(os.path.join(out_dir, "modules.json"), "w") as f:
        json.dump(modules, f, indent=2)
    os.makedirs(os.path.join(out_dir, "1_Pooling"), exist_ok=True)
    with open(os.path.join(out_dir, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 0, "pooling_mode_cls_token": True,
                   "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False}, f, indent=2)


def write_tokenizer_json(r, pre, out_dir, kv):
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    n_real = len(tokens)
    while n_real > 0 and types[n_real - 1] == gguf.TokenType.UNUSED:
        n_real -= 1
    vocab = {}
    added = []
    for i in range(n_real):
        vocab[tokens[i]] = i
        if types[i] in (gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED):
            added.append({
                "id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": types[i] == gguf.TokenType.CONTROL,
            })
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": NORMALIZERS[pre],
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": vocab, "merges": [m.split(" ") for m in merges],
        },
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)

    def tok(key):
        i = field(r, f"tokenizer.ggml.{key}")
        return None if i is None else tokens[i]

    tcfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": kv("context_length"),
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added},
    }
    for key, name in (("bos_token_id", "bos_token"), ("eos_token_id", "eos_token"),
                      ("unknown_token_id", "unk_token"), ("padding_token_id", "pad_token")):
        if tok(key) is not None:
            tcfg[name] = tok(key)
    if (add_bos := field(r, "tokenizer.ggml.add_bos_token")) is not None:
        tcfg["add_bos_token"] = bool(add_bos)
    if (template := field(r, "tokenizer.chat_template")) is not None:
        tcfg["chat_template"] = template
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tcfg, f, ensure_ascii=False, indent=2)


def write_config(r, a, kv, n_head, n_head_kv, n_layers, tied, recipe, arch):
    tokens = field(r, "tokenizer.ggml.tokens")
    # --- config
    if recipe:
        return write_json_configs(a.out, recipe["config"])
    hf_arch, model_type = HF_ARCH[arch]
    cfg = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "hidden_act": "silu",
        "hidden_size": kv("embedding_length"),
        "intermediate_size": kv("feed_forward_length"),
        "num_hidden_layers": n_layers,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_head_kv,
        "max_position_embeddings": kv("context_length"),
        "rms_norm_eps": float(np.float32(kv("attention.layer_norm_rms_epsilon"))),
        "rope_theta": float(kv("rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "vocab_size": len(tokens),
        "tie_word_embeddings": tied,
        "torch_dtype": {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[a.dtype],
        "initializer_range": 0.02,
        "use_cache": True,
        "attention_dropout": 0.0,
    }
    # rms_norm_eps as Python writes the decimal a config carries (1e-05, not 9.99999974e-06)
    cfg["rms_norm_eps"] = float(f"{cfg['rms_norm_eps']:.6g}")
    for key, name in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        if (i := field(r, f"tokenizer.ggml.{key}")) is not None:
            cfg[name] = int(i)
    if arch == "llama":
        cfg.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1,
                    "head_dim": kv("embedding_length") // n_head})
    else:
        cfg.update({"use_sliding_window": False, "sliding_window": kv("context_length"),
                    "max_window_layers": n_layers})
    write_json_configs(a.out, cfg)


def write_json_configs(out, cfg):
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)

    gen = {"bos_token_id": cfg.get("bos_token_id"), "eos_token_id": cfg.get("eos_token_id"),
           "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)


if __name__ == "__main__":
    main()
