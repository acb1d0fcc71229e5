"""Any OpenAI-compatible chat-completions server (Ollama, vLLM, LM Studio) over httpx.

The neutral content-block history is converted to chat-completions messages: tool_use
blocks become the assistant's ``tool_calls``, tool_result blocks become ``tool`` messages
in the same order, so every call stays paired with its result. Streaming follows the
server-sent-events form of ``/chat/completions``; tool-call fragments are joined by
``index`` and handed on only when complete.

Each tool travels in the function wrapper (``{"type": "function", "function": {name,
description, parameters}}``); the body is serialized once (``payload``) and sent as those
bytes, so what is counted is what the server receives (docs/accounting.md).
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from agent_app.providers.base import (
    PerLoop,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    Stop,
    TextDelta,
    ToolUse,
    Usage,
    WireTools,
    json_body,
    split_array,
    status_error,
    tool_input,
    window_in,
)
from agent_app.providers.chat_messages import to_chat_messages
from profiles_app.services.connections import DEFAULT_MODELS
from toolhub.lib.model_windows import believable
from toolhub.tools.schema import canonical_json
from toolhub.tools.tokens import count as count_tokens

STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
# A model list or a server's properties: a few kilobytes; more is not read.
LOOKUP_BYTES = 1_000_000
# Asking a server why a stream sent nothing: an overflow is refused at once.
PROBE_TIMEOUT = httpx.Timeout(30.0, connect=5.0)


class OpenAIProvider:
    name = "openai"
    default_model = DEFAULT_MODELS["openai"]
    supports_native = False
    is_demo = False

    def __init__(self, *, base_url: str, api_key: str = "", timeout: float = 600.0) -> None:
        self.origin = base_url.rstrip("/")
        self._url = self.origin + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._clients = PerLoop(
            lambda: httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0, read=120.0))
        )

    def wire_tools(self, tools_json: str, deferred: frozenset[str]) -> WireTools:
        return _wire_tools(tools_json)

    def payload(self, request: ProviderRequest) -> bytes:
        system = "\n\n".join(text for text in (request.system, request.catalog) if text)
        messages = [{"role": "system", "content": system}] if system else []
        messages += to_chat_messages(request.messages)
        fields: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        return json_body(fields, self.wire_tools(request.tools_json, request.deferred))

    async def model_window(self, model: str) -> int | None:
        """The window the server reports: the context llama.cpp's server runs with
        (``/props``: ``default_generation_settings.n_ctx``), else a field of the model's
        entry in ``/models`` (vLLM's ``max_model_len``, OpenRouter's ``context_length``,
        llama.cpp's ``meta.n_ctx_train``...). ``/props`` goes first: what a server runs
        with beats what the model was trained with."""
        client = self._clients.get()
        root = self.origin.removesuffix("/v1")
        window = _props_window(await self._json_at(client, root + "/props"))
        if window is not None:
            return window
        return _listed_window(await self._json_at(client, self.origin + "/models"), model)

    async def list_models(self) -> list[dict[str, Any]]:
        """The models ``/models`` lists, each with the window its entry names (or
        ``None``); raises ProviderError when the server cannot be asked or answers no
        list."""
        client = self._clients.get()
        try:
            listed = await self._json_at(client, self.origin + "/models")
        except httpx.HTTPError as exc:
            message = f"could not reach {self.origin}: {exc}"
            raise ProviderError("provider_unreachable", message) from None
        entries = listed.get("data") if isinstance(listed, dict) else None
        if not isinstance(entries, list):
            raise ProviderError("provider_no_models", f"{self.origin}/models lists no models")
        return [
            {"id": entry["id"], "window": _listed_window({"data": [entry]}, entry["id"])}
            for entry in entries
            if isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"]
        ]

    async def _json_at(self, client: httpx.AsyncClient, url: str) -> Any:
        """A GET's JSON; ``None`` for an error, a body that is not JSON, or one over
        ``LOOKUP_BYTES`` (a model list is a few kilobytes)."""
        async with client.stream("GET", url, headers=self._headers) as response:
            if response.status_code != 200:
                return None
            body = bytearray()
            async for piece in response.aiter_bytes():
                body += piece
                if len(body) > LOOKUP_BYTES:
                    return None
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            return None

    async def _why_nothing(self, client: httpx.AsyncClient, payload: bytes) -> None:
        """Ask the request again, not streamed and for one token: a server that refuses it
        says why (its window, when that was it), raised as the request's error. Asked
        once per failed stream, within ``PROBE_TIMEOUT``."""
        fields = json.loads(payload)
        fields.update(stream=False, max_tokens=1)
        fields.pop("stream_options", None)
        body = json.dumps(fields, ensure_ascii=False).encode()
        headers = {**self._headers, "Content-Type": "application/json"}
        response = None
        # Sent again only when it never reached the server: the pool may hand back the
        # connection the cut stream left dead (a timeout is not retried: the server may
        # be working on it).
        for attempt in range(2):
            try:
                response = await client.post(
                    self._url, content=body, headers=headers, timeout=PROBE_TIMEOUT
                )
                break
            except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
                if attempt:
                    return
            except httpx.HTTPError:
                return
        if response is not None and response.status_code >= 400:
            text = response.text
            raise status_error(response.status_code, _error_message(text), body=text)

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        client = self._clients.get()
        payload = self.payload(request)
        try:
            async with client.stream(
                "POST",
                self._url,
                content=payload,
                headers={**self._headers, "Content-Type": "application/json"},
            ) as response:
                if response.status_code >= 400:
                    body = (await response.aread()).decode(errors="replace")
                    raise status_error(response.status_code, _error_message(body), body=body)
                async for event in _events(response, payload):
                    yield event
        except _NothingSent:
            # llama-cpp-python ends a stream it cannot serve (a prompt over its window)
            # before any event, and says why only when asked without streaming.
            await self._why_nothing(client, payload)
            # Not retried: each retry would be asked why again.
            raise ProviderError(
                "provider_cut", "the server ended the answer before sending anything"
            ) from None
        except httpx.TimeoutException:
            raise ProviderError(
                "provider_timeout", "the model did not answer in time", retryable=True
            ) from None
        except httpx.TransportError as exc:
            raise ProviderError(
                "provider_unreachable", f"{type(exc).__name__}: {exc}", retryable=True
            ) from None


class _NothingSent(Exception):
    """A stream that ended before its first event."""


async def _events(response: httpx.Response, payload: bytes) -> AsyncIterator[ProviderEvent]:
    """The stream's events. A stream that reports an error, or ends without a
    finish_reason, is an error (``provider_stream_error``, ``provider_cut``), never a
    complete answer: the text so far has been streamed, and the turn ends saying it was cut.
    Without a usage chunk the tokens are counted here and marked estimated."""
    reading = _Reading()
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        reading.heard = True
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            for text in reading.chunk(json.loads(data)):
                yield TextDelta(text)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProviderError("provider_malformed", f"unreadable stream: {exc}") from None
    for event in reading.ending(payload):
        yield event


class _Reading:
    """What a stream said so far: its text, its tool calls by index, usage and stop."""

    def __init__(self) -> None:
        self.calls: dict[int, dict[str, str]] = {}
        self.usage: Usage | None = None
        self.stop: str | None = None
        self.said: list[str] = []
        # Whether any ``data:`` line came (a stream with none is asked why: _NothingSent).
        self.heard = False

    def chunk(self, chunk: Any) -> Iterator[str]:
        """Take one chunk (JSON from the server); the text it adds."""
        if isinstance(chunk, dict) and chunk.get("error") is not None:
            error = _said(chunk.get("error"))
            raise ProviderError(
                "provider_stream_error",
                "the server stopped the answer with an error: " + error[:400],
                window=window_in(error),
            )
        if isinstance(chunk.get("usage"), dict):
            self.usage = Usage(
                input_tokens=int(chunk["usage"].get("prompt_tokens") or 0),
                output_tokens=int(chunk["usage"].get("completion_tokens") or 0),
            )
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.said.append(delta["content"])
                yield delta["content"]
            self._tool_pieces(delta.get("tool_calls") or [])
            if choice.get("finish_reason"):
                self.stop = STOP_REASONS.get(choice["finish_reason"], choice["finish_reason"])

    def _tool_pieces(self, pieces: list[Any]) -> None:
        for position, piece in enumerate(pieces):
            # Some compatible servers leave out ``index``; then it is the position.
            index = int(piece.get("index", position))
            call = self.calls.setdefault(index, {"id": "", "name": "", "args": ""})
            function = piece.get("function") or {}
            # Names and ids are set once: some servers repeat them in every chunk
            # (llama-cpp-python), and a repeat never grows them.
            call["id"] = call["id"] or piece.get("id") or ""
            call["name"] = call["name"] or function.get("name") or ""
            call["args"] += function.get("arguments") or ""

    def ending(self, payload: bytes) -> Iterator[ProviderEvent]:
        """The tool uses, usage and stop of a stream that ended whole."""
        if not self.heard:
            raise _NothingSent
        if self.stop is None:
            raise ProviderError(
                "provider_cut",
                "the server ended the answer before it was finished (no finish_reason)",
                retryable=True,
            )
        calls = self.calls
        for index in sorted(calls):
            call = calls[index]
            yield ToolUse(call["id"] or f"call_{index}", call["name"], tool_input(call["args"]))
        if self.usage is None:
            produced = "".join(self.said)
            produced += "".join(call["name"] + call["args"] for call in calls.values())
            yield Usage(
                input_tokens=count_tokens(payload.decode()),
                output_tokens=count_tokens(produced),
                estimated=True,
            )
        else:
            yield self.usage
        yield Stop(self.stop)


@functools.lru_cache(maxsize=256)
def _wire_tools(tools_json: str) -> WireTools:
    """Each tool in the function wrapper, in the array's order and layout."""
    names, texts = [], []
    for text in split_array(tools_json):
        tool = json.loads(text)
        names.append(tool["name"])
        function = {
            "name": tool["name"],
            "description": tool["description"],
            "parameters": tool["input_schema"],
        }
        texts.append(canonical_json({"type": "function", "function": function}))
    return WireTools(names=tuple(names), texts=tuple(texts))


# The fields compatible servers name a model's window with, in a model list's entries.
_WINDOW_FIELDS = (
    "max_model_len",
    "context_length",
    "context_window",
    "max_context_length",
    "max_input_tokens",
)


def _listed_window(listed: Any, model: str) -> int | None:
    """The window of ``model``'s entry in a ``/models`` answer; a server that serves one
    model answers for it whatever name a request gives (llama.cpp's servers do)."""
    entries = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(entries, list):
        return None
    entries = [entry for entry in entries if isinstance(entry, dict)]
    named = [entry for entry in entries if entry.get("id") == model]
    if not named and len(entries) == 1:
        named = entries
    for entry in named:
        meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
        for value in (*(entry.get(field) for field in _WINDOW_FIELDS), meta.get("n_ctx_train")):
            window = believable(value)
            if window is not None:
                return window
    return None


def _props_window(props: Any) -> int | None:
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    if isinstance(settings, dict) and believable(settings.get("n_ctx")) is not None:
        return believable(settings.get("n_ctx"))
    return believable(props.get("n_ctx"))


def _error_message(body: str) -> str:
    """What an error body says, in the shapes compatible servers use: OpenAI's
    ``{"error": {"message"}}`` or ``{"error": "..."}``, FastAPI's ``{"detail": "..."}`` or
    its list of ``{"msg"}``, a bare ``{"message"}``; else the body's start."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body[:300] or "no message"
    if isinstance(parsed, dict):
        for key in ("error", "detail", "message"):
            if parsed.get(key) is not None:
                return _said(parsed[key])[:300]
    return body[:300]


def _said(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("message", "msg", "detail"):
            said = value.get(key)
            if isinstance(said, str):
                return said
    if isinstance(value, list) and value:
        return "; ".join(_said(item) for item in value[:3])
    return json.dumps(value)[:300]
