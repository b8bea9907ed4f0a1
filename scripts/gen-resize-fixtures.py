#!/usr/bin/env python3
"""Reference outputs of Pillow's resampling for crates/cera/tests/media.rs.

The source images are synthetic (the test rebuilds them from the same formula), so the fixture
holds only what Pillow made of them: for each (source size, target size, filter), the SHA-256 of
the resized RGB bytes and its first row. llama.cpp's mtmd resizes with a port of Pillow's
fixed-point resampler, so Pillow's bytes are the reference's.

    target/pyenv/bin/pip install pillow   # 13.0.0 made the committed file
    target/pyenv/bin/python scripts/gen-resize-fixtures.py > crates/cera/tests/fixtures/media/resize.json
"""
import hashlib
import json

import PIL
from PIL import Image


def pattern(w, h):
    """RGB bytes the Rust test rebuilds: smooth gradients, a hard edge and xorshift noise."""
    out = bytearray()
    s = 0x9E3779B9
    for y in range(h):
        for x in range(w):
            s ^= (s << 13) & 0xFFFFFFFF
            s ^= s >> 17
            s ^= (s << 5) & 0xFFFFFFFF
            r = (x * 255 // max(w - 1, 1)) & 0xFF
            g = 255 if (x // 7 + y // 5) % 2 else 0
            b = s & 0xFF
            out += bytes((r, g, b))
    return bytes(out)


FILTERS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC,
           "lanczos": Image.Resampling.LANCZOS}
CASES = [((64, 48), (32, 24)), ((64, 48), (96, 80)), ((97, 31), (40, 57)), ((640, 488), (512, 384)),
         ((640, 488), (224, 171)), ((33, 65), (33, 20)), ((50, 50), (7, 3))]

cases = []
for (sw, sh), (tw, th) in CASES:
    src = Image.frombytes("RGB", (sw, sh), pattern(sw, sh))
    for name, f in FILTERS.items():
        out = src.resize((tw, th), f).tobytes()
        cases.append({"src": [sw, sh], "dst": [tw, th], "filter": name,
                      "sha256": hashlib.sha256(out).hexdigest(), "first_row": list(out[: tw * 3])})
print('{"pillow": %s, "cases": [' % json.dumps(PIL.__version__))
print(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
print("]}")
