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
from collections.abc import AsyncIterator
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
)
from toolhub.tools.schema import canonical_json

STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


class OpenAIProvider:
    name = "openai"
    default_model = "llama3.1"
    supports_native = False
    is_demo = False

    def __init__(self, *, base_url: str, api_key: str = "", timeout: float = 600.0) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
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

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        client = self._clients.get()
        try:
            async with client.stream(
                "POST",
                self._url,
                content=self.payload(request),
                headers={**self._headers, "Content-Type": "application/json"},
            ) as response:
                if response.status_code >= 400:
                    body = (await response.aread()).decode(errors="replace")
                    raise status_error(response.status_code, _error_message(body))
                async for event in _events(response):
                    yield event
        except httpx.TimeoutException:
            raise ProviderError(
                "provider_timeout", "the model did not answer in time", retryable=True
            ) from None
        except httpx.TransportError as exc:
            raise ProviderError(
                "provider_unreachable", f"{type(exc).__name__}: {exc}", retryable=True
            ) from None


async def _events(response: httpx.Response) -> AsyncIterator[ProviderEvent]:
    calls: dict[int, dict[str, str]] = {}
    usage = Usage()
    stop = "end_turn"
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
            choices = chunk.get("choices") or []
            if isinstance(chunk.get("usage"), dict):
                usage = Usage(
                    input_tokens=int(chunk["usage"].get("prompt_tokens") or 0),
                    output_tokens=int(chunk["usage"].get("completion_tokens") or 0),
                )
            for choice in choices:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    yield TextDelta(delta["content"])
                for position, piece in enumerate(delta.get("tool_calls") or []):
                    # Some compatible servers leave out ``index``; then it is the position.
                    index = int(piece.get("index", position))
                    call = calls.setdefault(index, {"id": "", "name": "", "args": ""})
                    call["id"] = piece.get("id") or call["id"]
                    function = piece.get("function") or {}
                    call["name"] += function.get("name") or ""
                    call["args"] += function.get("arguments") or ""
                if choice.get("finish_reason"):
                    stop = STOP_REASONS.get(choice["finish_reason"], choice["finish_reason"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProviderError("provider_malformed", f"unreadable stream: {exc}") from None
    for index in sorted(calls):
        call = calls[index]
        yield ToolUse(call["id"] or f"call_{index}", call["name"], tool_input(call["args"]))
    yield usage
    yield Stop(stop)


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


def _error_message(body: str) -> str:
    try:
        error = json.loads(body).get("error")
        return str(error.get("message") if isinstance(error, dict) else error)
    except (ValueError, AttributeError):
        return body[:300]


def to_chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Content blocks → chat-completions messages, keeping every call next to its result."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if message["role"] == "assistant":
            text = "".join(block["text"] for block in blocks if block["type"] == "text")
            calls = [
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": json.dumps(block["input"])},
                }
                for block in blocks
                if block["type"] == "tool_use"
            ]
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        texts = []
        # Chat completions take images in user messages only: a tool's images follow all
        # the tool messages (which must come right after their calls) in one user message.
        pictures: list[dict[str, Any]] = []
        for block in blocks:
            if block["type"] == "tool_result":
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": block["tool_use_id"],
                        "content": _result_text(block["content"]),
                    }
                )
                pictures += _result_images(block["tool_use_id"], block["content"])
            elif block["type"] == "text":
                texts.append(block["text"])
        if pictures:
            out.append({"role": "user", "content": pictures})
        if texts:
            out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    lines = []
    images = 0
    for block in content:
        if block.get("type") == "image":
            # The image itself follows in a user message; its place is kept here.
            images += 1
            lines.append(f"[image {images}, sent in the next message]")
        else:
            lines.append(block.get("text") or f"Loaded tool {block.get('tool_name')}")
    return "\n".join(lines)


def _result_images(call_id: str, content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return []
    images = [block["source"] for block in content if block.get("type") == "image"]
    if not images:
        return []
    return [
        {"type": "text", "text": f"The images the tool call {call_id} returned:"},
        *(
            {
                "type": "image_url",
                "image_url": {"url": f"data:{image['media_type']};base64,{image['data']}"},
            }
            for image in images
        ),
    ]
