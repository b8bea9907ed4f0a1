#!/usr/bin/env python3
"""Writes a random LoRA adapter (llama.cpp's GGUF adapter format) for a GGUF base model: rank R
on every attention, FFN and LFM2 convolution projection, weights in f32 or f16.

usage: scripts/make-lora-adapter.py BASE.gguf OUT.gguf [RANK=16] [f32|f16] [ALPHA=2*RANK]
Needs the `gguf` and `numpy` packages (pip install gguf numpy).
"""
import math
import re
import sys

import numpy as np
import gguf

TARGETS = re.compile(r"^blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|attn_qkv|ffn_gate|ffn_up|ffn_down|"
                     r"shortconv\.in_proj|shortconv\.out_proj)\.weight$")


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    base, out = sys.argv[1], sys.argv[2]
    rank = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    dtype = np.float16 if (sys.argv[4] if len(sys.argv) > 4 else "f16") == "f16" else np.float32
    alpha = float(sys.argv[5]) if len(sys.argv) > 5 else 2.0 * rank
    r = gguf.GGUFReader(base)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(out, arch)
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    n = 0
    for t in r.tensors:
        if not TARGETS.match(t.name):
            continue
        n_in, n_out = int(t.shape[0]), int(t.shape[1])
        a = (rng.uniform(-1, 1, (rank, n_in)) * 0.5 / math.sqrt(n_in)).astype(dtype)
        b = (rng.uniform(-1, 1, (n_out, rank)) * 0.5 / math.sqrt(rank)).astype(dtype)
        w.add_tensor(t.name + ".lora_a", a)
        w.add_tensor(t.name + ".lora_b", b)
        n += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{out}: {n} projections, rank {rank}, {np.dtype(dtype).name}")


if __name__ == "__main__":
    main()
