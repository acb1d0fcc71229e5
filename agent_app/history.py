"""The provider's conversation, rebuilt from stored events, never rewritten
(docs/architecture.md, hard line 4).

Stored ``tool_call`` / ``tool_result`` pairs replay exactly as they were stored, even for a
tool that is disabled or gone now. The rebuild is a pure function of the event log:

- ``user_message`` → a user text block, after a line naming the files it carried (they
  are in the workspace) and the images among them as ``image`` blocks;
- ``assistant_message`` and the ``tool_call`` events after it → one assistant message
  (text first, then its tool_use blocks, as the model produced them; a call made through
  ``call_tool`` replays as that ``call_tool`` call);
- ``tool_result`` → a tool_result block in the next user message (``is_error`` for any
  status but ``ok``; under the native strategy, tools that ``tool_search`` loaded replay
  as ``tool_reference`` blocks, for tools the request still carries; images a tool
  returned are ``image`` blocks where the tool sent them among its text, checked again
  as they are read: ``toolhub.tools.images.interleave``);
- a ``tool_call`` the log never answered gets an error result in the rebuild, so one
  crash cannot make every later request invalid.

Consecutive blocks of one role merge into one message, so roles always alternate. Other
kinds (deltas, usage, turn markers, approvals) carry nothing the model needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from toolhub.tools.files import size_in_words
from toolhub.tools.images import interleave, stored_images


def tool_use_block(data: dict[str, Any]) -> dict[str, Any]:
    if data.get("via") == "call_tool":
        name, arguments = "call_tool", {"name": data["name"], "arguments": data["arguments"]}
    else:
        name, arguments = data["name"], data["arguments"]
    return {"type": "tool_use", "id": data["call_id"], "name": name, "input": arguments}


def tool_result_block(
    data: dict[str, Any], *, native: bool, loadable: frozenset[str] | None = None
) -> dict[str, Any]:
    references = data.get("references")
    # A reference to a tool this request does not carry would be refused by the provider.
    if references and loadable is not None:
        references = [name for name in references if name in loadable]
    ok = data.get("status", "ok") == "ok"
    images = stored_images(data.get("images")) if ok else ()
    if native and references:
        content: Any = [{"type": "tool_reference", "tool_name": name} for name in references]
    elif images:
        content = [
            {"type": "text", "text": piece}
            if isinstance(piece, str)
            else {
                "type": "image",
                "source": {"type": "base64", "media_type": piece.media_type, "data": piece.data},
            }
            for piece in interleave(data.get("content") or "", images)
        ]
    else:
        content = data.get("content") or ""
    block = {"type": "tool_result", "tool_use_id": data["call_id"], "content": content}
    if not ok:
        block["is_error"] = True
    return block


def messages_from_events(
    events: Iterable[tuple[str, dict[str, Any]]],
    *,
    native: bool = False,
    loadable: frozenset[str] | None = None,
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    unanswered: dict[str, None] = {}

    def add(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for kind, data in events:
        if kind == "user_message":
            for block in _attached(data):
                add("user", block)
            text = data.get("text") or ""
            if text:
                add("user", {"type": "text", "text": text})
        elif kind == "assistant_message":
            text = data.get("text") or ""
            if text:
                add("assistant", {"type": "text", "text": text})
        elif kind == "tool_call":
            add("assistant", tool_use_block(data))
            unanswered[data["call_id"]] = None
        elif kind == "tool_result":
            add("user", tool_result_block(data, native=native, loadable=loadable))
            unanswered.pop(data["call_id"], None)
        if kind in ("user_message", "assistant_message") and unanswered:
            _pair(messages, unanswered)
    if unanswered:
        _pair(messages, unanswered)
    return messages


# How the line naming a message's files begins (the demo provider answers it).
ATTACHED = "[The person attached "


def _attached(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The files a person's message carried, as the model is told of them: a line naming
    each (they are in the workspace, where its tools find them), then the images among
    them as image blocks, checked again as they are read."""
    files = [entry for entry in data.get("files") or () if isinstance(entry, dict)]
    if not files:
        return []
    images = stored_images(data.get("images"))
    named = "; ".join(
        f"{entry.get('name')} ({size_in_words(int(entry.get('size') or 0))}, "
        f"{entry.get('media_type')})"
        for entry in files
    )
    shown = f" {len(images)} of them shown below." if images else ""
    note = f"{ATTACHED}{len(files)} file{'s' * (len(files) > 1)}, saved in "
    note += f"the workspace: {named}.{shown}]"
    return [
        {"type": "text", "text": note},
        *(
            {
                "type": "image",
                "source": {"type": "base64", "media_type": image.media_type, "data": image.data},
            }
            for image in images
        ),
    ]


def _pair(messages: list[dict[str, Any]], unanswered: dict[str, None]) -> None:
    """A call the log never answered (a crash between the two writes) is answered here as
    an error, so providers, which refuse a tool_use without its result, accept the rest."""
    blocks = [
        {
            "type": "tool_result",
            "tool_use_id": call_id,
            "content": "No result was recorded.",
            "is_error": True,
        }
        for call_id in unanswered
    ]
    unanswered.clear()
    last = messages.pop() if messages and messages[-1]["role"] != "assistant" else None
    messages.append({"role": "user", "content": blocks})
    if last is not None:
        messages[-1]["content"] += last["content"]


def merged_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join consecutive messages of one role (the new text after stored tool results)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if out and out[-1]["role"] == message["role"]:
            out[-1] = {"role": message["role"], "content": out[-1]["content"] + message["content"]}
        else:
            out.append(message)
    return out
