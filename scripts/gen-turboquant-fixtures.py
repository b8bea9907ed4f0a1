#!/usr/bin/env python3
"""NumPy reference of TurboQuant's MSE quantizer (Zandieh et al., arXiv 2504.19874) for the KV
cache types tq3/tq4, written independently of the Rust code: the Lloyd-Max codebook of one
coordinate of a random unit vector in b dimensions (density (1 - x^2)^((b-3)/2)), the random
signs (SplitMix64), the orthonormal Walsh-Hadamard matrix built by Kronecker products, and the
encoding of a few vectors. Writes crates/cera/tests/fixtures/turboquant.json.

Deviation from the paper, measured in benchmarks/README.md: the stored per-block scale is the
least-squares one, <y, c> / <c, c>, instead of the norm.

    python3 -m venv target/pyenv && target/pyenv/bin/pip install numpy
    target/pyenv/bin/python scripts/gen-turboquant-fixtures.py
"""
import json
import os

import numpy as np

M64 = (1 << 64) - 1


def lloyd_max(bits, b):
    """Levels in units of 1/sqrt(b): Lloyd's iteration on the density, integrated exactly on
    a fine grid (cumulative trapezoids, interpolated at each boundary)."""
    levels = 1 << bits
    lim = min(np.sqrt(b), 8.0)
    u = np.linspace(-lim, lim, 400001)
    w = np.clip(1.0 - u * u / b, 0.0, None) ** ((b - 3) / 2.0)
    du = u[1] - u[0]
    cw = np.concatenate([[0.0], np.cumsum((w[1:] + w[:-1]) * du / 2)])
    cm = np.concatenate([[0.0], np.cumsum((u[1:] * w[1:] + u[:-1] * w[:-1]) * du / 2)])
    c = -2.5 + 5.0 * (np.arange(levels) + 0.5) / levels
    for _ in range(100000):
        edges = np.concatenate([[-lim], (c[1:] + c[:-1]) / 2, [lim]])
        W = np.interp(edges, u, cw)
        Mm = np.interp(edges, u, cm)
        new = np.diff(Mm) / np.diff(W)
        if np.max(np.abs(new - c)) < 1e-13:
            c = new
            break
        c = new
    return c


def signs(b):
    state = (0x7475_7262_6f00 + b) & M64
    out = []
    for _ in range(b):
        state = (state + 0x9E37_79B9_7F4A_7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & M64
        z ^= z >> 31
        out.append(-1.0 if z >> 63 else 1.0)
    return np.array(out)


def hadamard(n):
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.kron(np.array([[1.0, 1.0], [1.0, -1.0]]), h)
    return h / np.sqrt(n)


def main():
    rng = np.random.default_rng(2504)
    books = {}
    for bits in (3, 4):
        for b in (16, 32, 64, 128, 256):
            books[f"{bits}_{b}"] = lloyd_max(bits, b).tolist()
    vectors = []
    for bits, b in ((3, 64), (4, 64), (3, 128), (4, 128)):
        c = np.array(books[f"{bits}_{b}"])
        bounds = (c[1:] + c[:-1]) / 2
        s = signs(b)
        h = hadamard(b)
        for i in range(6):
            # keys-like rows: a few outlier channels
            x = rng.standard_normal(b) * 0.5
            x[rng.integers(0, b, 2)] *= 12.0
            y = h @ (s * x)
            unit = y * np.sqrt(b) / np.linalg.norm(y)
            codes = np.searchsorted(bounds, unit, side="left")
            cc = c[codes]
            scale = float(y @ cc / (cc @ cc))
            vectors.append({
                "bits": bits,
                "b": b,
                "x": x.tolist(),
                "rotated": y.tolist(),
                "codes": codes.tolist(),
                "scale": scale,
            })
    out = {
        "codebooks": books,
        "signs": {str(b): signs(b).tolist() for b in (64, 128)},
        "vectors": vectors,
    }
    path = os.path.join(os.path.dirname(__file__), "..", "crates", "cera", "tests", "fixtures",
                        "turboquant.json")
    with open(path, "w") as f:
        json.dump(out, f)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
