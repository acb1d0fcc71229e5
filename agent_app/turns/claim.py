"""Turn state on the session row: the claim, its lease, and every write of a flush.

One turn per session across processes: ``claim`` is a conditional UPDATE under a row
lock, and the claim is a lease its owner's heartbeat renews. A turn whose lease ran out
(its process died or stalled) is closed, by the next claim or by any server's reaper
(``turns_reap``): its unanswered calls get ``lost`` results, then ``turn_failed`` with
code ``lost``, and the session is free. The lease, the heartbeat and the reaper's round
are fractions of ``TOOLHUB_TURN_LOST_AFTER`` chosen so that a dead owner's turn ends
within that bound (docs/faults.md). ``persist`` stores a flush's events, the provider
call, the loaded-set checkpoint and the release at once (one statement on PostgreSQL).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import EllipsisType
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agent_app.turns.runs import runs_cancel_for_turn
from profiles_app.models import Agent, DisablesGeneration
from profiles_app.services import agent_current
from sessions_app.eventlog import events_append
from sessions_app.models import ChatSession, ProviderCall, SessionEvent
from toolhub.lib.rows import row_model, this_connection
from toolhub.lib.storable import storable

# Shares of TOOLHUB_TURN_LOST_AFTER. A lease renewed just before its owner died runs out
# after LEASE_SHARE of the bound, and a reaper round comes within REAP_SHARE more: the
# turn ends by 0.8 of the bound, the rest is slack for the reaper's own queries. The
# heartbeat renews three times per lease, so two missed beats (a busy loop) lose nothing.
logger = logging.getLogger(__name__)

LEASE_SHARE = 0.6
REAP_SHARE = 0.2


def lease() -> timedelta:
    return timedelta(seconds=settings.TOOLHUB_TURN_LOST_AFTER * LEASE_SHARE)


def heartbeat_seconds() -> float:
    return settings.TOOLHUB_TURN_LOST_AFTER * LEASE_SHARE / 3


def reap_seconds() -> float:
    return settings.TOOLHUB_TURN_LOST_AFTER * REAP_SHARE


def _parsed(text: str) -> datetime:
    parsed = parse_datetime(text)
    if parsed is None:
        raise ValueError(f"not a datetime: {text!r}")
    return parsed


class LostClaim(Exception):
    """The session is no longer this turn's: its lease ran out and another claim took it."""


def claim(
    *, session_id: UUID, turn_id: str, channel: str, title: str, reserve: int = 0
) -> ChatSession | None:
    """Take the session for ``turn_id`` and reserve the next ``reserve`` seqs; ``None`` if
    another live turn holds it.

    Returns the session as claimed, its agent loaded, its ``last_seq`` the last reserved
    number. An abandoned turn (its process died, its lease ran out) is closed first.
    """
    now = timezone.now()
    # The common case, a free session, is one statement.
    session = _claim_row(session_id, turn_id, channel, title, reserve, now, free_only=True)
    if session is None:
        with transaction.atomic(savepoint=False):
            row = (
                ChatSession.objects.select_for_update()
                .filter(pk=session_id)
                .values("turn_id", "turn_lease")
                .first()
            )
            if row is None:
                return None
            if row["turn_id"] and row["turn_lease"] and row["turn_lease"] >= now:
                return None
            if row["turn_id"]:
                _close_abandoned(session_id=session_id, turn_id=row["turn_id"])
            session = _claim_row(session_id, turn_id, channel, title, reserve, now, free_only=False)
    if session is not None:
        # Read by _claim_row's statement beside the row (not model fields).
        updated = getattr(session, "agent_updated")  # noqa: B009
        if isinstance(updated, str):
            # SQLite hands an expression's datetime back as its stored text (UTC).
            updated = timezone.make_aware(_parsed(updated), UTC)
        session.agent = agent_current(
            agent_id=session.agent_id,
            version=getattr(session, "agent_version"),  # noqa: B009
            updated=updated,
        )
    return session


def _claim_row(
    session_id: UUID,
    turn_id: str,
    channel: str,
    title: str,
    reserve: int,
    now: Any,
    *,
    free_only: bool,
) -> ChatSession | None:
    """One UPDATE … RETURNING: the claim, the seq reservation, the title of a new session,
    the whole row back, the stamp of its agent (so a cached agent is checked for free),
    and the disables' generation token (so the turn's resolution checks this process's
    copy of the disables without a statement of its own: ``disables_token``)."""
    db = this_connection()
    sql = _claim_statement(db.vendor, free_only)
    meta = ChatSession._meta
    until = meta.get_field("turn_lease").get_db_prep_save(now + lease(), db)
    stamp = meta.get_field("updated").get_db_prep_save(now, db)
    params = [
        turn_id,
        channel,
        until,
        stamp,
        title,
        reserve,
        meta.pk.get_db_prep_value(session_id, db),
    ]
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    # The row as the ORM would give it, built without the raw queryset's per-call column
    # mapping; the three values after it as read.
    shape = row_model(ChatSession)
    session: ChatSession = shape.make(row)
    for name, value in zip(_CLAIM_EXTRAS, row[len(shape.attnames) :], strict=True):
        setattr(session, name, value)
    return session


# Read by the claim's statement beside the row (not model fields): ``claim`` and the turn's
# resolution (``disables_token``) read them.
_CLAIM_EXTRAS = ("agent_version", "agent_updated", "disables_token")


@functools.cache
def _claim_statement(vendor: str, free_only: bool) -> str:
    """The claim's UPDATE, written once per database and shape."""
    del vendor  # part of the cache's key: the quoting is the database's
    meta = ChatSession._meta
    quote = connection.ops.quote_name
    agents = quote(Agent._meta.db_table)
    generation = quote(DisablesGeneration._meta.db_table)
    where = " AND turn_id = ''" if free_only else ""
    returned = row_model(ChatSession).columns()
    # Only the models' own table and column names are interpolated; values are parameters.
    return (
        f"UPDATE {quote(meta.db_table)} SET turn_id = %s, turn_channel = %s, "  # noqa: S608
        "turn_lease = %s, turn_waiting = NULL, updated = %s, "
        "title = CASE WHEN title = '' THEN %s ELSE title END, last_seq = last_seq + %s "
        f"WHERE id = %s AND deleted IS NULL{where} RETURNING {returned}, "
        f"(SELECT version FROM {agents} WHERE {agents}.id = agent_id) AS agent_version, "
        f"(SELECT updated FROM {agents} WHERE {agents}.id = agent_id) AS agent_updated, "
        f"(SELECT token FROM {generation} WHERE {generation}.id = 1) AS disables_token"
    )


def _close_abandoned(*, session_id: UUID, turn_id: str) -> list[SessionEvent]:
    """Pair every call of a turn whose process died, then end it as ``lost``; returns the
    events written (none when the turn had already ended)."""
    events = list(
        SessionEvent.objects.filter(session_id=session_id, turn=turn_id).values_list("kind", "data")
    )
    if any(kind in ("turn_finished", "turn_failed") for kind, _ in events):
        return []
    answered = {data.get("call_id") for kind, data in events if kind == "tool_result"}
    items = [
        (
            "tool_result",
            {
                "call_id": data["call_id"],
                "name": data["name"],
                "status": "lost",
                "content": "The server running this turn stopped while this tool ran; "
                "it did not finish.",
                "reason": "lost",
            },
        )
        for kind, data in events
        if kind == "tool_call" and data.get("call_id") not in answered
    ]
    items.append(
        (
            "turn_failed",
            {"code": "lost", "message": "the server running this turn stopped; it was ended"},
        )
    )
    written = events_append(session_id=session_id, turn=turn_id, items=items)
    # Its worker runs were reported lost above: they must not go on doing things.
    runs_cancel_for_turn(session_id=session_id, turn=turn_id)
    return written or []


def turns_reap(*, keep: frozenset[str] = frozenset()) -> list[tuple[Any, list[SessionEvent]]]:
    """End every turn whose lease ran out, except those in ``keep`` (the caller's own live
    turns: a process never takes its own turn for dead). Returns each freed session with
    the events that ended its turn, for the caller to send to the session's group. A row
    that cannot be closed is logged and skipped: it never holds up the others."""
    now = timezone.now()
    # The partial index on turn_lease covers exactly the claimed rows.
    stale = list(
        ChatSession.objects.exclude(turn_id="")
        .filter(Q(turn_lease__lt=now) | Q(turn_lease__isnull=True))
        .exclude(turn_id__in=keep)
        .values_list("pk", flat=True)[:100]
    )
    freed = []
    for session_id in stale:
        try:
            events = _reap_one(session_id)
        except (InterfaceError, OperationalError):
            raise
        except Exception:
            logger.exception("session %s: its abandoned turn could not be closed", session_id)
            continue
        if events is not None:
            freed.append((session_id, events))
    return freed


def _reap_one(session_id: UUID) -> list[SessionEvent] | None:
    with transaction.atomic():
        row = (
            ChatSession.objects.select_for_update()
            .filter(pk=session_id)
            .values("turn_id", "turn_lease")
            .first()
        )
        # Claimed again, renewed or released since the scan: not this round's.
        if row is None or not row["turn_id"]:
            return None
        if row["turn_lease"] is not None and row["turn_lease"] >= timezone.now():
            return None
        events = _close_abandoned(session_id=session_id, turn_id=row["turn_id"])
        release(session_id=session_id, turn_id=row["turn_id"])
    return events


def release(*, session_id: UUID, turn_id: str) -> None:
    ChatSession.objects.filter(pk=session_id, turn_id=turn_id).update(
        turn_id="", turn_channel="", turn_lease=None, turn_waiting=None
    )


def renew(*, session_id: UUID, turn_id: str) -> bool:
    """Extend the turn's lease; False when the session is no longer this turn's."""
    return bool(
        ChatSession.objects.filter(pk=session_id, turn_id=turn_id).update(
            turn_lease=timezone.now() + lease()
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """What a running turn waits for from a person, as stored on the session row
    (``turn_waiting``) for whoever answers, in any process, to check against."""

    # "approval", "question", "elicitation" (an MCP server's form) or "sampling".
    kind: str
    call_id: str
    # An approval's tool, and whether "Allow for this chat" may lift its ask.
    name: str = ""
    chat_allowable: bool = False
    # An MCP server's form or sampling request: the server, and the form as it was sent
    # (``mode``, ``fields``: JSON the server wrote, read back by ``fields_from_json``).
    server: str = ""
    mode: str = ""
    fields: Any = None

    def to_json(self) -> dict[str, Any]:
        """As stored: only what this kind of wait carries (storable, since a server's
        form may hold text no database takes)."""
        data: dict[str, Any] = {"kind": self.kind, "call_id": self.call_id}
        if self.kind == "approval":
            data.update(name=self.name, chat_allowable=self.chat_allowable)
        if self.server:
            data["server"] = self.server
        if self.kind == "elicitation":
            data.update(mode=self.mode, fields=self.fields)
        stored: dict[str, Any] = storable(data)
        return stored

    @classmethod
    def from_json(cls, data: Any) -> Waiting | None:
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            return None
        return cls(
            kind=data["kind"],
            call_id=str(data.get("call_id") or ""),
            name=str(data.get("name") or ""),
            chat_allowable=data.get("chat_allowable") is True,
            server=str(data.get("server") or ""),
            mode=str(data.get("mode") or ""),
            fields=data.get("fields"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningTurn:
    """The turn holding a session now (its lease not run out), and where its control
    messages go."""

    turn_id: str
    channel: str
    waiting: Waiting | None

    def waits_for(self, kind: str, call_id: str) -> bool:
        """Whether this turn waits for the person's answer of ``kind`` to ``call_id``: the
        one check every answer passes (a late tab, a retried request, an answer meant for
        another kind of wait changes nothing)."""
        return (
            self.waiting is not None
            and self.waiting.kind == kind
            and self.waiting.call_id == call_id
        )


def running_turn(*, session_id: UUID) -> RunningTurn | None:
    row = (
        ChatSession.objects.filter(pk=session_id)
        .values("turn_id", "turn_channel", "turn_lease", "turn_waiting")
        .first()
    )
    if not row or not row["turn_id"] or not row["turn_lease"] or row["turn_lease"] < timezone.now():
        return None
    return RunningTurn(
        turn_id=row["turn_id"],
        channel=row["turn_channel"],
        waiting=Waiting.from_json(row["turn_waiting"]),
    )


def persist(
    *,
    session_id: UUID,
    turn: str,
    items: list[tuple[str, dict[str, Any]]],
    call: dict[str, Any] | None = None,
    loaded: list[str] | None = None,
    waiting: Waiting | EllipsisType | None = ...,
    release: bool = False,
) -> list[SessionEvent]:
    """Every write of one flush at once: events, the provider call record, the loaded-set
    checkpoint, what the turn waits for, and at the end the release of the session,
    together with the terminal event (a client that sees ``turn_finished`` can start the
    next turn at once). One statement on PostgreSQL (``events_append``). Raises
    ``LostClaim`` if the turn no longer holds the session (nothing is written then)."""
    changes: dict[str, Any] = {}
    if loaded is not None:
        changes["loaded_tools"] = loaded
    if not isinstance(waiting, EllipsisType):
        changes["turn_waiting"] = None if waiting is None else waiting.to_json()
    if release:
        changes.update(turn_id="", turn_channel="", turn_lease=None, turn_waiting=None)
    if not items and not changes and call is None:
        return []
    # The session row's writes ride on the seq reservation's UPDATE.
    events = events_append(
        session_id=session_id,
        turn=turn,
        items=items,
        holder=turn,
        changes=changes,
        rows=[]
        if call is None
        else [ProviderCall(session_id=session_id, turn=turn, created=timezone.now(), **call)],
    )
    if events is None:
        raise LostClaim(turn)
    return events
