"""A chat taken out of toolhub: as Markdown to read, and as JSON that holds everything;
and such a JSON brought back in as a new chat (``chat_import``).

The JSON is the chat's event log as stored, in order, with what the chat was set to (its
title, tool intent as intent, plan mode, model pick and agent's name). The log is append
only, so an edited message's earlier version and a regenerated answer's earlier one are
in it, with the ``rewind`` and ``branch`` events that say which branch is shown
(``sessions_app.branches``).

The Markdown is the conversation as the page shows it now, the branch shown (a message or
an answer with other versions says which version it is): each message with its time,
each tool call with its arguments and its result (cut as the card cuts it), in fences
longer than any run of backticks inside, so a result holding a fence cannot break out.
A chat exported while a turn runs is exported as it stands, and says so.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from django.db import transaction
from django.http import Http404, HttpResponse

from profiles_app.services import toolset_check_exists
from sessions_app.branches import Versions
from sessions_app.eventlog import events_append
from sessions_app.models import ChatSession, SessionEvent
from sessions_app.services import TITLE_CHARS, session_create
from sessions_app.transcript import EVENT_KINDS, session_transcript
from sessions_app.transcript_items import Card, Message, TurnEnd
from toolhub.lib.downloads import attachment
from toolhub.lib.errors import Invalid
from toolhub.lib.storable import json_loads_bounded, storable, storable_text
from toolhub.tools import IntentError, ToolIntent

EXPORT_FORMAT = "toolhub.chat"
EXPORT_VERSION = 1
# A turn id as the event log keeps it.
TURN_CHARS = 36


def chat_export_json(*, session: ChatSession) -> dict[str, Any]:
    """Everything of the chat, as JSON (module docstring)."""
    events = SessionEvent.objects.filter(session_id=session.pk).order_by("seq")
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "title": str(session),
        "created": session.created.isoformat(),
        "agent": session.agent.name,
        "intent": session.tool_intent,
        "plan_mode": session.plan_mode,
        "model": f"{session.provider}:{session.model}" if session.provider else "",
        "running": bool(session.turn_id),
        "events": [
            {
                "seq": event.seq,
                "turn": event.turn,
                "kind": event.kind,
                "data": event.data,
                "created": event.created.isoformat(),
            }
            for event in events.iterator()
        ],
    }


def chat_export_markdown(*, session: ChatSession) -> str:
    """The conversation as the page shows it, as Markdown (module docstring)."""
    transcript = session_transcript(session_id=session.pk)
    parts = [f"# {_line(str(session))}", ""]
    parts.append(f"Exported from toolhub. Agent: {_line(session.agent.name)}.")
    if transcript.running:
        parts.append("A turn was still running when this was exported: its end is not here.")
    parts.append("")
    for item in transcript.items.values():
        if isinstance(item, Message):
            who = "You" if item.role == "user" else "Assistant"
            parts += [f"**{who}**{_when(item.created)}", "", item.text.strip(), ""]
            parts += _versions(item.versions, "message")
        elif isinstance(item, Card):
            parts += _card(item)
        elif isinstance(item, TurnEnd):
            parts += _versions(item.versions, "answer")
    return "\n".join(parts).rstrip() + "\n"


def _versions(versions: Versions | None, what: str) -> list[str]:
    if versions is None:
        return []
    return [
        f"_Version {versions.number} of {versions.count} of this {what}; the others are in "
        "the JSON export._",
        "",
    ]


def _card(card: Card) -> list[str]:
    status = card.status + (f": {card.reason}" if card.reason else "")
    lines = [f"**Tool call** `{card.name}` ({_line(status)}){_when(card.created)}", ""]
    if card.arguments:
        lines += ["Arguments:", "", *_fenced(json.dumps(card.arguments, indent=2), "json"), ""]
    if card.question:
        lines += [f"Question: {_line(card.question)}", ""]
    if card.answer:
        lines += [f"Answer: {_line(card.answer)}", ""]
    if card.content:
        lines += ["Result:", "", *_fenced(card.content, ""), ""]
    return lines


def _fenced(text: str, language: str) -> list[str]:
    # Longer than the longest run of backticks inside: the text cannot close it.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", text, fence]


def _when(created: datetime | None) -> str:
    return f" · {created:%Y-%m-%d %H:%M} UTC" if created else ""


def _line(text: str) -> str:
    """One line of text (a title, a reason): no line break can start a heading of its own."""
    return " ".join(text.split())


def export_download(*, session: ChatSession, form: str) -> HttpResponse:
    """The chat as a file to download, named after its title: ``form`` is ``markdown``
    or ``json`` (anything else is a 404: the page and the API offer only these)."""
    stem = re.sub(r"[^\w-]+", "-", str(session)).strip("-")[:60] or "chat"
    if form == "markdown":
        text = chat_export_markdown(session=session)
        return attachment(data=text.encode(), name=f"{stem}.md", declared_type="text/markdown")
    if form == "json":
        data = json.dumps(chat_export_json(session=session), ensure_ascii=False, indent=1)
        return attachment(data=data.encode(), name=f"{stem}.json", declared_type="application/json")
    raise Http404("export as markdown or json")


# What a chat's import takes at most (README, "Settings": the request's own bound applies
# first: 1 MiB over the API, IMPORT_MAX_BYTES as a file on the chat page).
IMPORT_MAX_BYTES = 10 * 1024 * 1024
IMPORT_MAX_EVENTS = 20_000
IMPORT_KINDS = EVENT_KINDS | {"title"}
UNFINISHED = {
    "code": "imported",
    "message": "This turn was still running when the chat was exported.",
}


def chat_import(*, user: Any, document: Any) -> ChatSession:
    """A JSON export (``chat_export_json``) as a new chat of ``user``'s: its events in
    their order, renumbered from 1; its title and plan mode; its tool intent as intent,
    without a toolset ``user`` has no profile of. It goes with ``user``'s default agent and
    model (agents and providers are not portable). A turn the export caught running ends
    "imported". Anything else is refused, saying what, and nothing is stored."""
    events = _import_events(document)
    intent = document.get("intent")
    if intent is not None:
        # A malformed intent is refused; a good one naming a profile this person does not
        # have loses only that name.
        try:
            ToolIntent.parse(intent)
        except IntentError as exc:
            raise Invalid(f"intent: {exc}") from None
    if (
        isinstance(intent, dict)
        and intent.get("toolset") is not None
        and not _has_toolset(user, intent["toolset"])
    ):
        intent = {key: value for key, value in intent.items() if key != "toolset"}
    plan_mode = document.get("plan_mode")
    if plan_mode is not None and not isinstance(plan_mode, bool):
        raise Invalid("plan_mode is true or false")
    with transaction.atomic():
        session = session_create(
            user=user,
            title=str(document.get("title") or "")[:TITLE_CHARS],
            intent=intent,
            plan_mode=plan_mode,
        )
        for turn, items in _by_turn(events):
            events_append(session_id=session.pk, turn=turn, items=items)
    session.refresh_from_db()
    return session


def _import_events(document: Any) -> list[tuple[str, str, dict[str, Any]]]:
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise Invalid("not a toolhub chat export (its format is not toolhub.chat)")
    if document.get("version") != EXPORT_VERSION:
        raise Invalid(f"an export of version {EXPORT_VERSION} is needed")
    raw = document.get("events")
    if not isinstance(raw, list) or len(raw) > IMPORT_MAX_EVENTS:
        raise Invalid(f"events is a list of at most {IMPORT_MAX_EVENTS:,}")
    events, seqs, open_turns = [], set(), {}
    for index, event in enumerate(raw):
        if not isinstance(event, dict):
            raise Invalid(f"event {index + 1} is not an object")
        seq, turn, kind, data = (event.get(key) for key in ("seq", "turn", "kind", "data"))
        if not isinstance(seq, int) or isinstance(seq, bool) or seq in seqs:
            raise Invalid(f"event {index + 1}: seq is a number no other event has")
        if not isinstance(turn, str) or len(turn) > TURN_CHARS:
            raise Invalid(f"event {index + 1}: turn is text of at most {TURN_CHARS}")
        if not isinstance(kind, str) or kind not in IMPORT_KINDS or not isinstance(data, dict):
            raise Invalid(f"event {index + 1}: no event of kind {str(kind)[:40]!r} is known")
        seqs.add(seq)
        if kind == "turn_started":
            open_turns[turn] = True
        elif kind in ("turn_finished", "turn_failed"):
            open_turns.pop(turn, None)
        # NUL and lone surrogates are marked as every writer marks them (toolhub.lib.storable).
        events.append((seq, storable_text(turn), kind, storable(data)))
    events.sort(key=lambda event: event[0])
    ordered = [(turn, kind, data) for _, turn, kind, data in events]
    ordered += [(turn, "turn_failed", dict(UNFINISHED)) for turn in open_turns]
    return ordered


def _by_turn(
    events: list[tuple[str, str, dict[str, Any]]],
) -> list[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    groups: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = []
    for turn, kind, data in events:
        if not groups or groups[-1][0] != turn:
            groups.append((turn, []))
        groups[-1][1].append((kind, data))
    return groups


def _has_toolset(user: Any, name: Any) -> bool:
    try:
        toolset_check_exists(user=user, name=name if isinstance(name, str) else "")
    except Invalid:
        return False
    return True


def document_read(raw: bytes) -> Any:
    """An uploaded export's JSON, bounded in size and depth; ``Invalid`` otherwise."""
    if len(raw) > IMPORT_MAX_BYTES:
        raise Invalid(f"an export is at most {IMPORT_MAX_BYTES // 1024 // 1024} MiB")
    try:
        return json_loads_bounded(raw)
    except ValueError:
        raise Invalid("the file is not JSON") from None
