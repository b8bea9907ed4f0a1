#!/usr/bin/env python3
"""Writes a Whisper checkpoint in Hugging Face's layout (model.safetensors, config.json,
generation_config.json, tokenizer.json), as transformers' WhisperForConditionalGeneration and
WhisperTokenizerFast save it, from one of our Whisper GGUFs, so that `cera convert` can be
checked on that layout: converted back, it must give the GGUF it was made from.

    make-hf-whisper.py WHISPER.gguf OUT_DIR [--mels 128] [--proj-out]

Names are transformers' (`model.encoder.layers.N.self_attn.q_proj.weight`…; the output
projection is tied and not saved, as transformers saves it); each tensor keeps the GGUF's
dtype (f16 or f32). tokenizer.json lists ids up to <|notimestamps|>, as the files of the
first openai/whisper-* uploads do (the timestamps are implied).

--mels 128 writes a 128-band model (large-v3's front end) of the same weights: the first
convolution's input is the 80-band one composed with a linear interpolation of the 128 bands
at the 80 bands' centres (both are evenly spaced on the mel scale over 0-8 kHz, and Slaney's
area normalization makes a band's value the spectrum's mean density there), so the model sees
nearly the log-mel it was trained on and must still transcribe speech.

--proj-out saves the output projection too, the token embedding's values (as a checkpoint
saved without tying does; a test alters them for a model `cera convert` must refuse: Whisper
ties them).

Only numpy and the `gguf` package (the safetensors writer is make-hf-checkpoint.py's).
"""

import argparse
import importlib.util
import json
import os

import numpy as np
import gguf

spec = importlib.util.spec_from_file_location(
    "make_hf_checkpoint", os.path.join(os.path.dirname(__file__), "make-hf-checkpoint.py"))
mhc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mhc)

PROJ = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "out": "out_proj"}
MODULES = {"attn_ln": "self_attn_layer_norm", "cross_attn_ln": "encoder_attn_layer_norm",
           "mlp_ln": "final_layer_norm", "mlp.0": "fc1", "mlp.2": "fc2"}


def hf_name(name):
    fixed = {"encoder.positional_embedding": "encoder.embed_positions.weight",
             "decoder.positional_embedding": "decoder.embed_positions.weight",
             "decoder.token_embedding.weight": "decoder.embed_tokens.weight"}
    if name in fixed:
        return "model." + fixed[name]
    if name.startswith("encoder.conv"):
        return "model." + name
    if name.startswith("encoder.ln_post."):
        return "model.encoder.layer_norm." + name.split(".")[-1]
    if name.startswith("decoder.ln."):
        return "model.decoder.layer_norm." + name.split(".")[-1]
    side, rest = name.split(".blocks.")
    layer, rest = rest.split(".", 1)
    module, param = rest.rsplit(".", 1)
    if module in MODULES:
        m = MODULES[module]
    else:
        a, p = module.split(".")
        m = {"attn": "self_attn", "cross_attn": "encoder_attn"}[a] + "." + PROJ[p]
    return f"model.{side}.layers.{layer}.{m}.{param}"


def mel_points(n_mel):
    """The Slaney mel scale's n_mel + 2 edges from 0 to 8 kHz, in mel."""
    def hz_to_mel(f):
        return f * 3 / 200 if f < 1000 else 15 + np.log(f / 1000) / (np.log(6.4) / 27)
    return np.linspace(hz_to_mel(0.0), hz_to_mel(8000.0), n_mel + 2)


def interpolation(n_from, n_to):
    """[n_to, n_from]: each target band's centre as a linear interpolation of the source's."""
    src = mel_points(n_from)[1:-1]
    dst = mel_points(n_to)[1:-1]
    a = np.zeros((n_to, n_from), dtype=np.float64)
    for i, m in enumerate(dst):
        j = np.clip(np.searchsorted(src, m) - 1, 0, n_from - 2)
        t = np.clip((m - src[j]) / (src[j + 1] - src[j]), 0.0, 1.0)
        a[i, j], a[i, j + 1] = 1 - t, t
    return a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--mels", type=int, default=None)
    ap.add_argument("--proj-out", action="store_true")
    a = ap.parse_args()
    r = gguf.GGUFReader(a.gguf)
    f = lambda k, d=None: mhc.field(r, k, d)
    os.makedirs(a.out, exist_ok=True)

    n_mels = f("whisper.audio.num_mel_bins")
    tensors = []
    for t in r.tensors:
        shape = [int(d) for d in reversed(t.shape)]
        data = np.asarray(t.data)
        if t.tensor_type == gguf.GGMLQuantizationType.F16:
            dt, arr = "F16", data.astype(np.float16).reshape(shape)
        elif t.tensor_type == gguf.GGMLQuantizationType.F32:
            dt, arr = "F32", data.astype(np.float32).reshape(shape)
        else:
            raise SystemExit(f"{t.name}: {t.tensor_type.name} (write from an f16/f32 GGUF)")
        if t.name == "encoder.conv1.weight" and a.mels and a.mels != n_mels:
            # [d, n_mels, 3] -> [d, a.mels, 3] through the interpolation of the bands
            m = interpolation(a.mels, n_mels)
            arr = np.einsum("dmk,mn->dnk", arr.astype(np.float64), m).astype(arr.dtype)
            shape = list(arr.shape)
        tensors.append((hf_name(t.name), dt, shape, np.ascontiguousarray(arr).tobytes()))
        if t.name == "decoder.token_embedding.weight" and a.proj_out:
            tensors.append(("proj_out.weight", dt, shape, np.ascontiguousarray(arr).tobytes()))
    if a.mels:
        n_mels = a.mels
    mhc.write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)

    tokens = f("tokenizer.ggml.tokens")
    merges = f("tokenizer.ggml.merges")
    eot = f("tokenizer.ggml.eos_token_id")
    no_ts = tokens.index("<|notimestamps|>")
    vocab = {t: i for i, t in enumerate(tokens[:eot + 1])}
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i in range(eot, no_ts + 1)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
    }
    d = f("whisper.encoder.embedding_length")
    suppress = [int(x) for x in f("whisper.suppress_tokens", [])]
    begin = [int(x) for x in f("whisper.suppress_tokens_begin", [])]
    config = {
        "architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper",
        "activation_function": "gelu", "d_model": d,
        "encoder_layers": f("whisper.encoder.block_count"),
        "encoder_attention_heads": f("whisper.encoder.attention.head_count"),
        "encoder_ffn_dim": 4 * d,
        "decoder_layers": f("whisper.decoder.block_count"),
        "decoder_attention_heads": f("whisper.decoder.attention.head_count"),
        "decoder_ffn_dim": 4 * d,
        "max_source_positions": f("whisper.encoder.context_length"),
        "max_target_positions": f("whisper.decoder.context_length"),
        "num_mel_bins": n_mels, "vocab_size": len(tokens),
        "bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot,
        "decoder_start_token_id": tokens.index("<|startoftranscript|>"),
        "scale_embedding": False, "tie_word_embeddings": True, "torch_dtype": "float16",
        "suppress_tokens": suppress, "begin_suppress_tokens": begin,
    }
    heads = [int(x) for x in f("whisper.alignment_heads", [])]
    generation = {
        "alignment_heads": [heads[i:i + 2] for i in range(0, len(heads), 2)],
        "suppress_tokens": suppress, "begin_suppress_tokens": begin,
        "no_timestamps_token_id": no_ts, "max_length": 448,
        "is_multilingual": len(tokens) >= 51865,
    }
    lang_ids = [int(x) for x in f("whisper.lang_ids", [])]
    if lang_ids:
        generation["lang_to_id"] = {tokens[i]: i for i in lang_ids}
    for name, obj in (("tokenizer.json", tok), ("config.json", config),
                      ("generation_config.json", generation)):
        with open(os.path.join(a.out, name), "w") as fh:
            json.dump(obj, fh, indent=2, ensure_ascii=False)
            fh.write("\n")


if __name__ == "__main__":
    main()
