"""Turn state on the session row: the claim, its lease, and every write of a flush.

One turn per session across processes: ``claim`` is a conditional UPDATE under a row
lock, and the lease a heartbeat renews lets a claim take over from a process that died
(closing that turn: its unanswered calls get ``lost`` results, then ``turn_failed``).
``persist`` stores a flush's events, the provider call, the loaded-set checkpoint and the
release in one transaction.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from sessions_app.models import ChatSession, ProviderCall, SessionEvent
from sessions_app.services import events_append

LEASE = timedelta(seconds=60)


class LostClaim(Exception):
    """The session is no longer this turn's: its lease ran out and another claim took it."""


def claim(*, session_id: Any, turn_id: str, channel: str, title: str) -> str | None:
    """Take the session for ``turn_id``; ``None`` if another live turn holds it.

    Returns the id of an abandoned turn (its process died, its lease ran out) that this
    claim took over, or "" when the session was free.
    """
    now = timezone.now()
    taken = {
        "turn_id": turn_id,
        "turn_channel": channel,
        "turn_lease": now + LEASE,
        "turn_waiting": None,
        "updated": now,
        "title": Case(When(title="", then=Value(title)), default=F("title")),
    }
    # The common case, a free session, is one statement.
    if ChatSession.objects.filter(pk=session_id, turn_id="").update(**taken):
        return ""
    with transaction.atomic():
        row = (
            ChatSession.objects.select_for_update()
            .filter(pk=session_id)
            .values("turn_id", "turn_lease", "title")
            .first()
        )
        if row is None:
            return None
        if row["turn_id"] and row["turn_lease"] and row["turn_lease"] >= now:
            return None
        ChatSession.objects.filter(pk=session_id).update(**taken)
    abandoned = row["turn_id"]
    if abandoned:
        _close_abandoned(session_id=session_id, turn_id=abandoned)
    return abandoned


def _close_abandoned(*, session_id: Any, turn_id: str) -> None:
    """Pair every call of a turn whose process died, then end it as failed."""
    events = list(
        SessionEvent.objects.filter(session_id=session_id, turn=turn_id).values_list("kind", "data")
    )
    if any(kind in ("turn_finished", "turn_failed") for kind, _ in events):
        return
    answered = {data.get("call_id") for kind, data in events if kind == "tool_result"}
    items = [
        (
            "tool_result",
            {
                "call_id": data["call_id"],
                "name": data["name"],
                "status": "lost",
                "content": "The server stopped while this tool ran; it did not finish.",
                "reason": "server restarted",
            },
        )
        for kind, data in events
        if kind == "tool_call" and data.get("call_id") not in answered
    ]
    items.append(
        ("turn_failed", {"code": "interrupted", "message": "the server stopped during this turn"})
    )
    events_append(session_id=session_id, turn=turn_id, items=items)


def release(*, session_id: Any, turn_id: str) -> None:
    ChatSession.objects.filter(pk=session_id, turn_id=turn_id).update(
        turn_id="", turn_channel="", turn_lease=None, turn_waiting=None
    )


def renew(*, session_id: Any, turn_id: str) -> None:
    ChatSession.objects.filter(pk=session_id, turn_id=turn_id).update(
        turn_lease=timezone.now() + LEASE
    )


def running_turn(*, session_id: Any) -> dict[str, Any] | None:
    row = (
        ChatSession.objects.filter(pk=session_id)
        .values("turn_id", "turn_channel", "turn_lease", "turn_waiting")
        .first()
    )
    if not row or not row["turn_id"] or not row["turn_lease"] or row["turn_lease"] < timezone.now():
        return None
    return row


def persist(
    *,
    session_id: Any,
    turn: str,
    items: list[tuple[str, dict[str, Any]]],
    call: dict[str, Any] | None = None,
    loaded: list[str] | None = None,
    waiting: Any = ...,
    release: bool = False,
) -> list[SessionEvent]:
    """Every write of one flush in one transaction: events, the provider call record, the
    loaded-set checkpoint, what the turn waits for, and at the end the release of the
    session, together with the terminal event (a client that sees ``turn_finished`` can
    start the next turn at once)."""
    with transaction.atomic():
        events = events_append(session_id=session_id, turn=turn, items=items, holder=turn)
        if items and not events:
            raise LostClaim(turn)
        if call is not None:
            ProviderCall.objects.create(session_id=session_id, turn=turn, **call)
        changes: dict[str, Any] = {}
        if loaded is not None:
            changes["loaded_tools"] = loaded
        if waiting is not ...:
            changes["turn_waiting"] = waiting
        if release:
            changes.update(turn_id="", turn_channel="", turn_lease=None, turn_waiting=None)
        if changes:
            ChatSession.objects.filter(pk=session_id, turn_id=turn).update(**changes)
    return events
