"""What the chat page shows, folded from the event log: messages, tool cards and turn
ends, each with a stable id.

The page renders the fold of the stored log; a socket folds the same events as it
delivers them and sends the items each one changed, rendered by the same partials
(``templates/sessions_app/_transcript.html``). So an approval, a question or a card is
in one state everywhere: every tab and every reload derive it from the same events, and
nothing the browser did locally can disagree with the log.

Invariants:

- ``Transcript.apply`` is a pure function of the events applied, in seq order. Ids are a
  letter and the seq of the event that began the item (``m`` a message: a user message,
  or an answer's first text delta; ``c`` a tool call's card; ``t`` a turn's end), so two
  folds of the same log name the same items.
- Items of an ended turn never change again, so a fold may start at the last turn
  started by a given seq (``transcript_seed``) and agree with a fold from seq 1 on every
  item it then changes; a socket's fold forgets each turn when it ends.
- A ``rewind`` removes every item after its seq; pages drop them by id.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.template.loader import render_to_string

from sessions_app.models import SessionEvent
from toolhub.lib.prices import cost_usd
from toolhub.lib.storable import json_loads_bounded
from toolhub.tools.files import MAX_FILES, clean_name, size_in_words
from toolhub.tools.images import ToolImage, stored_images

Data = dict[str, Any]
When = datetime | None

QUESTION_TOOL = "ask_user_question"
# A result longer than this is shown cut in its card, with "Show all".
RESULT_SHOWN_CHARS = 4_000


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
    def open(self) -> bool:
        """Errors and anything waiting for the person are shown expanded."""
        return self.status in ("error", "lost") or "waiting" in (
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
    kind: str = "turn_end"

    @property
    def failed(self) -> bool:
        return bool(self.code)

    @property
    def cost(self) -> str:
        """The turn's estimated cost, or "" for a model without a known price."""
        usd = cost_usd(
            model=self.model,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cache_read=self.cache_read,
            cache_write=self.cache_write,
        )
        if not usd or not self.model:
            # Unknown, or free (the offline demo): nothing to say.
            return ""
        return f"${usd:.4f}" if usd < 1 else f"${usd:,.2f}"

    @property
    def context_share(self) -> int:
        if not self.context_window:
            return 0
        return min(100, round(self.context_tokens * 100 / self.context_window))


Item = Message | Card | TurnEnd


@dataclass
class Transcript:
    """The fold. ``items`` keeps the page order (insertion order)."""

    items: dict[str, Item] = field(default_factory=dict)
    # The turn that has started and not ended, if any.
    running: str = ""
    demo: bool = False
    last_seq: int = 0
    _streaming: str = ""
    _cards: dict[str, Card] = field(default_factory=dict)
    _usage: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _models: dict[str, tuple[str, int, str]] = field(default_factory=dict)

    def apply(
        self, *, seq: int, kind: str, data: dict[str, Any], turn: str, created: datetime | None
    ) -> list[str]:
        """Fold one event; the ids of the items it added, changed or removed, in page
        order."""
        self.last_seq = max(self.last_seq, seq)
        handler = _HANDLERS.get(kind)
        return handler(self, seq, data, turn, created) if handler else []

    def forget_ended(self) -> None:
        """Drop every item (no turn runs after an end): what a socket need not keep."""
        self.items.clear()
        self._cards.clear()
        self._streaming = ""

    @property
    def waiting_question(self) -> Card | None:
        return next((card for card in self._cards.values() if card.asking == "waiting"), None)

    def _user(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        item = Message(f"m{seq}", "user", str(data.get("text", "")), created, turn)
        self.items[item.id] = item
        self._streaming = ""
        return [item.id]

    def _started(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        self.running = turn
        self.demo = bool(data.get("demo"))
        self._usage[turn] = []
        self._models[turn] = (
            str(data.get("model", "")),
            _int(data.get("context_window")),
            str(data.get("context_source", ""))[:16],
        )
        return []

    @property
    def context(self) -> TurnEnd | None:
        """The last turn's end that says how full the context window is."""
        ends = (item for item in reversed(self.items.values()) if isinstance(item, TurnEnd))
        return next((end for end in ends if end.context_tokens), None)

    def _delta(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        text = str(data.get("text", ""))
        current = self.items.get(self._streaming)
        if isinstance(current, Message):
            current.text += text
            # Changed, not re-sent: the page appends the delta's text itself.
            return []
        item = Message(f"m{seq}", "assistant", text, created, turn, streaming=True)
        self.items[item.id] = item
        self._streaming = item.id
        return [item.id]

    def _assistant(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        current = self.items.get(self._streaming)
        text, html = str(data.get("text", "")), str(data.get("html", ""))
        if isinstance(current, Message):
            current.text, current.html, current.streaming = text, html, False
            item = current
        else:
            item = Message(f"m{seq}", "assistant", text, created, turn, html=html)
            self.items[item.id] = item
        self._streaming = ""
        return [item.id]

    def _call(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        call_id = str(data.get("call_id", ""))
        arguments = data.get("arguments")
        card = Card(
            id=f"c{seq}",
            call_id=call_id,
            name=str(data.get("name", "")),
            arguments=arguments if isinstance(arguments, dict) else {},
            created=created,
            turn=turn,
            via=str(data.get("via", "")),
        )
        if card.name == QUESTION_TOOL:
            card.asking = "waiting"
        self.items[card.id] = card
        self._cards[call_id] = card
        self._streaming = ""
        return [card.id]

    def _card_of(self, data: Data) -> Card | None:
        """The latest card of the call an event names (providers reuse call ids)."""
        return self._cards.get(str(data.get("call_id", "")))

    def _approval(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        card = self._card_of(data)
        if card is None or card.finished:
            return []
        card.approval = "waiting"
        card.chat_allowable = bool(data.get("chat_allowable"))
        self._policy(card, data)
        return [card.id]

    @staticmethod
    def _policy(card: Card, data: Data) -> None:
        policy = data.get("policy")
        if isinstance(policy, dict):
            card.policy_by, card.policy_why = str(policy.get("by", "")), str(policy.get("why", ""))

    def _approval_answered(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        card = self._card_of(data)
        if card is None:
            return []
        card.approval = str(data.get("outcome", "denied"))
        card.approval_scope = str(data.get("scope", ""))
        return [card.id]

    def _question_answered(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        card = self._card_of(data)
        if card is None:
            return []
        card.asking = str(data.get("outcome", "answered"))
        card.answer = str(data.get("text", ""))
        return [card.id]

    def _elicitation(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        card = self._card_of(data)
        if card is None or card.finished:
            return []
        card.eliciting, card.form_sent = "waiting", {}
        card.form = {key: data.get(key) for key in ("server", "message", "mode", "url", "fields")}
        return [card.id]

    def _elicitation_answered(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        card = self._card_of(data)
        if card is None:
            return []
        card.eliciting = str(data.get("outcome", "cancel"))
        content = data.get("content")
        card.form_sent = content if isinstance(content, dict) else {}
        return [card.id]

    def _sampling(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        card = self._card_of(data)
        if card is None or card.finished:
            return []
        card.sampling, card.sampled = "waiting", ""
        card.sampling_ask = {
            key: data.get(key) for key in ("server", "model", "system", "messages", "max_tokens")
        }
        return [card.id]

    def _sampling_answered(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        card = self._card_of(data)
        if card is None:
            return []
        card.sampling = str(data.get("outcome", "denied"))
        return [card.id]

    def _sampling_result(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        card = self._card_of(data)
        if card is None:
            return []
        card.sampled = str(data.get("text", ""))
        return [card.id]

    def _result(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        card = self._card_of(data)
        if card is None:
            return []
        card.status = str(data.get("status", "error"))
        card.content = str(data.get("content", ""))
        card.reason = str(data.get("reason", ""))
        elapsed = data.get("elapsed_ms")
        card.elapsed_ms = elapsed if isinstance(elapsed, int) else None
        card.cached = bool(data.get("cached"))
        card.full_ref = str(data.get("full_ref", ""))
        card.images = stored_images(data.get("images")) if card.status == "ok" else ()
        card.files = _stored_files(data.get("files")) if card.status == "ok" else ()
        card.structured = data.get("structured")
        self._policy(card, data)
        if card.approval == "waiting":
            card.approval = "cancelled" if card.status == "cancelled" else "timeout"
        for state in ("eliciting", "sampling"):
            if getattr(card, state) == "waiting":
                setattr(card, state, "cancelled")
        if card.asking == "waiting":
            card.asking = "answered" if card.status == "ok" else "cancelled"
            if card.status == "ok" and not card.answer:
                card.answer = card.content
        return [card.id]

    def _usage_event(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        self._usage.setdefault(turn, []).append(data)
        return []

    def _end(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        item = TurnEnd(f"t{seq}", turn, created)
        if "code" in data:
            item.code = str(data.get("code", "")) or "failed"
            item.message = str(data.get("message", ""))
        else:
            item.reason = str(data.get("reason", ""))
        item.model, item.context_window, item.context_source = self._models.pop(turn, ("", 0, ""))
        calls = self._usage.pop(turn, [])
        for call in calls:
            item.input_tokens += _int(call.get("input_tokens"))
            item.output_tokens += _int(call.get("output_tokens"))
            item.cache_read += _int(call.get("cache_read_input_tokens"))
            item.cache_write += _int(call.get("cache_creation_input_tokens"))
        if calls:
            last = calls[-1]
            item.context_tokens = (
                _int(last.get("input_tokens"))
                + _int(last.get("cache_read_input_tokens"))
                + _int(last.get("cache_creation_input_tokens"))
            )
        self.items[item.id] = item
        if self.running == turn:
            self.running = ""
        self._streaming = ""
        changed = [item.id]
        # What the turn left streaming stays as text; waiting cards are no longer waiting.
        for card in self._cards.values():
            if card.turn == turn and (card.approval == "waiting" or card.asking == "waiting"):
                card.approval = "cancelled" if card.approval == "waiting" else card.approval
                card.asking = "cancelled" if card.asking == "waiting" else card.asking
                changed.insert(0, card.id)
        return changed

    def _rewind(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        """An edit or a regenerate: everything after ``to`` leaves the conversation (it
        stays in the log). The ids come back so a socket can remove them."""
        to = data.get("to")
        to = to if isinstance(to, int) else seq
        gone = [key for key in self.items if int(key[1:]) > to]
        for key in gone:
            item = self.items.pop(key)
            if isinstance(item, Card):
                self._cards.pop(item.call_id, None)
        self._streaming = ""
        return gone


# An MCP form's text formats, as the browser's inputs take them.
_INPUTS = {"email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)


def _stored_files(value: Any) -> tuple[CardFile, ...]:
    """The files a ``tool_result`` event names, as stored by ``result_files_store``; an
    entry of any other shape is left out (a row written by hand never breaks the page, and
    a link is only ever made of a real file id)."""
    if not isinstance(value, list):
        return ()
    files = []
    for entry in value[:MAX_FILES]:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        size, refused = max(0, _int(entry.get("size"))), entry.get("refused")
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


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


_HANDLERS = {
    "user_message": Transcript._user,
    "turn_started": Transcript._started,
    "text_delta": Transcript._delta,
    "assistant_message": Transcript._assistant,
    "tool_call": Transcript._call,
    "approval_request": Transcript._approval,
    "approval_answered": Transcript._approval_answered,
    "question_answered": Transcript._question_answered,
    "elicitation_request": Transcript._elicitation,
    "elicitation_answered": Transcript._elicitation_answered,
    "sampling_request": Transcript._sampling,
    "sampling_answered": Transcript._sampling_answered,
    "sampling_result": Transcript._sampling_result,
    "tool_result": Transcript._result,
    "usage": Transcript._usage_event,
    "turn_finished": Transcript._end,
    "turn_failed": Transcript._end,
    "rewind": Transcript._rewind,
}


def fold(events: Any, into: Transcript | None = None) -> Transcript:
    """Fold ``(seq, kind, data, turn, created)`` rows, in seq order."""
    transcript = into or Transcript()
    for seq, kind, data, turn, created in events:
        transcript.apply(seq=seq, kind=kind, data=data, turn=turn, created=created)
    return transcript


ROW = ("seq", "kind", "data", "turn", "created")


def session_transcript(*, session_id: Any) -> Transcript:
    """The whole chat as the page shows it: the fold of every stored event, text deltas
    included, so its ids (an answer's is the seq of its first delta) are a live fold's."""
    events = SessionEvent.objects.filter(session_id=session_id).order_by("seq")
    return fold(events.values_list(*ROW))


def transcript_seed(*, session_id: Any, upto: int) -> Transcript:
    """The fold a socket starts from before it delivers the events after ``upto``: from
    the first event of the last turn started by then (items of earlier turns never
    change; a message another chat sent in meanwhile does not hide the turn)."""
    events = SessionEvent.objects.filter(session_id=session_id, seq__lte=upto)
    turn = (
        events.filter(kind="turn_started").order_by("-seq").values_list("turn", flat=True).first()
    )
    transcript = Transcript(last_seq=upto)
    if turn is None:
        return transcript
    start = events.filter(turn=turn).order_by("seq").values_list("seq", flat=True).first()
    return fold(events.filter(seq__gte=start).order_by("seq").values_list(*ROW), transcript)


ITEM_TEMPLATE = "sessions_app/_transcript.html"


def item_html(item: Item, *, session_id: Any) -> str:
    """One item as the page renders it."""
    return render_to_string(f"{ITEM_TEMPLATE}#item", {"item": item, "session_id": session_id})


# The rendered items of ended turns, which never change (a rewind only removes items):
# a page load renders only what is new or still moving. Process-local and bounded.
_rendered: OrderedDict[tuple[str, str, int], str] = OrderedDict()
_rendered_lock = threading.Lock()
RENDERED_ITEMS = 10_000


def transcript_html(transcript: Transcript, *, session_id: Any) -> list[str]:
    """Every item's html, in page order; items of ended turns come from the cache."""
    stamp = _template_stamp()
    out = []
    for key, item in transcript.items.items():
        if item.turn == transcript.running or (isinstance(item, Message) and item.streaming):
            out.append(item_html(item, session_id=session_id))
            continue
        cache_key = (str(session_id), key, stamp)
        with _rendered_lock:
            html = _rendered.get(cache_key)
            if html is not None:
                _rendered.move_to_end(cache_key)
        if html is None:
            html = item_html(item, session_id=session_id)
            with _rendered_lock:
                _rendered[cache_key] = html
                while len(_rendered) > RENDERED_ITEMS:
                    _rendered.popitem(last=False)
        out.append(html)
    return out


def _template_stamp() -> int:
    # While developing, an edited template shows at the next page load.
    if not settings.DEBUG:
        return 0
    return max(
        (Path(folder) / ITEM_TEMPLATE).stat().st_mtime_ns
        for folder in settings.TEMPLATES[0]["DIRS"]
        if (Path(folder) / ITEM_TEMPLATE).exists()
    )


def last_user_message(*, session_id: Any) -> tuple[int, str] | None:
    """The seq and text of the chat's last message from the person, as the page shows
    it (after every rewind), or ``None``."""
    transcript = session_transcript(session_id=session_id)
    for key, item in reversed(transcript.items.items()):
        if isinstance(item, Message) and item.role == "user":
            return int(key[1:]), item.text
    return None
