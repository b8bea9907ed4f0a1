"""Cera from Python: load a GGUF model once (`Engine`), generate in sessions (`Session`),
stream text (`Stream`), embed texts, attach LoRA adapters.

    import cera
    engine = cera.Engine("smollm2-135m")          # a path or a catalog name
    s = engine.session(n_ctx=2048)
    for piece in s.generate("Once upon a time", max_tokens=32, temperature=0, stream=True):
        print(piece, end="", flush=True)

Generation runs with the GIL released: sessions of one engine generate concurrently from
several Python threads, and `Session.cancel()` stops a running generation from another one.
"""

from ._cera import (  # noqa: F401
    CancelledError,
    CeraError,
    ContextOverflowError,
    Engine,
    LoraAdapter,
    LoraError,
    ModelLoadError,
    Session,
    Stream,
    __version__,
)

__all__ = [
    "CancelledError",
    "CeraError",
    "ContextOverflowError",
    "Engine",
    "LoraAdapter",
    "LoraError",
    "ModelLoadError",
    "Session",
    "Stream",
    "__version__",
]
