"""A chat taken out of toolhub: as Markdown to read, and as JSON that holds everything.

The JSON is the chat's event log as stored, in order, with what the chat was set to (its
title, tool intent as intent, plan mode, model pick and agent's name). The log is append
only, so an edited message's earlier version and a regenerated answer's earlier one are
in it, with the ``rewind`` events that say where the conversation went back to.

The Markdown is the conversation as the page shows it now: each message with its time,
each tool call with its arguments and its result (cut as the card cuts it), in fences
longer than any run of backticks inside, so a result holding a fence cannot break out.
A chat exported while a turn runs is exported as it stands, and says so.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from django.http import Http404, HttpResponse

from sessions_app.models import ChatSession, SessionEvent
from sessions_app.transcript import session_transcript
from sessions_app.transcript_items import Card, Message
from toolhub.lib.downloads import attachment

EXPORT_FORMAT = "toolhub.chat"
EXPORT_VERSION = 1


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
        elif isinstance(item, Card):
            parts += _card(item)
    return "\n".join(parts).rstrip() + "\n"


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
