"""The items of the chat page's transcript: a message, a tool call's card and a turn's end,
with what each says to the templates that draw it (``templates/sessions_app/_transcript.html``).

``sessions_app.transcript`` builds and changes them, folding the event log; this module
only says what an item is and how it reads.

Invariants:

- An item's properties are pure functions of its fields (no query, no clock), so the html
  of an ended turn's item, once rendered, stays right (``transcript_html`` caches it).
- What arrives inside events (a call's arguments, a form, files, usage) is read
  defensively: a value of the wrong shape is left out or read as empty, and never breaks
  the page; a download link is only ever made of a real file id.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sessions_app.branches import Versions
from toolhub.lib.prices import Price, cost_usd, usd_text
from toolhub.lib.storable import json_loads_bounded
from toolhub.lib.workspace_fs import RefusedPath, path_parts
from toolhub.tools.files import MAX_FILES, clean_name, size_in_words
from toolhub.tools.images import ToolImage

Data = dict[str, Any]

QUESTION_TOOL = "ask_user_question"
# A result longer than this is shown cut in its card, with "Show all".
RESULT_SHOWN_CHARS = 4_000
# Tools whose success leaves a file at their ``path`` argument: their card links to it.
WRITING_TOOLS = frozenset({"write", "edit"})


@dataclass(slots=True)
class Message:
    id: str
    role: str
    text: str
    created: datetime | None
    turn: str
    html: str = ""
    streaming: bool = False
    kind: str = "message"
    # The person's message's versions (an edit keeps the earlier one), when it has some.
    versions: Versions | None = None
    # The files a person's message carried (in the chat's workspace).
    files: tuple[Attached, ...] = ()


@dataclass(frozen=True, slots=True)
class Attached:
    """A file a person attached to their message, as the message lists it."""

    name: str
    size: int
    media_type: str

    @property
    def size_words(self) -> str:
        return size_in_words(self.size)

    @classmethod
    def listed(cls, value: Any) -> tuple[Attached, ...]:
        """The entries a stored message names, checked (a hand-written row shows what it
        can, never a 500)."""
        if not isinstance(value, list):
            return ()
        return tuple(
            cls(
                str(entry.get("name", ""))[:255],
                json_int(entry.get("size")),
                str(entry.get("media_type", ""))[:100],
            )
            for entry in value
            if isinstance(entry, dict)
        )


@dataclass(frozen=True, slots=True)
class CardFile:
    """A file a tool offered, as its card lists it: a download (``id``), or why the chat
    did not keep it (``refused``)."""

    name: str
    size: int
    id: str = ""
    refused: str = ""

    @property
    def size_words(self) -> str:
        return size_in_words(self.size)


@dataclass(slots=True)
class Card:
    id: str
    call_id: str
    name: str
    arguments: dict[str, Any]
    created: datetime | None
    turn: str
    via: str = ""
    status: str = "running"
    content: str = ""
    reason: str = ""
    elapsed_ms: int | None = None
    cached: bool = False
    full_ref: str = ""
    # "", then "waiting" until the person answers: "allowed", "denied", "timeout",
    # "cancelled".
    approval: str = ""
    # "chat" when the person allowed the tool for the rest of the chat.
    approval_scope: str = ""
    # Whether the waiting approval may be lifted for the chat (not an operator's ask).
    chat_allowable: bool = False
    # The approval policy that decided the call: who (author, operator, profile, chat)
    # and why, in a person's words (toolhub.tools.approval).
    policy_by: str = ""
    policy_why: str = ""
    # For ask_user_question: "waiting", "answered", "timeout", "cancelled".
    asking: str = ""
    answer: str = ""
    kind: str = "card"
    # Images the tool returned, checked again as they are read (toolhub/tools/images.py).
    images: tuple[ToolImage, ...] = ()
    # The JSON the tool returned beside its text (an MCP tool's structuredContent).
    structured: Any = None
    # Files the tool offered the person (sessions_app.result_files), read defensively.
    files: tuple[CardFile, ...] = ()
    # A form an MCP server put to the person during the call (its latest, as stored):
    # "waiting", then "accept", "decline", "cancel", "timeout" or "cancelled".
    eliciting: str = ""
    form: Data = field(default_factory=dict)
    form_sent: Data = field(default_factory=dict)
    # An MCP server's request for the chat's model during the call: "waiting", then
    # "allowed", "denied", "timeout" or "cancelled"; what it asked and what came back.
    sampling: str = ""
    sampling_ask: Data = field(default_factory=dict)
    sampled: str = ""

    @property
    def form_fields(self) -> list[Data]:
        """The form's fields as the card draws them: each with its input's type."""
        fields = self.form.get("fields")
        return [
            {**item, "input": _INPUTS.get(str(item.get("format") or ""), "text")}
            for item in (fields if isinstance(fields, list) else [])
            if isinstance(item, dict)
        ]

    @property
    def form_answers(self) -> list[tuple[str, str]]:
        """What the person sent, by field title, as text."""
        titles = {str(item.get("name")): str(item.get("title")) for item in self.form_fields}
        return [(titles.get(name, name), _shown(value)) for name, value in self.form_sent.items()]

    @property
    def question(self) -> str:
        return str(self.arguments.get("question", "")) if self.name == QUESTION_TOOL else ""

    @property
    def options(self) -> list[str]:
        options = self.arguments.get("options") if self.name == QUESTION_TOOL else None
        return [str(option) for option in options] if isinstance(options, list) else []

    @property
    def written_path(self) -> str:
        """The workspace file a ``write`` or ``edit`` that succeeded left: its ``path``
        argument when that is a workspace path, else "". The link it makes is served as
        any workspace file is (``sessions_app.workspace_files``): a file since replaced by
        a symlink is refused then."""
        path = self.arguments.get("path")
        if self.name not in WRITING_TOOLS or self.status != "ok" or not isinstance(path, str):
            return ""
        try:
            return "/".join(path_parts(path))
        except RefusedPath:
            return ""

    @property
    def seq(self) -> int:
        """The seq of the card's ``tool_call`` (its id without the letter)."""
        return int(self.id[1:])

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, indent=2, ensure_ascii=False)

    @property
    def finished(self) -> bool:
        return self.status != "running"

    @property
    def shown_result(self) -> str:
        """The result as the card shows it: JSON pretty-printed, long text cut."""
        text = self.content
        stripped = text.strip()
        if stripped[:1] in ("{", "[") and len(stripped) <= RESULT_SHOWN_CHARS * 4:
            # Bounded: a tool's output nested thousands deep is shown as it came.
            with contextlib.suppress(ValueError):
                text = json.dumps(json_loads_bounded(stripped), indent=2, ensure_ascii=False)
        return text if len(text) <= RESULT_SHOWN_CHARS else text[:RESULT_SHOWN_CHARS]

    @property
    def structured_json(self) -> str:
        if self.structured is None:
            return ""
        return json.dumps(self.structured, indent=2, ensure_ascii=False)

    @property
    def result_cut(self) -> bool:
        return len(self.content) > RESULT_SHOWN_CHARS

    @property
    def policy_note(self) -> str:
        """Which policy decided, when it is worth a line: not the author's plain default."""
        if not self.policy_why or (self.policy_by == "author" and not self.approval):
            return ""
        return f"Policy: {self.policy_why}."

    @property
    def policy_tag(self) -> str:
        """The card's summary says it when a call ran or stopped by a person's or an
        operator's policy rather than its author's default."""
        return {
            "chat": "allowed for this chat",
            "profile": "profile's policy",
            "operator": "operator's policy",
        }.get(self.policy_by, "")

    @property
    def took(self) -> str:
        """How long the call ran, as a person reads it ("" when it did not run)."""
        if self.elapsed_ms is None:
            return ""
        if self.elapsed_ms < 1000:
            return f"{self.elapsed_ms} ms"
        seconds = self.elapsed_ms / 1000
        if seconds < 60:
            return f"{seconds:.1f} s"
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"

    @property
    def open(self) -> bool:
        """A call still running (its live output shows), errors and anything waiting for
        the person are shown expanded, on a reload as live; the page keeps a card as the
        person left it once they opened or folded it (chat.js, ``place``)."""
        return self.status in ("running", "error", "lost") or "waiting" in (
            self.approval,
            self.asking,
            self.eliciting,
            self.sampling,
        )


@dataclass(slots=True)
class TurnEnd:
    id: str
    turn: str
    created: datetime | None
    reason: str = ""
    code: str = ""
    message: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    # The last provider call's whole input: how full the context window was.
    context_tokens: int = 0
    context_window: int = 0
    # Where the window came from: "server", "setting" or "assumed" (nobody said).
    context_source: str = ""
    model: str = ""
    # Who answered, and the profile its tools came from (turns before these were
    # recorded say neither).
    agent: str = ""
    profile: str = ""
    # The prices the turn was counted at (its provider's list), else the price table's.
    price: Price | None = None
    kind: str = "turn_end"
    # The versions of the turn's answer (a regenerate keeps the earlier one), if any.
    versions: Versions | None = None

    @property
    def failed(self) -> bool:
        return bool(self.code)

    @property
    def cost(self) -> str:
        """The turn's estimated cost, or "" for a model without a known price."""
        usd = cost_usd(
            price=self.price,
            model=self.model,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cache_read=self.cache_read,
            cache_write=self.cache_write,
        )
        if not usd or not self.model:
            # Unknown, or free (the offline demo): nothing to say.
            return ""
        return usd_text(usd)

    @property
    def context_share(self) -> int:
        if not self.context_window:
            return 0
        return min(100, round(self.context_tokens * 100 / self.context_window))


Item = Message | Card | TurnEnd


# An MCP form's text formats, as the browser's inputs take them.
_INPUTS = {"email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)


def stored_files(value: Any) -> tuple[CardFile, ...]:
    """The files a ``tool_result`` event names, as stored by ``result_files_store``; an
    entry of any other shape is left out (a row written by hand never breaks the page, and
    a link is only ever made of a real file id)."""
    if not isinstance(value, list):
        return ()
    files = []
    for entry in value[:MAX_FILES]:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        size, refused = max(0, json_int(entry.get("size"))), entry.get("refused")
        if isinstance(refused, str) and refused:
            files.append(CardFile(clean_name(entry["name"]), size, refused=refused[:300]))
        elif _is_uuid(entry.get("id")):
            files.append(CardFile(clean_name(entry["name"]), size, id=str(entry["id"])))
    return tuple(files)


def _is_uuid(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def json_int(value: Any) -> int:
    """A count as an event carries it: a whole number, anything else (a bool included) 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def stored_price(value: Any) -> Price | None:
    """A turn's prices as ``turn_started`` stored them: [input, output] US dollars per
    million tokens, or nothing (older turns, unknown prices)."""
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(part, int | float) and 0 <= part < 1e9 for part in value)
    ):
        return Price(float(value[0]), float(value[1]))
    return None
