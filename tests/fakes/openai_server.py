"""A fake OpenAI-compatible Chat Completions API for tests, spoken over real HTTP.

`POST /v1/chat/completions` answers with a scripted `Reply`: a `chat.completion` object, or
with `stream: true` the `data: {json}` chunks real servers send: a first chunk carrying the
role, `content` pieces, for each tool call a chunk with its `index`, `id`, `type` and
`function.name` (empty arguments) followed by chunks carrying only `index` and an
`arguments` piece, a chunk with `finish_reason` and an empty delta, a usage chunk with no
choices when `stream_options.include_usage` is set (the others then carry `"usage": null`),
and `data: [DONE]`. Errors are `{"error": {"message", "type", "param", "code"}}` with the HTTP
status. A bearer token is required only when `api_key` is set, and must match it.

Token counts are estimates: a quarter of the canonical JSON length of messages and tools.

Modes for what real compatible servers do (llama-cpp-python's server does each of them):
`repeat_call_head` repeats every tool call's `id`, `type` and `function.name` in each of its
chunks; `refuse_null_content` answers 500 ("Input should be a valid string") to an assistant
message whose `content` is null; `ignore_stream_options` never sends a usage chunk;
`error_shape="detail"` answers errors as `{"detail": message}`. `models` (name → extra fields,
e.g. vLLM's `{"max_model_len": 8192}`) makes `GET /v1/models` list them, and `props` makes
`GET /props` answer as llama.cpp's server does (`{"default_generation_settings": {"n_ctx":
...}}`); without them both are 404, as on servers that have no such thing. `window` is a
context window as llama-cpp-python keeps it: a request whose estimated prompt exceeds it
gets, streamed, a 200 whose body ends before any event (the server logs the error and
sends nothing), and not streamed, a 400 saying "This model's maximum context length is N
tokens". A `Reply` with
`stream_error` sends `data: {"error": {...}}` after its text and ends the stream there (a
context overflow reported mid-stream); one with `cut` ends after its text with neither a
finish_reason nor `[DONE]` (a stream the server dropped).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from itertools import count
from typing import Any

from tests.fakes._http import Exchange, FakeServer, Reply, Seen, canonical, split_json

__all__ = ["FakeOpenAI", "Reply", "Seen"]

COMPLETIONS_PATH = "/v1/chat/completions"

_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}

_ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}

_BROKEN_FRAME = b'data: {"id":"chatcmpl-0","object":"chat.completion.chu\n\n'


class FakeOpenAI(FakeServer):
    """`with FakeOpenAI() as server:` then POST to `f"{server.url}/v1/chat/completions"`."""

    def __init__(
        self,
        *,
        responder: Callable[[dict[str, Any]], Reply] | None = None,
        api_key: str | None = None,
        repeat_call_head: bool = False,
        refuse_null_content: bool = False,
        ignore_stream_options: bool = False,
        error_shape: str = "openai",
        models: dict[str, dict[str, Any]] | None = None,
        props: dict[str, Any] | None = None,
        window: int | None = None,
    ) -> None:
        super().__init__(responder=responder)
        self.api_key = api_key
        self.repeat_call_head = repeat_call_head
        self.refuse_null_content = refuse_null_content
        self.ignore_stream_options = ignore_stream_options
        self.error_shape = error_shape
        self.models = models
        self.props = props
        self.window = window
        self._ids = count(1)

    def handle(self, exchange: Exchange) -> None:
        if exchange.method == "GET" and exchange.path == "/v1/models" and self.models is not None:
            # OpenAI's lists only for a caller with the key, as its completions.
            if self.api_key is not None and (
                exchange.headers.get("authorization") != f"Bearer {self.api_key}"
            ):
                self._error(exchange, 401, "Incorrect API key provided")
                return
            listed = [
                {"id": name, "object": "model", "owned_by": "fake", **fields}
                for name, fields in self.models.items()
            ]
            exchange.send_json(200, {"object": "list", "data": listed})
            return
        if exchange.method == "GET" and exchange.path == "/props" and self.props is not None:
            exchange.send_json(200, self.props)
            return
        if exchange.method != "POST" or exchange.path != COMPLETIONS_PATH:
            self._error(exchange, 404, f"Unknown request URL: {exchange.method} {exchange.path}")
            return
        authorization = exchange.headers.get("authorization")
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            self._error(exchange, 401, "Incorrect API key provided")
            return
        if not exchange.is_json:
            self._error(exchange, 400, "We could not parse the JSON body of your request.")
            return
        missing = [name for name in ("model", "messages") if name not in exchange.body]
        if missing:
            self._error(exchange, 400, f"Missing required parameter: '{missing[0]}'.")
            return
        if self.refuse_null_content and any(
            isinstance(message, dict) and "content" in message and message["content"] is None
            for message in exchange.body["messages"]
        ):
            self._error(exchange, 500, "messages.content: Input should be a valid string")
            return

        if self.window is not None and self.estimate(exchange.body) > self.window:
            self._overflow(exchange)
            return
        reply = self.next_reply(exchange.body)
        if reply.status != 200:
            self._error(exchange, reply.status, reply.text or None)
            return
        body = exchange.body
        prompt_tokens = self.estimate(body)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": reply.output_tokens(),
            "total_tokens": prompt_tokens + reply.output_tokens(),
        }
        head = {
            "id": f"chatcmpl-{next(self._ids)}",
            "created": int(time.time()),
            "model": str(body["model"]),
            "system_fingerprint": "fp_fake",
        }
        if body.get("stream"):
            options = body.get("stream_options") or {}
            asked = options.get("include_usage") and not self.ignore_stream_options
            frames, pause_after = _chunks(
                reply,
                head=head,
                usage=usage if asked else None,
                repeat_call_head=self.repeat_call_head,
            )
            exchange.stream(
                frames, reply=reply, pause_after=pause_after, broken_frame=_BROKEN_FRAME
            )
        else:
            exchange.send_json(200, _completion(reply, head=head, usage=usage))

    def _overflow(self, exchange: Exchange) -> None:
        asked = self.estimate(exchange.body)
        if exchange.body.get("stream"):
            exchange.stream([], reply=Reply(), pause_after=-1, broken_frame=_BROKEN_FRAME)
            # As llama-cpp-python's server: the connection is dropped after, unannounced.
            exchange.drop_connection()
            return
        self._error(
            exchange,
            400,
            f"This model's maximum context length is {self.window} tokens. However, you "
            f"requested {asked} tokens. Please reduce the length of the messages.",
        )

    def _error(self, exchange: Exchange, status: int, message: str | None) -> None:
        if self.error_shape == "detail":
            exchange.send_json(status, {"detail": message or "error"})
        else:
            _send_error(exchange, status, message)

    def estimate(self, body: dict[str, Any]) -> int:
        """The prompt token estimate of a Chat Completions request body."""
        prompt = canonical(body.get("tools") or []) + canonical(body.get("messages") or [])
        return max(1, len(prompt) // 4)


def _finish_reason(reply: Reply) -> str:
    if reply.stop_reason is not None:
        return _FINISH_REASONS.get(reply.stop_reason, reply.stop_reason)
    return "tool_calls" if reply.tool_calls else "stop"


def _frame(payload: dict[str, Any] | str) -> bytes:
    if isinstance(payload, str):
        return f"data: {payload}\n\n".encode()
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"data: {data}\n\n".encode()


def _chunks(
    reply: Reply,
    *,
    head: dict[str, Any],
    usage: dict[str, Any] | None,
    repeat_call_head: bool = False,
) -> tuple[list[bytes], int]:
    """The stream's frames, and the index of the first content delta (or of the frame before
    the finishing chunk when there is none), where a hold or a malformed event goes."""
    extra = {} if usage is None else {"usage": None}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return _frame({**head, "object": "chat.completion.chunk", "choices": [choice], **extra})

    content = "" if reply.text or not reply.tool_calls else None
    frames = [chunk({"role": "assistant", "content": content, "refusal": None})]
    deltas: list[dict[str, Any]] = [{"content": piece} for piece in reply.text_pieces()]
    for index, (call_id, name, arguments) in enumerate(reply.tool_calls):
        opening = {"index": index, "id": call_id, "type": "function"}
        deltas.append({"tool_calls": [{**opening, "function": {"name": name, "arguments": ""}}]})
        head_again = opening if repeat_call_head else {"index": index}
        named = {"name": name} if repeat_call_head else {}
        deltas.extend(
            {"tool_calls": [{**head_again, "function": {**named, "arguments": piece}}]}
            for piece in split_json(json.dumps(arguments, ensure_ascii=False))
        )
    first_delta = 1 if deltas else 0
    frames.extend(chunk(delta) for delta in deltas)
    if reply.stream_error is not None:
        error = {"message": reply.stream_error, "type": "server_error", "code": 400}
        frames.append(_frame({"error": error}))
        return frames, first_delta
    if reply.cut:
        return frames, first_delta
    frames.append(chunk({}, _finish_reason(reply)))
    if usage is not None:
        frames.append(
            _frame({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        )
    frames.append(_frame("[DONE]"))
    return frames, first_delta


def _completion(reply: Reply, *, head: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text if reply.text or not reply.tool_calls else None,
        "refusal": None,
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
            }
            for call_id, name, arguments in reply.tool_calls
        ]
    finish_reason = _finish_reason(reply)
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
    return {**head, "object": "chat.completion", "choices": [choice], "usage": usage}


def _send_error(exchange: Exchange, status: int, message: str | None) -> None:
    error_type, code = _ERRORS.get(status, ("server_error", None))
    if status < 500 and status not in _ERRORS:
        error_type = "invalid_request_error"
    error = {
        "message": message or f"Fake {error_type}",
        "type": error_type,
        "param": None,
        "code": code,
    }
    exchange.send_json(status, {"error": error})
