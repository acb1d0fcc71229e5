"""Client frames of the session socket (README, "Chatting over a WebSocket"), validated
in one place.

``parse_frame`` returns one of the frame types below (a ``TypedDict`` per type, told
apart by ``type``) with exactly the fields a handler needs, each checked; or it raises
``FrameError`` carrying the error frame's ``code`` and ``ref``. A refused frame changes
nothing and the socket stays open. ``intent`` alone stays JSON as the client sent it:
``ToolIntent.parse`` has checked it, and the turn merges it as intent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal, TypedDict

from agent_app.turns import TextTooLong, clean_text
from sessions_app.limits import FRAME_MAX_BYTES
from toolhub.lib.errors import Invalid
from toolhub.lib.storable import TooDeep, json_loads_bounded
from toolhub.tools import IntentError, ToolIntent
from toolhub.tools.mcp.asks import ACTIONS

MAX_FRAME_BYTES = FRAME_MAX_BYTES
# The largest seq the event log can hold (a signed 64-bit column on PostgreSQL).
MAX_SEQ = 2**63 - 1
# More ids than any message may carry is a malformed frame, not a bound to explain.
MAX_FILES = 100
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
APPROVAL_SCOPES = ("once", "chat")
APPROVAL_KINDS = ("approval", "sampling")
TYPES = ("chat", "edit", "regenerate", "cancel", "approve", "elicit", "resume")


class ChatFrame(TypedDict):
    type: Literal["chat"]
    text: str
    intent: Any
    # Ids of files attached to the chat (sessions_app.attachments); the turn checks them.
    files: list[str]
    # Sent as the answer to the model's question (``"answer": true``): it answers one that
    # waits or is refused (``no_question``), never begins a turn of its own.
    answer: bool


class EditFrame(TypedDict):
    """A sent message, changed and sent again: the conversation goes on from before it."""

    type: Literal["edit"]
    seq: int
    text: str
    intent: Any


class RegenerateFrame(TypedDict):
    type: Literal["regenerate"]
    intent: Any


class CancelFrame(TypedDict):
    type: Literal["cancel"]


class ApproveFrame(TypedDict):
    type: Literal["approve"]
    call_id: str
    allow: bool
    # "once" or "chat" (allowed for the rest of this chat).
    scope: str
    # "approval" (the tool's call) or "sampling" (an MCP server's request for the model).
    kind: str


class ElicitFrame(TypedDict):
    type: Literal["elicit"]
    call_id: str
    action: str
    # The form's field values as sent; checked against the form by ``turn_elicit``.
    content: dict[str, Any] | None


class ResumeFrame(TypedDict):
    type: Literal["resume"]
    after_seq: int
    render: bool


Frame = (
    ChatFrame | EditFrame | RegenerateFrame | CancelFrame | ApproveFrame | ElicitFrame | ResumeFrame
)


class ErrorFrame(TypedDict):
    """What a refused frame gets back."""

    type: Literal["error"]
    code: str
    message: str
    ref: str | None


class FrameError(Exception):
    def __init__(self, code: str, message: str, ref: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.ref = ref

    def frame(self) -> ErrorFrame:
        return {"type": "error", "code": self.code, "message": self.message, "ref": self.ref}


def parse_frame(text: str | None, data: bytes | None = None) -> Frame:
    raw = text if text is not None else data
    if raw is None:
        raise FrameError("bad_json", "empty frame")
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > MAX_FRAME_BYTES:
        raise FrameError(
            "too_large",
            f"That message is too long to send: {size:,} bytes, the limit is "
            f"{MAX_FRAME_BYTES:,} bytes (frames are at most {MAX_FRAME_BYTES // 1024} KiB).",
        )
    try:
        frame = json_loads_bounded(raw)
    except TooDeep as exc:
        raise FrameError("bad_json", str(exc)) from None
    except (ValueError, UnicodeDecodeError):
        raise FrameError("bad_json", "a frame is a JSON object") from None
    if not isinstance(frame, dict):
        raise FrameError("bad_frame", "a frame is a JSON object with a type")
    kind = frame.get("type")
    if not isinstance(kind, str):
        raise FrameError("bad_frame", "the frame has no type")
    if kind not in TYPES:
        raise FrameError("unknown_type", f"unknown frame type; use one of {', '.join(TYPES)}", kind)
    return _FIELDS[kind](frame)


def _chat(frame: dict[str, Any]) -> ChatFrame:
    # The rules are the turn's (``turns.clean_text``) and the runtime's (``ToolIntent``),
    # applied here so that a refused chat changes nothing (no subscription, no claim) and
    # gets this frame's error code; the service applies the same rules to REST messages.
    files = _files(frame.get("files"))
    try:
        text = clean_text(frame.get("text"), files=bool(files))
    except TextTooLong as exc:
        raise FrameError("too_large", exc.message, "chat") from None
    except Invalid:
        raise FrameError("bad_frame", "chat needs a non-empty text", "chat") from None
    answer = frame.get("answer", False)
    if not isinstance(answer, bool):
        raise FrameError("bad_frame", "chat's answer is true or false", "chat")
    intent = _intent(frame, "chat")
    if answer and (intent is not None or files):
        raise FrameError("bad_frame", "an answer is words only: no intent, no files", "chat")
    return {"type": "chat", "text": text, "intent": intent, "files": files, "answer": answer}


def _files(value: Any) -> list[str]:
    """Attached files' ids as sent: a list of distinct UUID strings, or nothing."""
    if value is None:
        return []
    if (
        not isinstance(value, list)
        or len(value) > MAX_FILES
        or not all(isinstance(item, str) and _UUID.fullmatch(item) for item in value)
        or len(set(value)) != len(value)
    ):
        raise FrameError(
            "bad_frame",
            f"files is a list of at most {MAX_FILES} distinct ids of files attached to this chat",
            "chat",
        )
    return [item.lower() for item in value]


def _intent(frame: dict[str, Any], ref: str) -> Any:
    intent = frame.get("intent")
    if intent is not None:
        try:
            ToolIntent.parse(intent)
        except IntentError as exc:
            raise FrameError("invalid_intent", str(exc), ref) from None
    return intent


def _edit(frame: dict[str, Any]) -> EditFrame:
    seq = frame.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise FrameError("bad_frame", "edit needs seq, the seq of one of your messages", "edit")
    try:
        chat = _chat({"text": frame.get("text"), "intent": frame.get("intent")})
    except FrameError as exc:
        raise FrameError(
            exc.code, exc.message.replace("chat needs", "edit needs"), "edit"
        ) from None
    return {"type": "edit", "seq": seq, "text": chat["text"], "intent": chat["intent"]}


def _regenerate(frame: dict[str, Any]) -> RegenerateFrame:
    # The last answer, asked for again.
    return {"type": "regenerate", "intent": _intent(frame, "regenerate")}


def _cancel(frame: dict[str, Any]) -> CancelFrame:
    return {"type": "cancel"}


def _approve(frame: dict[str, Any]) -> ApproveFrame:
    call_id, allow = frame.get("call_id"), frame.get("allow")
    if not isinstance(call_id, str) or not call_id or not isinstance(allow, bool):
        raise FrameError("bad_frame", "approve needs call_id (text) and allow (bool)", "approve")
    # "once" (the default) or "chat": allowed for the rest of this chat.
    scope = frame.get("scope", "once")
    if scope not in APPROVAL_SCOPES:
        raise FrameError("bad_frame", "approve's scope is once or chat", "approve")
    # What is approved: the tool's call (the default), or an MCP server's request for the
    # model made during it; an answer meant for the one never settles the other.
    kind = frame.get("kind", "approval")
    if kind not in APPROVAL_KINDS:
        raise FrameError("bad_frame", "approve's kind is approval or sampling", "approve")
    return {"type": "approve", "call_id": call_id, "allow": allow, "scope": scope, "kind": kind}


def _elicit(frame: dict[str, Any]) -> ElicitFrame:
    # The answer to an MCP server's form; what it holds is checked against the form by
    # turn_elicit, which alone knows it.
    call_id, action, content = frame.get("call_id"), frame.get("action"), frame.get("content")
    if not isinstance(call_id, str) or not call_id or action not in ACTIONS:
        raise FrameError(
            "bad_frame",
            f"elicit needs call_id (text) and action ({', '.join(ACTIONS)})",
            "elicit",
        )
    if content is not None and not isinstance(content, dict):
        raise FrameError("bad_frame", "elicit's content is an object of field values", "elicit")
    return {"type": "elicit", "call_id": call_id, "action": action, "content": content}


def _resume(frame: dict[str, Any]) -> ResumeFrame:
    after = frame.get("after_seq")
    if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= MAX_SEQ:
        raise FrameError(
            "bad_frame", f"resume needs after_seq, a whole number from 0 to {MAX_SEQ}", "resume"
        )
    render = frame.get("render", False)
    if not isinstance(render, bool):
        raise FrameError("bad_frame", "resume's render is true or false", "resume")
    return {"type": "resume", "after_seq": after, "render": render}


_FIELDS: dict[str, Callable[[dict[str, Any]], Frame]] = {
    "chat": _chat,
    "edit": _edit,
    "regenerate": _regenerate,
    "cancel": _cancel,
    "approve": _approve,
    "elicit": _elicit,
    "resume": _resume,
}
