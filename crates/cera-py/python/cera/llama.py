"""A llama-cpp-python compatible layer: `cera.Llama` takes the same constructor and call
arguments as `llama_cpp.Llama` and returns the same OpenAI-shaped dicts and stream chunks, so
code written for llama-cpp-python switches by changing the import:

    from cera import Llama            # was: from llama_cpp import Llama
    llm = Llama(model_path="model.gguf", n_ctx=2048)
    out = llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}])
    print(out["choices"][0]["message"]["content"])

Arguments llama-cpp-python accepts but that have no meaning here (GPU offload, mmap/mlock,
batch sizes, logits_all, …) are accepted and ignored.
"""

import json
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Union

from ._cera import Engine

_FINISH = {"length": "length", "context_full": "length"}


def _finish(engine_reason: Optional[str], tool_calls: bool = False) -> str:
    if tool_calls:
        return "tool_calls"
    return _FINISH.get(engine_reason or "", "stop")


def _messages(messages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """OpenAI messages as the chat template wants them: text parts joined, `developer` as
    `system`, a missing content as an empty string."""
    if not messages:
        raise ValueError("messages must not be empty")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}] is not a dict")
        m = dict(m)
        role = m.get("role")
        if role == "developer":
            m["role"] = "system"
        elif role not in ("system", "user", "assistant", "tool"):
            raise ValueError(
                f"messages[{i}].role {role!r} is not one of system, developer, user, assistant, tool")
        content = m.get("content")
        if isinstance(content, list):
            text = []
            for p in content:
                if not (isinstance(p, dict) and p.get("type") == "text"):
                    kind = p.get("type") if isinstance(p, dict) else type(p).__name__
                    raise ValueError(f"messages[{i}]: content part of type {kind} is not supported (text only)")
                text.append(p.get("text", ""))
            m["content"] = "".join(text)
        elif content is None:
            m["content"] = ""
        out.append(m)
    return out


def _tool_choice(tool_choice: Any) -> Optional[str]:
    if tool_choice is None or isinstance(tool_choice, str):
        return tool_choice
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        return tool_choice["function"]["name"]
    raise ValueError(f"tool_choice {tool_choice!r} is not 'auto', 'none', 'required' or a function")


def _response_format(rf: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """`response_format` as the engine's arguments: llama-cpp-python's
    `{"type": "json_object", "schema": {...}}` and OpenAI's `json_schema` form."""
    if not rf or rf.get("type") == "text":
        return {}
    kind = rf.get("type")
    if kind == "json_object":
        schema = rf.get("schema")
        return {"json_schema": json.dumps(schema)} if schema else {"json_object": True}
    if kind == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema")
        if schema is None:
            raise ValueError("response_format json_schema needs json_schema.schema")
        return {"json_schema": json.dumps(schema)}
    raise ValueError(f"response_format type {kind!r} is not one of text, json_object, json_schema")


def _lp_count(n: Any, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 20:
        raise ValueError(f"{what} must be an integer from 0 to 20, got {n!r}")
    return n


class Llama:
    """A model, as `llama_cpp.Llama`.

    `n_gpu_layers`: 0 (llama-cpp-python's default) runs on the CPU; any other value (-1: all
    layers) runs the whole model on the GPU backend when a hardware GPU is usable, else on the
    CPU, as a llama-cpp-python built without GPU support does. The model is not split between
    the two: a partial count offloads every layer.
    """

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int = 512,
        n_threads: Optional[int] = None,
        n_gpu_layers: int = 0,
        seed: Optional[int] = None,
        verbose: bool = True,
        embedding: bool = False,
        chat_format: Optional[str] = None,
        **kwargs: Any,
    ):
        self.model_path = model_path
        if isinstance(n_gpu_layers, bool) or not isinstance(n_gpu_layers, int):
            raise ValueError(f"n_gpu_layers must be an integer, got {n_gpu_layers!r}")
        device = "cpu" if n_gpu_layers == 0 else "auto"
        self._engine = Engine(model_path, n_threads=n_threads, device=device)
        self._n_ctx = n_ctx if n_ctx > 0 else min(self._engine.n_ctx_train, 4096)
        self._seed = seed
        self.verbose = verbose
        self._session = self._engine.session(n_ctx=self._n_ctx)
        self._chat = self._engine.chat(n_ctx=self._n_ctx)
        self._token_texts: Dict[int, str] = {}

    # -- tokens ------------------------------------------------------------------------

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        if isinstance(text, str):
            text = text.encode()
        return self._engine.tokenize(text.decode("utf-8", errors="replace"), add_bos, special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None,
                   special: bool = False) -> bytes:
        return self._engine.detokenize(list(tokens)).encode()

    def n_ctx(self) -> int:
        return self._n_ctx

    def n_vocab(self) -> int:
        return self._engine.n_vocab

    def _token_text(self, tok: int) -> str:
        t = self._token_texts.get(tok)
        if t is None:
            t = self._token_texts[tok] = self._engine.detokenize([tok])
        return t

    def _completion_logprobs(self, entries, offset: int) -> Dict[str, Any]:
        """llama-cpp-python's `logprobs` of a completion choice for `entries` (the stream's
        `(token, logprob, top)` tuples), text offsets counted from `offset`."""
        out: Dict[str, Any] = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        for tok, lp, top in entries:
            text = self._token_text(tok)
            out["tokens"].append(text)
            out["text_offset"].append(offset)
            out["token_logprobs"].append(lp)
            alts = {self._token_text(t): l for t, l in top}
            alts[text] = lp  # as llama-cpp-python: the chosen token is always among them
            out["top_logprobs"].append(alts)
            offset += len(text)
        return out

    def _chat_logprobs(self, entries, n_top: int) -> Dict[str, Any]:
        """OpenAI's chat `logprobs` object (`content`: token, logprob, bytes, top_logprobs)."""
        def item(tok: int, lp: float) -> Dict[str, Any]:
            text = self._token_text(tok)
            return {"token": text, "logprob": lp, "bytes": list(text.encode())}
        return {"content": [dict(item(t, lp), top_logprobs=[item(a, l) for a, l in top[:n_top]])
                            for t, lp, top in entries]}

    # -- completions ---------------------------------------------------------------------

    def _sampling(self, temperature, top_p, min_p, top_k, repeat_penalty, seed, max_tokens, stop):
        if isinstance(stop, str):
            stop = [stop]
        return dict(
            max_tokens=0 if max_tokens is None or max_tokens <= 0 else int(max_tokens),
            temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),
            min_p=float(min_p), repeat_penalty=float(repeat_penalty),
            seed=seed if seed is not None else self._seed, stop=list(stop or []))

    def create_completion(
        self,
        prompt: Union[str, List[int]],
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Optional[Union[str, List[str]]] = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        **kwargs: Any,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """A text completion of `prompt`: llama-cpp-python's `text_completion` dict (or its
        chunks with `stream=True`)."""
        if logprobs is not None:
            logprobs = _lp_count(logprobs, "logprobs")
            if echo:
                raise ValueError("logprobs with echo=True (the prompt's own logprobs) are not supported")
        if isinstance(prompt, list):
            prompt = self._engine.detokenize(prompt)
        args = self._sampling(temperature, top_p, min_p, top_k, repeat_penalty, seed, max_tokens, stop)
        cid = f"cmpl-{uuid.uuid4()}"
        created = int(time.time())
        s = self._session
        s.reset()
        n_prompt = len(self._engine.tokenize(prompt))
        if n_prompt > self._n_ctx:
            # the engine says so too; this keeps llama-cpp-python's ValueError
            raise ValueError(
                f"Requested tokens ({n_prompt}) exceed context window of {self._n_ctx}")
        head = prompt if echo else ""

        def usage() -> Dict[str, int]:
            n = len(s.tokens) - n_prompt
            return {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n}

        def choice(text: str, finish: Optional[str], lp: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
            return {"text": text, "index": 0, "logprobs": lp, "finish_reason": finish}

        if not stream:
            st = s.generate(prompt, stream=True, logprobs=logprobs, **args)
            text = "".join(st)
            lp = None
            if logprobs is not None:
                lp = self._completion_logprobs(st.take_logprobs(), len(prompt))
            return {
                "id": cid, "object": "text_completion", "created": created,
                "model": self.model_path,
                "choices": [choice(head + text + (suffix or ""), _finish(st.finish_reason), lp)],
                "usage": usage(),
            }

        def chunks() -> Iterator[Dict[str, Any]]:
            st = s.generate(prompt, stream=True, logprobs=logprobs, **args)
            if head:
                yield {"id": cid, "object": "text_completion", "created": created,
                       "model": self.model_path, "choices": [choice(head, None)]}
            offset = len(prompt)
            for piece in st:
                lp = None
                if logprobs is not None:
                    lp = self._completion_logprobs(st.take_logprobs(), offset)
                    offset += sum(len(t) for t in lp["tokens"])
                yield {"id": cid, "object": "text_completion", "created": created,
                       "model": self.model_path, "choices": [choice(piece, None, lp)]}
            yield {"id": cid, "object": "text_completion", "created": created,
                   "model": self.model_path,
                   "choices": [choice(suffix or "", _finish(st.finish_reason))]}

        return chunks()

    def __call__(self, prompt: Union[str, List[int]], **kwargs: Any):
        return self.create_completion(prompt, **kwargs)

    # -- chat ------------------------------------------------------------------------------

    def create_chat_completion(
        self,
        messages: List[Dict[str, Any]],
        functions: Optional[List[Dict[str, Any]]] = None,
        function_call: Any = None,
        tools: Optional[List[Dict[str, Any]]] = None,
        tool_choice: Any = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Optional[Union[str, List[str]]] = None,
        seed: Optional[int] = None,
        response_format: Optional[Dict[str, Any]] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        **kwargs: Any,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """A chat completion: llama-cpp-python's (OpenAI's) `chat.completion` dict, or its
        `chat.completion.chunk`s with `stream=True`. `tools` / `tool_choice` and
        `response_format` are enforced by grammar; tool calls come back parsed."""
        if functions and not tools:
            tools = [{"type": "function", "function": f} for f in functions]
            if isinstance(function_call, dict):
                tool_choice = {"type": "function", "function": function_call}
            elif function_call is not None:
                tool_choice = function_call
        n_top = None
        if logprobs:
            n_top = _lp_count(top_logprobs or 0, "top_logprobs")
        elif top_logprobs is not None:
            raise ValueError("top_logprobs needs logprobs=True")
        msgs = _messages(messages)
        args = self._sampling(temperature, top_p, min_p, top_k, repeat_penalty, seed, max_tokens, stop)
        args.update(_response_format(response_format))
        choice_arg = _tool_choice(tool_choice)
        chat = self._chat
        chat.reset()
        chat.set_tools(json.dumps(tools) if tools else None)
        for m in msgs:
            chat.ingest(json.dumps(m))
        cid = f"chatcmpl-{uuid.uuid4()}"
        created = int(time.time())

        def calls_json(r: Dict[str, Any]) -> List[Dict[str, Any]]:
            return [{"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in r["tool_calls"]]

        def usage(r: Dict[str, Any]) -> Dict[str, int]:
            p, c = r["prompt_tokens"], r["completion_tokens"]
            return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

        if not stream:
            lps = None
            if n_top is None:
                r = chat.complete(tool_choice=choice_arg, **args)
            else:
                st = chat.complete(tool_choice=choice_arg, stream=True, logprobs=n_top, **args)
                for _ in st:
                    pass
                r = st.result
                lps = self._chat_logprobs(st.take_logprobs(), n_top)
            calls = calls_json(r)
            message: Dict[str, Any] = {"role": "assistant", "content": r["text"] if not calls or r["text"] else None}
            if calls:
                message["tool_calls"] = calls
            return {
                "id": cid, "object": "chat.completion", "created": created,
                "model": self.model_path,
                "choices": [{"index": 0, "message": message, "logprobs": lps,
                             "finish_reason": _finish(r["finish_reason"], bool(calls))}],
                "usage": usage(r),
            }

        def chunk(delta: Dict[str, Any], finish: Optional[str] = None,
                  lp: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
            return {"id": cid, "object": "chat.completion.chunk", "created": created,
                    "model": self.model_path,
                    "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}]}

        def chunk_lps(st) -> Optional[Dict[str, Any]]:
            return self._chat_logprobs(st.take_logprobs(), n_top) if n_top is not None else None

        def chunks() -> Iterator[Dict[str, Any]]:
            st = chat.complete(tool_choice=choice_arg, stream=True, logprobs=n_top, **args)
            yield chunk({"role": "assistant"})
            if tools and choice_arg != "none":
                # the raw text holds the tool-call markup: the reply is sent once parsed
                for _ in st:
                    pass
            else:
                for piece in st:
                    yield chunk({"content": piece}, lp=chunk_lps(st))
            r = st.result
            calls = calls_json(r)
            if tools and choice_arg != "none":
                if r["text"]:
                    yield chunk({"content": r["text"]}, lp=chunk_lps(st))
                if calls:
                    yield chunk({"tool_calls": [dict(c, index=i) for i, c in enumerate(calls)]})
            yield chunk({}, _finish(r["finish_reason"], bool(calls)))

        return chunks()

    # -- embeddings --------------------------------------------------------------------------

    def embed(self, input: Union[str, List[str]], normalize: bool = True) -> Union[List[float], List[List[float]]]:
        """Mean-pooled embeddings (one list per text; a single list for a single string)."""
        texts = [input] if isinstance(input, str) else list(input)
        vs = [v[0] for v in self._engine.embed(texts, pooling="mean", normalize=2 if normalize else -1)]
        return vs[0] if isinstance(input, str) else vs

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> Dict[str, Any]:
        texts = [input] if isinstance(input, str) else list(input)
        vs = self.embed(texts)
        n = sum(len(self._engine.tokenize(t)) for t in texts)
        return {
            "object": "list", "model": model or self.model_path,
            "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vs)],
            "usage": {"prompt_tokens": n, "total_tokens": n},
        }
