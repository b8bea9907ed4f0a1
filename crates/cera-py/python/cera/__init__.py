"""Cera from Python: load a GGUF model once (`Engine`), generate in sessions (`Session`),
stream text (`Stream`), embed texts, attach LoRA adapters.

    import cera
    engine = cera.Engine("smollm2-135m")          # a path or a catalog name
    s = engine.session(n_ctx=2048)
    for piece in s.generate("Once upon a time", max_tokens=32, temperature=0, stream=True):
        print(piece, end="", flush=True)

`cera.Llama` takes llama-cpp-python's arguments and returns its OpenAI-shaped dicts
(`create_completion`, `create_chat_completion` with tools and `response_format`,
`create_embedding`), so code written for `llama_cpp.Llama` switches by changing the import.

`cera.Whisper` transcribes speech (OpenAI's verbose_json as a dict, or srt/vtt/text):

    w = cera.Whisper("whisper-tiny.en")
    print(w.transcribe("talk.wav")["text"])

Generation runs with the GIL released: sessions of one engine generate concurrently from
several Python threads, and `Session.cancel()` stops a running generation from another one.
"""

from ._cera import (  # noqa: F401
    CancelledError,
    CeraError,
    Chat,
    ChatStream,
    ContextOverflowError,
    Engine,
    LoraAdapter,
    LoraError,
    Mmproj,
    ModelLoadError,
    Session,
    Stream,
    Whisper,
    __version__,
)
from .llama import Llama  # noqa: F401

__all__ = [
    "CancelledError",
    "CeraError",
    "Chat",
    "ChatStream",
    "Llama",
    "ContextOverflowError",
    "Engine",
    "LoraAdapter",
    "LoraError",
    "Mmproj",
    "ModelLoadError",
    "Session",
    "Stream",
    "Whisper",
    "__version__",
]
