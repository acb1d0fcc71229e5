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
- A ``rewind`` removes every item after its seq; pages drop them by id. A page shows the
  branch the log's tip is on (``session_transcript``); a ``branch`` event (the person
  switched versions) changes nothing in a live fold: pages draw the chat anew.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.template.loader import render_to_string

from sessions_app.branches import shown_events
from sessions_app.models import SessionEvent
from sessions_app.transcript_items import (
    QUESTION_TOOL,
    Attached,
    Card,
    Data,
    Item,
    Message,
    TurnEnd,
    json_int,
    stored_files,
    stored_price,
)
from toolhub.lib.prices import Price
from toolhub.tools.images import stored_images

When = datetime | None


@dataclass
class Transcript:
    """The fold. ``items`` keeps the page order (insertion order); the items are
    ``sessions_app.transcript_items``'s."""

    items: dict[str, Item] = field(default_factory=dict)
    # The turn that has started and not ended, if any.
    running: str = ""
    demo: bool = False
    last_seq: int = 0
    _streaming: str = ""
    _cards: dict[str, Card] = field(default_factory=dict)
    _usage: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _models: dict[str, tuple[str, int, str, str, str, Price | None]] = field(default_factory=dict)

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
        files = Attached.listed(data.get("files"))
        item = Message(f"m{seq}", "user", str(data.get("text", "")), created, turn, files=files)
        self.items[item.id] = item
        self._streaming = ""
        return [item.id]

    def _started(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        self.running = turn
        self.demo = bool(data.get("demo"))
        self._usage[turn] = []
        self._models[turn] = (
            str(data.get("model", "")),
            json_int(data.get("context_window")),
            str(data.get("context_source", ""))[:16],
            str(data.get("agent", ""))[:200],
            str(data.get("profile", ""))[:100],
            stored_price(data.get("price")),
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
        card.files = stored_files(data.get("files")) if card.status == "ok" else ()
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
        (
            item.model,
            item.context_window,
            item.context_source,
            item.agent,
            item.profile,
            item.price,
        ) = self._models.pop(turn, ("", 0, "", "", "", None))
        calls = self._usage.pop(turn, [])
        for call in calls:
            item.input_tokens += json_int(call.get("input_tokens"))
            item.output_tokens += json_int(call.get("output_tokens"))
            item.cache_read += json_int(call.get("cache_read_input_tokens"))
            item.cache_write += json_int(call.get("cache_creation_input_tokens"))
        if calls:
            last = calls[-1]
            item.context_tokens = (
                json_int(last.get("input_tokens"))
                + json_int(last.get("cache_read_input_tokens"))
                + json_int(last.get("cache_creation_input_tokens"))
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

    def _branch(self, seq: int, data: Data, turn: str, created: When) -> list[str]:
        """The person switched versions: pages draw the chat anew (``session_transcript``
        reads the path); a live fold has nothing to change."""
        return []


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
    "branch": Transcript._branch,
}


def fold(events: Any, into: Transcript | None = None) -> Transcript:
    """Fold ``(seq, kind, data, turn, created)`` rows, in seq order."""
    transcript = into or Transcript()
    for seq, kind, data, turn, created in events:
        transcript.apply(seq=seq, kind=kind, data=data, turn=turn, created=created)
    return transcript


ROW = ("seq", "kind", "data", "turn", "created")


def session_transcript(*, session_id: Any) -> Transcript:
    """The whole chat as the page shows it: the fold of the events of the shown branch
    (``sessions_app.branches``), text deltas included, so its ids (an answer's is the seq
    of its first delta) are a live fold's; each message and turn end with other versions
    says which they are."""
    events = SessionEvent.objects.filter(session_id=session_id).order_by("seq")
    shown = shown_events(events.values_list(*ROW))
    transcript = fold(shown.events)
    transcript.last_seq = max(transcript.last_seq, shown.last_seq)
    versions = shown.tree.versions()
    for item in transcript.items.values():
        if isinstance(item, TurnEnd):
            item.versions = versions.get(shown.heads.get(item.turn, -1))
        elif isinstance(item, Message) and item.role == "user":
            item.versions = versions.get(int(item.id[1:]))
    return transcript


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


# The rendered items of ended turns, which never change but for their versions (keyed):
# a page load renders only what is new or still moving. Process-local and bounded.
_rendered: OrderedDict[tuple[str, str, int, tuple[int, ...]], str] = OrderedDict()
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
        cache_key = (str(session_id), key, stamp, _versions_key(item))
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


def _versions_key(item: Item) -> tuple[int, ...]:
    # Another version of a message or an answer changes its switcher ("2/3").
    versions = None if isinstance(item, Card) else item.versions
    return () if versions is None else (versions.shown, *versions.seqs)


def _template_stamp() -> int:
    # While developing, an edited template shows at the next page load.
    if not settings.DEBUG:
        return 0
    folders = settings.TEMPLATES[0]["DIRS"]
    return max(
        (Path(folder) / ITEM_TEMPLATE).stat().st_mtime_ns
        for folder in (folders if isinstance(folders, list) else [])
        if (Path(folder) / ITEM_TEMPLATE).exists()
    )


# Every kind of event the fold reads (an import takes only these, and ``title``).
EVENT_KINDS = frozenset(_HANDLERS)
