"""Anthropic-style content blocks as chat-completions messages (the OpenAI-compatible
provider's request, agent_app.providers.openai): every tool call next to its result, a
tool's images in a user message after the tool messages, and the images a person
attached in their own message."""

from __future__ import annotations

import json
from typing import Any


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
            # "" rather than null beside tool calls: some servers refuse a null content
            # (llama-cpp-python: "Input should be a valid string"), none refuses "".
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        out += _user_messages(blocks)
    return out


def _user_messages(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One user turn's blocks: its tool results as tool messages, then the tools' images,
    then the person's words with the images they attached."""
    out: list[dict[str, Any]] = []
    texts = []
    # Chat completions take images in user messages only: a tool's images follow all
    # the tool messages (which must come right after their calls) in one user message.
    pictures: list[dict[str, Any]] = []
    attached: list[dict[str, Any]] = []
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
        elif block["type"] == "image":
            # An image the person attached rides with their words.
            attached.append(_image_part(block["source"]))
    if pictures:
        out.append({"role": "user", "content": pictures})
    if attached:
        said = [{"type": "text", "text": "\n\n".join(texts)}] if texts else []
        out.append({"role": "user", "content": [*said, *attached]})
    elif texts:
        out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def _image_part(source: Any) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{source['media_type']};base64,{source['data']}"},
    }


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
        *(_image_part(image) for image in images),
    ]
