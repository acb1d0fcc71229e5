"""A fake Anthropic Messages API for tests: the real `anthropic` SDK talks to it over HTTP.

`POST /v1/messages` answers with a scripted `Reply`, as server-sent events when the body
asks for `stream` and as one Message object otherwise; `POST /v1/messages/count_tokens`
answers with the token estimate. The wire format is the real one, event for event:
`message_start`, `ping`, per block `content_block_start` / `content_block_delta` /
`content_block_stop` (a tool's input as `input_json_delta` pieces, the first one empty, as
the API sends it), `message_delta`, `message_stop`; errors are
`{"type": "error", "error": {"type", "message"}}` with the HTTP status. A credential is
required, in `x-api-key` or, as SDK 2.x sends `api_key`, in `Authorization: Bearer`.
With `models` (name → max_input_tokens), `GET /v1/models/{id}` answers for one and
`GET /v1/models` lists them as the Models API pages it (`limit`, `after_id`, `has_more`;
`page_size` caps a page, so a test can make the SDK follow pages).

Token counts are estimates (a quarter of the canonical JSON length of tools, system and
messages; a tool sent with `defer_loading` counts only once a `tool_reference` block loads
it, where that block is, as the API bills it) but prompt caching is simulated with the
real API's rules, because that is what tests of a caching strategy need:

- The prompt is a sequence of blocks in the order tools, system, messages. A block that
  carries `cache_control` is a breakpoint; a top-level `cache_control` makes the last block
  one. Each block is serialized with sorted keys and without its `cache_control`, so moving
  a breakpoint forward in a growing conversation leaves the earlier prefix intact, while
  reordering tools (the list is hashed as received) changes it.
- A request reads the longest earlier-written prefix that ends within `lookback_blocks`
  blocks of one of its breakpoints, the breakpoint itself included (20, as the API; 1 checks
  the breakpoints only); the rest up to its last breakpoint is written. Every breakpoint's
  prefix is written, so a later request can read any of them.
- `cache_read_input_tokens` + `cache_creation_input_tokens` + `input_tokens` is the request
  total; with no breakpoint both cache counts are 0. A prefix estimated below
  `min_cache_tokens` is neither written nor read, as short prompts are not cached.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import sha256
from itertools import count
from typing import Any
from urllib.parse import parse_qs

from tests.fakes._http import Exchange, FakeServer, Reply, Seen, canonical, split_json

__all__ = ["FakeAnthropic", "Reply", "Seen"]

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
_REQUIRED = ("model", "max_tokens", "messages")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

_BROKEN_FRAME = (
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_del\n\n'
)


@dataclass(frozen=True)
class _InputUsage:
    """The input side of `usage`; the three counts add up to the request total."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


@dataclass(frozen=True)
class _Prompt:
    """A request's prompt as cumulative prefixes: `keys[i]` and `sizes[i]` describe the
    prefix that ends after block i."""

    keys: list[str]
    sizes: list[int]
    breakpoints: list[int]

    @property
    def total_tokens(self) -> int:
        return max(1, _tokens(self.sizes[-1])) if self.sizes else 1


class FakeAnthropic(FakeServer):
    """`with FakeAnthropic() as server:` then `AsyncAnthropic(base_url=server.url, ...)`."""

    def __init__(
        self,
        *,
        responder: Callable[[dict[str, Any]], Reply] | None = None,
        lookback_blocks: int = 20,
        min_cache_tokens: int = 0,
        models: dict[str, int] | None = None,
        page_size: int = 1000,
    ) -> None:
        super().__init__(responder=responder)
        self.page_size = page_size
        self.lookback_blocks = lookback_blocks
        self.min_cache_tokens = min_cache_tokens
        # Model name -> its max_input_tokens, as the Models API answers `GET /v1/models/{id}`.
        self.models = models or {}
        self.cached_prefixes: set[str] = set()
        self._cache_lock = threading.Lock()
        self._ids = count(1)

    def handle(self, exchange: Exchange) -> None:
        if exchange.method == "GET" and exchange.path.startswith("/v1/models/"):
            self._model_info(exchange, exchange.path.removeprefix("/v1/models/"))
            return
        if exchange.method == "GET" and exchange.path == "/v1/models":
            self._model_list(exchange)
            return
        if exchange.method != "POST" or exchange.path not in {MESSAGES_PATH, COUNT_TOKENS_PATH}:
            _send_error(exchange, 404, f"Not found: {exchange.method} {exchange.path}")
            return
        if not _has_credential(exchange.headers):
            _send_error(exchange, 401, "x-api-key header is required")
            return
        if not exchange.is_json:
            _send_error(exchange, 400, "The request body is not a JSON object")
            return
        required = ("model", "messages") if exchange.path == COUNT_TOKENS_PATH else _REQUIRED
        missing = [name for name in required if name not in exchange.body]
        if missing:
            _send_error(exchange, 400, f"{missing[0]}: Field required")
            return
        problem = _content_problem(exchange.body["messages"])
        if problem:
            _send_error(exchange, 400, problem)
            return
        prompt = _prompt(exchange.body)
        if exchange.path == COUNT_TOKENS_PATH:
            exchange.send_json(200, {"input_tokens": prompt.total_tokens})
            return

        reply = self.next_reply(exchange.body)
        if reply.status != 200:
            _send_error(exchange, reply.status, reply.text or None)
            return
        message_id = f"msg_{next(self._ids)}"
        usage = self._cache_usage(prompt)
        headers = {"request-id": f"req_{message_id}"}
        model = str(exchange.body["model"])
        if exchange.body.get("stream"):
            frames, pause_after = _events(reply, message_id=message_id, model=model, usage=usage)
            exchange.stream(
                frames,
                reply=reply,
                pause_after=pause_after,
                broken_frame=_BROKEN_FRAME,
                headers=headers,
            )
        else:
            message = _message(reply, message_id=message_id, model=model, usage=usage)
            exchange.send_json(200, message, headers=headers)

    def _model_list(self, exchange: Exchange) -> None:
        """`GET /v1/models` as the Models API pages it: newest first, `limit` (default 20,
        at most `page_size`) per page, `after_id` for the next, `has_more` and
        `last_id` to say where it ended."""
        if not _has_credential(exchange.headers):
            _send_error(exchange, 401, "x-api-key header is required")
            return
        query = parse_qs(exchange.seen.query)
        limit = min(int(query.get("limit", ["20"])[0]), self.page_size)
        names = list(reversed(self.models))
        after = query.get("after_id", [""])[0]
        start = names.index(after) + 1 if after in names else 0
        page = names[start : start + limit]
        exchange.send_json(
            200,
            {
                "data": [self._info(name) for name in page],
                "has_more": start + limit < len(names),
                "first_id": page[0] if page else None,
                "last_id": page[-1] if page else None,
            },
        )

    def _info(self, name: str) -> dict[str, Any]:
        return {
            "type": "model",
            "id": name,
            "display_name": name,
            "created_at": "2025-01-01T00:00:00Z",
            "lifecycle": "active",
            "max_input_tokens": self.models[name],
            "max_tokens": 64_000,
        }

    def _model_info(self, exchange: Exchange, name: str) -> None:
        if not _has_credential(exchange.headers):
            _send_error(exchange, 401, "x-api-key header is required")
        elif name not in self.models:
            _send_error(exchange, 404, f"model: {name}")
        else:
            exchange.send_json(200, self._info(name))

    def estimate(self, body: dict[str, Any]) -> int:
        """The total input token estimate of a Messages request body."""
        return _prompt(body).total_tokens

    def _cache_usage(self, prompt: _Prompt) -> _InputUsage:
        total = prompt.total_tokens
        cacheable = [
            position
            for position in prompt.breakpoints
            if _tokens(prompt.sizes[position]) >= self.min_cache_tokens
        ]
        if not cacheable:
            return _InputUsage(total, 0, 0)
        with self._cache_lock:
            hit = self._longest_cached(prompt, cacheable)
            self.cached_prefixes.update(prompt.keys[position] for position in cacheable)
        written = _tokens(prompt.sizes[cacheable[-1]])
        read = _tokens(prompt.sizes[hit]) if hit is not None else 0
        return _InputUsage(total - written, written - read, read)

    def _longest_cached(self, prompt: _Prompt, breakpoints: list[int]) -> int | None:
        # Walking breakpoints from the last, each with its lookback window, visits positions
        # from the longest prefix down, so the first hit is the longest cached prefix.
        for breakpoint in reversed(breakpoints):
            lowest = max(-1, breakpoint - self.lookback_blocks)
            for position in range(breakpoint, lowest, -1):
                if _tokens(prompt.sizes[position]) < self.min_cache_tokens:
                    break
                if prompt.keys[position] in self.cached_prefixes:
                    return position
        return None


_IMAGE_SIGNATURES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
_RESULT_BLOCKS = {"text", "image", "tool_reference", "search_result", "document"}


def _content_problem(messages: Any) -> str:
    """What the API refuses in message content, as it words it: empty text blocks, blocks
    a tool_result cannot hold, and images whose bytes are not their media type."""
    if not isinstance(messages, list):
        return "messages: Input should be a valid list"
    for m, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for b, block in enumerate(content if isinstance(content, list) else ()):
            where = f"messages.{m}.content.{b}"
            problem = _block_problem(block, where)
            if problem:
                return problem
            inner = block.get("content") if block.get("type") == "tool_result" else None
            for i, item in enumerate(inner if isinstance(inner, list) else ()):
                kind = item.get("type") if isinstance(item, dict) else None
                if kind not in _RESULT_BLOCKS:
                    return f"{where}.tool_result.content.{i}: Input tag '{kind}' does not match"
                problem = _block_problem(item, f"{where}.tool_result.content.{i}")
                if problem:
                    return problem
    return ""


def _block_problem(block: Any, where: str) -> str:
    if not isinstance(block, dict):
        return f"{where}: Input should be an object"
    if block.get("type") == "text" and not block.get("text"):
        return f"{where}: text content blocks must be non-empty"
    if block.get("type") != "image":
        return ""
    source = block.get("source") or {}
    media_type = source.get("media_type")
    if source.get("type") != "base64" or media_type not in _IMAGE_SIGNATURES:
        return f"{where}.image.source: a base64 PNG, JPEG, GIF or WebP image is required"
    try:
        raw = base64.b64decode(str(source.get("data", "")), validate=True)
    except ValueError:
        return f"{where}.image.source.base64.data: invalid base64 data"
    if not raw.startswith(_IMAGE_SIGNATURES[media_type]):
        return (
            f"{where}.image.source.base64.media_type: Image does not match the provided "
            f"media type {media_type}"
        )
    return ""


def _has_credential(headers: dict[str, str]) -> bool:
    # SDK 2.x sends `api_key` as `Authorization: Bearer ...`; older clients send `x-api-key`.
    bearer = headers.get("authorization", "")
    return bool(headers.get("x-api-key")) or (bearer.startswith("Bearer ") and len(bearer) > 7)


def _tokens(size: int) -> int:
    return size // 4


def _prompt(body: dict[str, Any]) -> _Prompt:
    blocks: list[tuple[Any, Any]] = []
    tools = [tool for tool in body.get("tools") or [] if isinstance(tool, dict)]
    by_name = {tool.get("name"): tool for tool in tools}
    for tool in tools:
        # As the API: a tool sent with `defer_loading` costs nothing until a
        # `tool_reference` loads it, and then it counts where it is referenced.
        if tool.get("defer_loading") is not True:
            blocks.append((["tool"], tool))
    system = body.get("system")
    if isinstance(system, str):
        blocks.append((["system"], {"type": "text", "text": system}))
    elif isinstance(system, list):
        blocks.extend((["system"], block) for block in system)
    for number, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else message
        role = message.get("role") if isinstance(message, dict) else None
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content if isinstance(content, list) else [content]:
            blocks.append((["message", number, role], block))
            for name in _references(block):
                if isinstance(by_name.get(name), dict):
                    blocks.append((["reference", number, name], by_name[name]))

    keys, sizes, breakpoints = [], [], []
    running, size = sha256(), 0
    for position, (where, block) in enumerate(blocks):
        marked = isinstance(block, dict) and block.get("cache_control") is not None
        if marked:
            block = {key: value for key, value in block.items() if key != "cache_control"}
            breakpoints.append(position)
        serialized = canonical([*where, block]).encode() + b"\n"
        running.update(serialized)
        size += len(serialized)
        keys.append(running.copy().hexdigest())
        sizes.append(size)
    if body.get("cache_control") is not None and blocks:
        last = len(blocks) - 1
        if not breakpoints or breakpoints[-1] != last:
            breakpoints.append(last)
    return _Prompt(keys=keys, sizes=sizes, breakpoints=breakpoints)


def _references(block: Any) -> list[str]:
    """The tools a `tool_result` block loads with `tool_reference` items."""
    if not isinstance(block, dict) or block.get("type") != "tool_result":
        return []
    content = block.get("content")
    items = content if isinstance(content, list) else []
    return [
        str(item.get("tool_name"))
        for item in items
        if isinstance(item, dict) and item.get("type") == "tool_reference"
    ]


def _usage_start(usage: _InputUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": 1,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
    }


def _stop_reason(reply: Reply) -> str:
    return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")


def _sse(event: str, data: dict[str, Any]) -> bytes:
    # Keys in the API's own order, `type` first, rather than the sorted canonical form.
    payload = json.dumps({"type": event, **data}, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event}\ndata: {payload}\n\n".encode()


def _events(
    reply: Reply, *, message_id: str, model: str, usage: _InputUsage
) -> tuple[list[bytes], int]:
    """The stream's frames, and the index of the first content delta (or of the frame before
    `message_delta` when there is none), where a hold or a malformed event goes."""
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage_start(usage),
    }
    frames = [_sse("message_start", {"message": message}), _sse("ping", {})]
    first_delta: int | None = None
    index = 0

    def add_block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        nonlocal first_delta
        frames.append(_sse("content_block_start", {"index": index, "content_block": start}))
        for delta in deltas:
            frames.append(_sse("content_block_delta", {"index": index, "delta": delta}))
            if first_delta is None:
                first_delta = len(frames) - 1
        frames.append(_sse("content_block_stop", {"index": index}))

    if reply.text or not reply.tool_calls:
        pieces = reply.text_pieces()
        add_block({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces])
        index += 1
    for tool_id, name, tool_input in reply.tool_calls:
        pieces = ["", *split_json(json.dumps(tool_input, ensure_ascii=False))]
        add_block(
            {"type": "tool_use", "id": tool_id, "name": name, "input": {}},
            [{"type": "input_json_delta", "partial_json": p} for p in pieces],
        )
        index += 1

    frames.append(
        _sse(
            "message_delta",
            {
                "delta": {"stop_reason": _stop_reason(reply), "stop_sequence": None},
                "usage": {"output_tokens": reply.output_tokens()},
            },
        )
    )
    frames.append(_sse("message_stop", {}))
    return frames, first_delta if first_delta is not None else len(frames) - 3


def _message(reply: Reply, *, message_id: str, model: str, usage: _InputUsage) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text or not reply.tool_calls:
        content.append({"type": "text", "text": reply.text})
    content.extend(
        {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}
        for tool_id, name, tool_input in reply.tool_calls
    )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": {**_usage_start(usage), "output_tokens": reply.output_tokens()},
    }


def _send_error(exchange: Exchange, status: int, message: str | None) -> None:
    default = "invalid_request_error" if status < 500 else "api_error"
    error_type = _ERROR_TYPES.get(status, default)
    request_id = f"req_error_{len(exchange.fake.requests)}"
    body = {
        "type": "error",
        "error": {"type": error_type, "message": message or f"Fake {error_type}"},
        "request_id": request_id,
    }
    exchange.send_json(status, body, headers={"request-id": request_id})
