"""Type stubs of the native module (`cera._cera`)."""

import os
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union, overload, Literal

__version__: str

class CeraError(RuntimeError):
    """An error from the Cera engine (the message carries its context)."""

class ModelLoadError(CeraError):
    """The model file is missing, unreadable, corrupt or of an unsupported kind."""

class ContextOverflowError(CeraError):
    """The prompt (or prompt and reply) does not fit in the session's context."""

class LoraError(CeraError):
    """A LoRA adapter that does not fit the model or cannot be read."""

class CancelledError(CeraError):
    """The operation was cancelled from another thread."""

class LoraAdapter:
    """A loaded LoRA adapter (attach it to sessions)."""
    @property
    def name(self) -> str: ...

class Mmproj:
    """A loaded vision projector (`Engine.load_mmproj`): images go into sessions through it."""

class Whisper:
    """A loaded Whisper model (a GGUF path or a catalog name such as "whisper-tiny.en")."""
    def __init__(self, model: str, n_threads: Optional[int] = None) -> None: ...
    @property
    def multilingual(self) -> bool: ...
    def transcribe(
        self,
        audio: Union[bytes, str, "os.PathLike[str]", Sequence[float]],
        language: Optional[str] = None,
        translate: bool = False,
        timestamps: bool = True,
        beam_size: int = 5,
        best_of: int = 5,
        temperature: float = 0.0,
        fallback: bool = True,
        condition_on_previous_text: bool = True,
        initial_prompt: Optional[str] = None,
        response_format: str = "verbose_json",
    ) -> Any:
        """The transcript: a dict (verbose_json, json) or a string (text, srt, vtt)."""
    def detect_language(
        self, audio: Union[bytes, str, "os.PathLike[str]", Sequence[float]]
    ) -> List[Tuple[str, float]]: ...

class Stream(Iterator[str]):
    """Text pieces of a streaming `Session.generate`, in order."""
    def __iter__(self) -> "Stream": ...
    def __next__(self) -> str: ...
    @property
    def finish_reason(self) -> Optional[str]:
        """Why generation ended ("stop", "length", "cancelled", …) once exhausted."""
    def take_logprobs(self) -> List[Tuple[int, float, List[Tuple[int, float]]]]:
        """With `logprobs=N`: (token, logprob, N most likely (token, logprob)) for the tokens
        behind the pieces returned since the last call."""

class Session:
    """One sequence's context."""
    def append_image(self, mmproj: Mmproj, image: Union[bytes, str, "os.PathLike[str]"]) -> int:
        """Appends an image (its bytes or path: JPEG, PNG, WebP, GIF) as `mmproj`'s model reads
        it; returns the positions it took. A later `generate` continues after it."""
        ...
    @overload
    def generate(
        self,
        prompt: str,
        max_tokens: int = 128,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[List[str]] = None,
        stream: Literal[False] = False,
    ) -> str: ...
    @overload
    def generate(
        self,
        prompt: str,
        max_tokens: int = 128,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[List[str]] = None,
        *,
        stream: Literal[True],
        logprobs: Optional[int] = None,
    ) -> Stream: ...
    def cancel(self) -> None:
        """Stops a running `generate` from another thread (within a token)."""
    @property
    def timings(self) -> Optional[dict]:
        """The engine's own counts and times of the last `generate` (as `cera run` prints
        them): prompt_tokens, prompt_ms, generated_tokens, decode_ms, decode_tps,
        finish_reason."""
    @property
    def tokens(self) -> List[int]: ...
    @property
    def n_ctx(self) -> int: ...
    def reset(self) -> None: ...
    def attach_lora(self, adapter: LoraAdapter, scale: float = 1.0) -> None: ...
    def detach_lora(self, adapter: LoraAdapter) -> bool: ...
    def checkpoint(self) -> bytes:
        """The session's state (context, KV cache, sampler) as bytes, for `restore`."""
    def restore(self, state: bytes) -> None: ...
    def save_checkpoint(self, path: str) -> None: ...
    def load_checkpoint(self, path: str) -> None: ...

class Engine:
    """A loaded model: a GGUF path or a catalog name (fetched when missing)."""
    def __init__(self, model: str, n_threads: Optional[int] = None, device: str = "auto") -> None: ...
    def session(
        self,
        n_ctx: int = 0,
        cache_type_k: Optional[str] = None,
        cache_type_v: Optional[str] = None,
    ) -> Session: ...
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]: ...
    def detokenize(self, ids: List[int]) -> str: ...
    def embed(
        self, texts: List[str], pooling: Optional[str] = None, normalize: int = 2
    ) -> List[List[List[float]]]:
        """Per text: one pooled vector, or one per token with pooling="none"."""
    def load_lora(self, path: str) -> LoraAdapter: ...
    def load_mmproj(self, path: Union[str, "os.PathLike[str]"]) -> Mmproj:
        """Loads this model's vision projector (llama.cpp's `--mmproj` GGUF)."""
        ...
    def generate_batch(
        self,
        prompts: List[str],
        max_tokens: int = 128,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[List[str]] = None,
        n_ctx: int = 0,
        ignore_eos: bool = False,
    ) -> List[dict]:
        """Every prompt at once, in shared batched steps: per prompt a dict with `text`,
        `finish_reason`, `prompt_tokens` and `completion_tokens`."""
    def chat(self, n_ctx: int = 0) -> "Chat": ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def n_ctx_train(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def backend(self) -> str:
        """Where the model runs: "CPU", "Vulkan", "Metal" or "DX12"."""
    @property
    def device(self) -> str:
        """The device in words (GPU adapter and API, or the CPU's kernel tier)."""

class ChatStream(Iterator[str]):
    """Raw text pieces of a streaming `Chat.complete` (tool-call markup included)."""
    def __iter__(self) -> "ChatStream": ...
    def __next__(self) -> str: ...
    @property
    def result(self) -> Optional[dict]:
        """The finished turn (as `Chat.complete` returns it) once exhausted."""
    def take_logprobs(self) -> List[Tuple[int, float, List[Tuple[int, float]]]]:
        """As `Stream.take_logprobs`."""

class Chat:
    """A conversation with the model's chat template (messages and tools as JSON text)."""
    def set_tools(self, tools_json: Optional[str] = None) -> None: ...
    def ingest(self, message_json: str) -> None: ...
    def ingest_tool_result(self, id: str, content: str) -> None: ...
    def reset(self) -> None: ...
    def checkpoint(self) -> bytes:
        """The conversation (messages, tools, context) as bytes, for `restore`."""
    def restore(self, state: bytes) -> None: ...
    def save(self, path: str) -> None: ...
    def load(self, path: str) -> None: ...
    def messages_json(self) -> str: ...
    def stream(
        self,
        max_tokens: int = 0,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[List[str]] = None,
        json_schema: Optional[str] = None,
        json_object: bool = False,
        tool_choice: Optional[str] = None,
        logprobs: Optional[int] = None,
    ) -> ChatStream:
        """`complete(..., stream=True)`."""
    def stream_json(
        self,
        schema: Union[dict, str],
        max_tokens: int = 0,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[List[str]] = None,
    ) -> ChatStream:
        """A reply constrained to the JSON Schema `schema`, streamed."""
    def cancel(self) -> None: ...
    def complete(
        self,
        max_tokens: int = 0,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[List[str]] = None,
        json_schema: Optional[str] = None,
        json_object: bool = False,
        tool_choice: Optional[str] = None,
        stream: bool = False,
        logprobs: Optional[int] = None,
    ) -> Union[dict, ChatStream]:
        """The reply: {text, tool_calls: [{id, name, arguments}], finish_reason,
        prompt_tokens, completion_tokens, reused_tokens}, or a ChatStream."""
