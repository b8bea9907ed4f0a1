#!/usr/bin/env python3
"""Writes crates/cera-cli/tests/fixtures/convert.json from llama.cpp's convert_hf_to_gguf.py.

For each checkpoint (made by scripts/make-hf-checkpoint.py from one of our GGUF models, so CI can
make the same bytes without torch): the sha256 of every input file, then the sha256 of
convert_hf_to_gguf.py's output for each --outtype, of llama-quantize's quantization of its
lossless (`auto`) output for the quantized types, and the greedy continuation transformers
gives on the checkpoint itself (the "original" the converted model must reproduce).

usage: scripts/gen-convert-fixtures.py
Needs: a Python with torch, transformers, numpy and gguf (PYTHON=..., default python3), the
llama.cpp source (LLAMA_SRC=..., default the one build-llama-cpp.sh fetches) and llama-quantize
(LLAMA_BIN=a folder with it built). CI needs none of these.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "crates", "cera-cli", "tests", "fixtures", "convert.json")
MODELS = os.path.expanduser("~/.cache/cera/models")
PYTHON = os.environ.get("PYTHON", sys.executable)
SRC = os.environ.get("LLAMA_SRC", os.path.expanduser("~/.cache/cera-peers/llama.cpp-11434.0.0/src/llama.cpp"))
BIN = os.environ.get("LLAMA_BIN", os.path.join(SRC, "build", "bin"))

PROMPT = "The capital of France is"
N_GREEDY = 16

# name, source GGUF, folder name (the converter reads names from it), make-hf-checkpoint flags,
# converter outtypes, llama-quantize types (from the `auto` output)
CHECKPOINTS = [
    ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct", ["--dtype", "bf16"],
     ["f32", "f16", "bf16", "q8_0", "auto"], ["Q4_K_M", "Q4_0"]),
    ("smollm2-f32", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M", ["--dtype", "f32"],
     ["f16", "auto"], []),
    # sharded (index + 4 files), qkv biases, 151936 tokens with unused [PAD] ids (the lossless
    # output and one quantization: the other outtypes are SmolLM2's, on the same code, and each
    # costs CI ten seconds at this size)
    ("qwen", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf", "Qwen2.5-Coder-0.5B-Instruct",
     ["--dtype", "bf16", "--shard-mb", "400"], ["auto"], ["Q4_K_M"]),
]


# Random-weight checkpoints of the other architectures we run, at small shapes: transformers
# builds each model from its config, and the recipe (its config.json and tensor names/shapes
# in saving order) goes in the fixture; make-hf-checkpoint.py fills it with hashed values and
# SmolLM2's tokenizer. (name, transformers config class, config arguments, outtypes)
SMALL = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
             pad_token_id=2)
SPM_SMALL = dict(SMALL, vocab_size=32000, pad_token_id=0)
RANDOM = [
    ("qwen3", "Qwen3Config", dict(SMALL, num_hidden_layers=2, head_dim=32, rms_norm_eps=1e-6,
                                    tie_word_embeddings=True), ["f16", "q8_0", "auto"]),
    ("granite", "GraniteConfig", dict(SMALL, num_hidden_layers=2, embedding_multiplier=12.0,
                                        attention_multiplier=0.015625, residual_multiplier=0.22,
                                        logits_scaling=8.0, tie_word_embeddings=True), ["f16", "auto"]),
    ("olmo2", "Olmo2Config", dict(SMALL, num_hidden_layers=2, rms_norm_eps=1e-6,
                                    tie_word_embeddings=False), ["f16", "auto"]),
    ("lfm2", "Lfm2Config", dict(SMALL, num_hidden_layers=4, conv_L_cache=3, block_multiple_of=32,
                                  layer_types=["conv", "conv", "full_attention", "conv"]), ["f16", "q8_0", "auto"]),
    ("lfm2moe", "Lfm2MoeConfig", dict(SMALL, num_hidden_layers=3, moe_intermediate_size=32, num_experts=4,
                                        num_experts_per_tok=2, num_dense_layers=1,
                                        layer_types=["conv", "full_attention", "conv"]), ["f16", "auto"]),
    # SentencePiece vocabularies (tokenizer.model written from llama.cpp's Llama SPM test vocab)
    ("gemma2", "Gemma2Config", dict(SPM_SMALL, num_hidden_layers=2, head_dim=32, rms_norm_eps=1e-6,
                                      sliding_window=64, attn_logit_softcapping=50.0,
                                      final_logit_softcapping=30.0, query_pre_attn_scalar=32), ["f16", "auto"]),
    # six layers: Gemma 3's own pattern of five sliding-window layers and a global one (the
    # GGUF has no per-layer pattern: llama.cpp, and we, assume it)
    ("gemma3", "Gemma3TextConfig", dict(SPM_SMALL, num_hidden_layers=6, head_dim=32, rms_norm_eps=1e-6,
                                          sliding_window=64, query_pre_attn_scalar=32),
     ["f16", "q8_0", "auto"]),
    ("phi3", "Phi3Config", dict(SPM_SMALL, num_hidden_layers=2, num_key_value_heads=4,
                                  original_max_position_embeddings=4096), ["f16", "auto"]),
]
SPM_VOCAB = "test-data/ggml-vocab-llama-spm.gguf"
# BERT (an encoder: checked by its embedding, not by generation), with the bge WordPiece vocab
BERT = ("bert", "BertConfig", dict(vocab_size=30522, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=512,
                                   type_vocab_size=2, pad_token_id=0), ["f16", "auto"])
BERT_VOCAB = "test-data/ggml-vocab-bert-bge.gguf"
EMBED_TEXT = "The quick brown fox jumps over the lazy dog."


def recipe(cls_name, args):
    import transformers
    from transformers import AutoModel, AutoModelForCausalLM

    cfg = getattr(transformers, cls_name)(**args)
    model = (AutoModel if cls_name == "BertConfig" else AutoModelForCausalLM).from_config(cfg)
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(d, "model.safetensors"), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
    tensors = [[k, v["shape"]] for k, v in header.items() if k != "__metadata__"]
    return {"config": config, "tensors": tensors}


def model_path(name):
    """A model in cera's cache, or `test-data/FILE`: one of llama.cpp's vocab test files."""
    if name.startswith("test-data/"):
        return os.path.join(MODELS, "..", "test-data", "llama.cpp-11434.0.0", "models", name[len("test-data/"):])
    return os.path.join(MODELS, name)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)}:\n{r.stderr[-3000:]}")
    return r


def embedding(ckpt):
    """transformers' CLS embedding of EMBED_TEXT, L2-normalized (the checkpoint's pooling)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModel.from_pretrained(ckpt, dtype=torch.float32)
    enc = tok(EMBED_TEXT, return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state[0, 0]
    h = h / h.norm()
    return {"text": EMBED_TEXT, "ids": enc.input_ids[0].tolist(), "vector": [round(float(x), 7) for x in h]}


def greedy(ckpt):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32)
    # the tokenizer's own convention (BOS where it adds one), as `cera run --raw` follows the GGUF
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=N_GREEDY, do_sample=False, top_p=None, top_k=None,
                             temperature=None, repetition_penalty=None)
    new = out[0, ids.shape[1]:].tolist()
    # the continuation as it reads after the prompt (SentencePiece decoders drop the space of
    # a text's first piece; after a prompt it stays, as `cera run` prints it)
    prefix = tok.decode(ids[0].tolist(), skip_special_tokens=False)
    full = tok.decode(ids[0].tolist() + new, skip_special_tokens=False)
    text = full[len(prefix):] if full.startswith(prefix) else tok.decode(new, skip_special_tokens=False)
    return {"prompt": PROMPT, "prompt_ids": ids[0].tolist(), "tokens": new, "text": text}


def main():
    fixture = {"prompt": PROMPT, "n_greedy": N_GREEDY, "checkpoints": []}
    todo = [(n, m, f, fl, o, q, None) for n, m, f, fl, o, q in CHECKPOINTS]
    for name, cls_name, args, outtypes in RANDOM + [BERT]:
        vocab = {32000: SPM_VOCAB, 30522: BERT_VOCAB}.get(args["vocab_size"], "SmolLM2-135M-Instruct.Q4_1.gguf")
        todo.append((name, vocab, f"{name}-tiny-random", ["--dtype", "bf16"], outtypes, [],
                     recipe(cls_name, args)))
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, folder, flags, outtypes, quants, rec in todo:
            ckpt = os.path.join(tmp, name, folder)
            if rec is not None:
                rpath = os.path.join(tmp, f"{name}-recipe.json")
                with open(rpath, "w") as f:
                    json.dump(rec, f)
                flags = flags + ["--recipe", rpath]
            run([PYTHON, os.path.join(HERE, "make-hf-checkpoint.py"), model_path(model), ckpt, *flags])
            inputs = {os.path.relpath(os.path.join(d, f), ckpt): sha256(os.path.join(d, f))
                      for d, _, files in os.walk(ckpt) for f in files}
            inputs = dict(sorted(inputs.items()))
            cases = []
            for ot in outtypes:
                out = os.path.join(tmp, name, f"{ot}.gguf")
                run([PYTHON, os.path.join(SRC, "convert_hf_to_gguf.py"), ckpt, "--outtype", ot, "--outfile", out])
                cases.append({"outtype": ot, "sha256": sha256(out), "size": os.path.getsize(out)})
                print(f"{name} {ot}: {cases[-1]['sha256'][:16]}", file=sys.stderr)
                if ot != "auto":
                    os.remove(out)
            auto = os.path.join(tmp, name, "auto.gguf")
            for q in quants:
                out = os.path.join(tmp, name, f"{q}.gguf")
                run([os.path.join(BIN, "llama-quantize"), auto, out, q, "2"],
                    env=dict(os.environ, LD_LIBRARY_PATH=BIN))
                cases.append({"outtype": q, "sha256": sha256(out), "size": os.path.getsize(out)})
                print(f"{name} {q}: {cases[-1]['sha256'][:16]}", file=sys.stderr)
                os.remove(out)
            os.remove(auto)
            if name == "bert":
                g = embedding(ckpt)
                print(f"{name} embedding: {g['vector'][:4]}", file=sys.stderr)
            else:
                g = greedy(ckpt)
                print(f"{name} greedy: {g['text']!r}", file=sys.stderr)
            fixture["checkpoints"].append({
                "name": name, "model": model, "folder": folder,
                "flags": [f for f in flags if not f.endswith("-recipe.json") and f != "--recipe"],
                "recipe": rec, "inputs": inputs, "cases": cases, ("embedding" if name == "bert" else "greedy"): g,
            })
    with open(OUT, "w") as f:
        json.dump(fixture, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
