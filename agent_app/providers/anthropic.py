"""Anthropic Messages API through the official SDK's async client, streamed.

Prompt caching: breakpoints go on the last *resident* tool (never on a deferred one), on
the last system block, and on the last block of the conversation, so each request of a
turn reads the previous one's prefix. The tools array is sent exactly as resolution laid
it out; only ``cache_control`` is added, so the bytes are the same on every turn with the
same intent. Under the ``native`` strategy deferred tools travel with ``defer_loading``
and our ``tool_search`` answers with ``tool_reference`` blocks (the history does that).

The body is serialized here, once (``payload``), and handed to the SDK as bytes: the SDK
would serialize the array again in its own layout, and the tokens counted would no longer
be those of the bytes sent (docs/accounting.md).

The SDK's own retries are off: the turn runner retries, in one place, and only before a
stream has produced anything.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
from anthropic.types import Message, RawMessageStreamEvent

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
)
from profiles_app.services.connections import DEFAULT_MODELS
from toolhub.lib.model_windows import believable
from toolhub.tools.schema import canonical_json

CACHE = {"type": "ephemeral"}
# A provider's model list is read up to this many (Anthropic lists a few dozen).
LISTED = 2_000


class AnthropicProvider:
    name = "anthropic"
    default_model = DEFAULT_MODELS["anthropic"]
    supports_native = True
    is_demo = False

    def __init__(self, *, api_key: str, base_url: str = "", timeout: float = 600.0) -> None:
        self.origin = (base_url or "https://api.anthropic.com").rstrip("/")
        self._clients = PerLoop(
            lambda: anthropic.AsyncAnthropic(
                api_key=api_key or "missing",
                base_url=base_url or None,
                max_retries=0,
                # A stream that says nothing for two minutes has stalled (the API pings).
                timeout=anthropic.Timeout(timeout, connect=10.0, read=120.0),
            )
        )

    def wire_tools(self, tools_json: str, deferred: frozenset[str]) -> WireTools:
        return _wire_tools(tools_json, deferred)

    def payload(self, request: ProviderRequest) -> bytes:
        """The request body, with the cache breakpoints in place."""
        system: list[dict[str, Any]] = [
            {"type": "text", "text": text} for text in (request.system, request.catalog) if text
        ]
        if system:
            system[-1]["cache_control"] = CACHE
        fields: dict[str, Any] = {
            "model": request.model or self.default_model,
            "max_tokens": request.max_tokens,
            "messages": _with_last_breakpoint(request.messages),
            "stream": True,
        }
        if system:
            fields["system"] = system
        return json_body(fields, self.wire_tools(request.tools_json, request.deferred))

    async def model_window(self, model: str) -> int | None:
        """The model's ``max_input_tokens`` from the Models API."""
        with _mapped_errors():
            info = await self._clients.get().models.retrieve(model or self.default_model)
        return believable(info.max_input_tokens)

    async def list_models(self) -> list[dict[str, Any]]:
        """The models the Models API lists (``GET /v1/models``, every page up to
        ``LISTED``), each with its ``max_input_tokens`` when the API gives it."""
        listed: list[dict[str, Any]] = []
        with _mapped_errors():
            async for info in self._clients.get().models.list(limit=100):
                window = believable(getattr(info, "max_input_tokens", None))
                listed.append({"id": info.id, "window": window})
                if len(listed) >= LISTED:
                    break
        return listed

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        with _mapped_errors():
            response = await self._clients.get().post(
                "/v1/messages",
                cast_to=Message,
                content=self.payload(request),
                options={"headers": {"Content-Type": "application/json"}},
                stream=True,
                stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
            )
        try:
            async for event in _events(response):
                yield event
        finally:
            await response.close()


@functools.lru_cache(maxsize=256)
def _wire_tools(tools_json: str, deferred: frozenset[str]) -> WireTools:
    """The array with ``cache_control`` on its last resident tool; the rest as laid out."""
    texts = split_array(tools_json)
    names = tuple(json.loads(text)["name"] for text in texts)
    resident = [index for index, name in enumerate(names) if name not in deferred]
    if resident:
        last = resident[-1]
        texts[last] = canonical_json({**json.loads(texts[last]), "cache_control": CACHE})
    return WireTools(names=names, texts=tuple(texts), deferred=deferred & frozenset(names))


async def _events(response: Any) -> AsyncIterator[ProviderEvent]:
    tool_blocks: dict[int, dict[str, Any]] = {}
    usage = Usage()
    stop = "end_turn"
    try:
        async for event in _sdk_errors_mapped(response):
            kind = event.type
            if kind == "message_start":
                usage = _usage(event.message.usage, usage)
            elif kind == "content_block_start" and event.content_block.type == "tool_use":
                block = event.content_block
                tool_blocks[event.index] = {"id": block.id, "name": block.name, "json": ""}
            elif kind == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta" and delta.text:
                    yield TextDelta(delta.text)
                elif delta.type == "input_json_delta" and event.index in tool_blocks:
                    tool_blocks[event.index]["json"] += delta.partial_json
            elif kind == "content_block_stop" and event.index in tool_blocks:
                block = tool_blocks.pop(event.index)
                yield ToolUse(block["id"], block["name"], tool_input(block["json"]))
            elif kind == "message_delta":
                stop = event.delta.stop_reason or stop
                usage = _usage(event.usage, usage)
    except (ValueError, AttributeError, KeyError) as exc:
        raise ProviderError("provider_malformed", f"unreadable stream: {exc}") from None
    yield usage
    yield Stop(stop)


@contextlib.contextmanager
def _mapped_errors() -> Iterator[None]:
    """The SDK's errors as ``ProviderError``, on the request and in the stream alike."""
    try:
        yield
    except anthropic.APIStatusError as exc:
        raise status_error(exc.status_code, _message(exc), body=str(exc.body)[:4000]) from None
    except anthropic.APITimeoutError:
        raise ProviderError(
            "provider_timeout", "the model did not answer in time", retryable=True
        ) from None
    except anthropic.APIConnectionError as exc:
        raise ProviderError("provider_unreachable", str(exc), retryable=True) from None


async def _sdk_errors_mapped(response: Any) -> AsyncIterator[Any]:
    with _mapped_errors():
        async for event in response:
            yield event


def _usage(reported: Any, previous: Usage) -> Usage:
    """Merge a usage report: ``message_delta`` repeats or omits what ``message_start`` said."""

    def pick(name: str) -> int:
        value = getattr(reported, name, None)
        return int(value) if isinstance(value, int) else getattr(previous, name)

    return Usage(
        input_tokens=pick("input_tokens"),
        output_tokens=pick("output_tokens"),
        cache_read_input_tokens=pick("cache_read_input_tokens"),
        cache_creation_input_tokens=pick("cache_creation_input_tokens"),
    )


def _with_last_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not messages:
        return messages
    last = dict(messages[-1])
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    if not blocks:
        return messages
    blocks[-1] = {**blocks[-1], "cache_control": CACHE}
    last["content"] = blocks
    return [*messages[:-1], last]


def _message(exc: anthropic.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    said = error.get("message") if isinstance(error, dict) else None
    return str(said or exc.message)
