#!/usr/bin/env python3
"""Writes crates/cera/tests/fixtures/whisper/mel_filters.json: OpenAI's own Slaney mel
filterbanks for Whisper (80 bands, and the 128 of large-v3), as `whisper/assets/mel_filters.npz`
of the `openai-whisper` package holds them (librosa.filters.mel(sr=16000, n_fft=400)).

The filters are sparse (an FFT bin lies in at most two bands), so the fixture lists the non-zero
entries as [band, bin, value]; every other entry is zero.

    pip download openai-whisper --no-deps --no-binary :all: -d /tmp/ow && tar xzf /tmp/ow/*.tar.gz -C /tmp/ow
    python scripts/gen-whisper-mel-fixture.py /tmp/ow/openai_whisper-*/whisper/assets/mel_filters.npz
"""
import json
import os
import sys

import numpy as np


def main():
    z = np.load(sys.argv[1])
    out = {"source": "openai-whisper 20250625, whisper/assets/mel_filters.npz", "n_fft": 400}
    for key in ("mel_80", "mel_128"):
        a = z[key]
        nz = np.argwhere(a != 0)
        out[key] = {
            "shape": list(a.shape),
            "nonzero": [[int(m), int(k), float(a[m, k])] for m, k in nz],
        }
    path = os.path.join(
        os.path.dirname(__file__), "..", "crates/cera/tests/fixtures/whisper/mel_filters.json"
    )
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(path, {k: len(out[k]["nonzero"]) for k in ("mel_80", "mel_128")})


if __name__ == "__main__":
    main()
