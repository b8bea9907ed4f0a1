#!/usr/bin/env python3
"""Writes a GGUF holding only a model's tokenizer (every `tokenizer.*` key, no tensors): what
`make_test_model --tokenizer` needs to build random-weight models of that model's exact shape
on a machine that cannot fetch the model (the GPU machine; see scripts/bench-gpu.sh).

    python3 scripts/vocab-only.py MODEL.gguf OUT.gguf      (needs the `gguf` package)
"""
import sys

import gguf

src, out = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(src)
arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
w = gguf.GGUFWriter(out, arch)
for name, f in r.fields.items():
    if not name.startswith("tokenizer."):
        continue
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        et = f.types[1]
        if et == gguf.GGUFValueType.STRING:
            vals = [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
        else:
            vals = [f.parts[i].tolist()[0] for i in f.data]
        w.add_key_value(name, vals, t, sub_type=et)
    elif t == gguf.GGUFValueType.STRING:
        w.add_key_value(name, bytes(f.parts[-1]).decode("utf-8", errors="surrogateescape"), t)
    else:
        w.add_key_value(name, f.parts[-1].tolist()[0], t)
w.write_header_to_file()
w.write_kv_data_to_file()
w.close()
