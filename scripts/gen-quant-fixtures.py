#!/usr/bin/env python3
"""Writes the dequantization fixtures that the Rust tests compare against, bit for bit.

Reference: `gguf.quants.dequantize` from the `gguf` PyPI package (the numpy reference for every
ggml block format).

  random blocks:  crates/cera/tests/fixtures/quant/<TYPE>.bin
      u32 LE n_blocks | n_blocks raw blocks | n_blocks*block_elems f32 LE expected values
      Blocks are random bytes; a block whose reference dequantization is not finite (an f16
      scale that happens to be inf/NaN) is redrawn, so the comparison is bit for bit.
  real models:    crates/cera/tests/fixtures/models/<model>.json
      per tensor: type, shape (ggml order), byte size, and the sha256 of its dequantized f32 LE
      values (for types gguf can dequantize).

usage: scripts/gen-quant-fixtures.py random
       scripts/gen-quant-fixtures.py model NAME PATH.gguf
"""
import hashlib
import json
import os
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "cera", "tests", "fixtures")

RANDOM_TYPES = [
    T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
    T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
    T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M,
    T.IQ4_NL, T.IQ4_XS, T.TQ1_0, T.TQ2_0, T.MXFP4, T.NVFP4,
]


def ref_dequant(raw: np.ndarray, qtype) -> np.ndarray:
    return np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(-1)


def random_fixture(qtype, n_blocks: int, rng) -> None:
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    if block_elems == 1:
        # plain floats: make "blocks" of 64 elements so the file stays small but varied
        block_elems, block_bytes = 64, 64 * block_bytes
    blocks, values = [], []
    while len(blocks) < n_blocks:
        raw = rng.integers(0, 256, size=block_bytes, dtype=np.uint8)
        try:
            with np.errstate(all="ignore"):
                out = ref_dequant(raw, qtype)
        except Exception as e:  # noqa: BLE001 - report which type failed
            raise SystemExit(f"{qtype.name}: gguf cannot dequantize: {e}")
        if not np.all(np.isfinite(out)):
            continue
        assert out.size == block_elems, (qtype.name, out.size)
        blocks.append(raw.tobytes())
        values.append(out.astype("<f4").tobytes())
    path = os.path.join(ROOT, "quant", f"{qtype.name}.bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<I", n_blocks))
        f.write(b"".join(blocks))
        f.write(b"".join(values))
    print(f"wrote {path}")


def model_fixture(name: str, path: str) -> None:
    reader = gguf.GGUFReader(path)
    tensors = []
    for t in reader.tensors:
        qtype = T(int(t.tensor_type))
        entry = {
            "name": t.name,
            "type": qtype.name,
            "shape": [int(x) for x in t.shape],
            "bytes": int(t.n_bytes),
        }
        with np.errstate(all="ignore"):
            vals = ref_dequant(np.asarray(t.data).reshape(-1).view(np.uint8), qtype)
        entry["sha256_f32"] = hashlib.sha256(vals.astype("<f4").tobytes()).hexdigest()
        tensors.append(entry)
        print(f"{t.name} {qtype.name} {entry['shape']}", file=sys.stderr)
    out = {"model": name, "tensor_count": len(tensors), "tensors": tensors}
    os.makedirs(os.path.join(ROOT, "models"), exist_ok=True)
    dst = os.path.join(ROOT, "models", f"{name}.json")
    with open(dst, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {dst}")


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "random":
        rng = np.random.default_rng(20261130)
        os.makedirs(os.path.join(ROOT, "quant"), exist_ok=True)
        for qtype in RANDOM_TYPES:
            random_fixture(qtype, 24, rng)
    elif len(sys.argv) == 4 and sys.argv[1] == "model":
        model_fixture(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
