"""A session's event log: the one module that appends to it and reads it (for the provider,
the API and the pages). Delivering it to browsers is agent_app.delivery's.

Invariants (docs/architecture.md, "The event log"):

- **Contiguous seqs.** A writer reserves ``len(items)`` numbers with one conditional UPDATE
  of ``ChatSession.last_seq`` inside the insert's transaction or, on PostgreSQL, its
  statement (row lock held to the commit), so concurrent writers in several processes
  never share or skip a number.
  ``events_insert`` writes under numbers a turn's claim reserved the same way.
- **Stored before sent.** Events are delivered only once committed
  (``agent_app.delivery.notify_events``), so a socket that replays from the log never
  misses what a live socket was sent.
- **Append-only.** Nothing updates or deletes an event; ``session_history`` reuses what
  this process read before and reads only what was added since.
- **Delivered in order, once.** ``EventCursor`` is one socket's position in the log: it
  replays after ``resume``, drops live events it already sent, fills a gap from the log,
  and while a turn is open reads the log when the live stream goes quiet.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from django.db import connection, models, transaction
from django.db.models import Field
from django.utils import timezone

from sessions_app.branches import MOVE_KINDS, ROW_KINDS, Tree, tree_read
from sessions_app.models import ChatSession, SessionEvent
from toolhub.lib.errors import Invalid, NotFound
from toolhub.lib.event_frames import Frame, event_frame
from toolhub.lib.rows import rows_insert, rows_read, rows_values, this_connection

# The kinds that end a turn.
TERMINAL = ("turn_finished", "turn_failed")
# What the history cache keeps: the rows of the conversation and the moves on its tree
# (sessions_app.branches).
HISTORY_KINDS = (*sorted(ROW_KINDS), *sorted(MOVE_KINDS))
# A stored row of history: seq, kind, data.
Row = tuple[int, str, dict[str, Any]]
# Sessions whose history this process keeps (the most recently used).
HISTORY_CACHE_SESSIONS = 256
EVENTS_PAGE = 500
EVENTS_PAGE_MAX = 1_000


def events_append(
    *,
    session_id: Any,
    turn: str,
    items: list[tuple[str, dict[str, Any]]],
    holder: str | None = None,
    changes: dict[str, Any] | None = None,
    rows: Sequence[models.Model] = (),
) -> list[SessionEvent] | None:
    """Store events with the session's next contiguous seqs, all or nothing.

    One conditional UPDATE reserves ``len(items)`` numbers and returns the last (row lock
    held to the commit), so concurrent writers get disjoint ranges. ``changes`` (session
    fields to values) are written by that same UPDATE, and ``rows`` (new rows of one other
    model, every field set) are inserted with the events. With ``holder``, only while
    that turn holds the session: otherwise nothing is stored or changed and the result is
    ``None``.

    On PostgreSQL all of it is one statement, the UPDATE and the INSERTs in one
    data-modifying ``WITH`` (one round trip, and no BEGIN or COMMIT of its own); elsewhere
    it is one transaction of one statement per table.
    """
    if not items and not changes and not rows:
        return []
    reserve = _reserve_statement(
        session_id=session_id, count=len(items), holder=holder, changes=changes or {}
    )
    events = _new_events(session_id=session_id, turn=turn, first_seq=0, items=items)
    if connection.vendor == "postgresql":
        last = _append_in_one_statement(
            update=reserve.sql, params=reserve.params, events=events, rows=rows
        )
        if last is not None:
            _number(events, last)
    else:
        last = _append_in_one_transaction(
            update=reserve.sql, params=reserve.params, events=events, rows=rows
        )
    if last is None:
        if holder is not None:
            return None
        raise NotFound("no such session")
    if items:
        first = last - len(items) + 1
        transaction.on_commit(lambda: _history_extend(session_id, first, items))
    return events


@dataclass(frozen=True, slots=True)
class _Reserve:
    """An UPDATE of the session that reserves seqs, ``RETURNING last_seq``."""

    sql: str
    params: list[Any]


def _reserve_statement(
    *, session_id: Any, count: int, holder: str | None, changes: dict[str, Any]
) -> _Reserve:
    """The UPDATE that reserves ``count`` seqs and writes ``changes``; with ``holder``, it
    matches only while that turn holds the session."""
    db = this_connection()
    update, fields = _reserve_sql(db.vendor, tuple(changes), holder is not None)
    params = [
        count,
        *(field.get_db_prep_save(changes[field.name], db) for field in fields),
        ChatSession._meta.pk.get_db_prep_value(session_id, db),
        *([holder] if holder is not None else []),
    ]
    return _Reserve(update, params)


@functools.lru_cache(maxsize=64)
def _reserve_sql(
    vendor: str, names: tuple[str, ...], held: bool
) -> tuple[str, tuple[Field[Any, Any], ...]]:
    """The reserving UPDATE's text for these changed fields, written once per shape (a
    turn's writes come in a handful of shapes), and the fields in parameter order."""
    del vendor  # part of the cache's key: the quoting is the database's
    fields = tuple(cast("Field[Any, Any]", ChatSession._meta.get_field(name)) for name in names)
    sets = "".join(f", {connection.ops.quote_name(str(field.column))} = %s" for field in fields)
    where = " AND turn_id = %s" if held else ""
    table = connection.ops.quote_name(ChatSession._meta.db_table)
    # Only the model's own table and column names are interpolated; values are parameters.
    update = (
        f"UPDATE {table} SET last_seq = last_seq + %s{sets} WHERE id = %s{where} "  # noqa: S608
        "RETURNING last_seq"
    )
    return update, fields


def _append_in_one_transaction(
    *,
    update: str,
    params: list[Any],
    events: list[SessionEvent],
    rows: Sequence[models.Model],
) -> int | None:
    """``update``, then, if it matched, the INSERTs of ``events`` (numbered under the seqs
    it reserved) and ``rows``, in one transaction: what a database without data-modifying
    ``WITH`` does. Returns the last reserved seq, or ``None`` (nothing written)."""
    # No savepoint: inside a caller's transaction a failure here fails it all anyway.
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(update, params)
        row = cursor.fetchone()
        last: int | None = None if row is None else row[0]
        if last is not None:
            _number(events, last)
            rows_insert(events)
            rows_insert(rows)
    return last


def _append_in_one_statement(
    *,
    update: str,
    params: list[Any],
    events: list[SessionEvent],
    rows: Sequence[models.Model],
) -> int | None:
    """``update`` (ending in ``RETURNING last_seq``) and the INSERTs of ``events`` (under
    the seqs it reserved) and ``rows`` in one statement, the INSERTs only if ``update``
    matched a row. Returns the last reserved seq, or ``None`` when ``update`` matched
    nothing (nothing is written then)."""
    steps = [f"reserved AS ({update})"]
    params = list(params)
    seqs = [f"reserved.last_seq - {len(events) - 1 - n}" for n in range(len(events))]
    for name, group, computed in (("events", events, {"seq": seqs}), ("rows", rows, None)):
        if not group:
            continue
        table, columns, values, values_params = rows_values(group, computed=computed)
        steps.append(
            f"{name} AS (INSERT INTO {table} ({columns}) "  # noqa: S608
            f"SELECT v.* FROM reserved, LATERAL ({values}) AS v)"
        )
        params += values_params
    with connection.cursor() as cursor:
        # Model metadata and the SQL above only; values are parameters.
        cursor.execute("WITH " + ", ".join(steps) + " SELECT last_seq FROM reserved", params)  # noqa: S608
        row = cursor.fetchone()
    return None if row is None else row[0]


def _new_events(
    *, session_id: Any, turn: str, first_seq: int, items: list[tuple[str, dict[str, Any]]]
) -> list[SessionEvent]:
    now = timezone.now()
    return [
        SessionEvent(
            session_id=session_id,
            seq=first_seq + offset,
            turn=turn,
            kind=kind,
            data=data,
            created=now,
        )
        for offset, (kind, data) in enumerate(items)
    ]


def _number(events: list[SessionEvent], last: int) -> None:
    for offset, event in enumerate(events):
        event.seq = last - len(events) + 1 + offset


def events_insert(
    *, session_id: Any, turn: str, first_seq: int, items: list[tuple[str, dict[str, Any]]]
) -> list[SessionEvent]:
    """Insert events under seqs the caller reserved (``last_seq`` already advanced in this
    transaction). The events come back without row ids, which nothing reads."""
    if not items:
        return []
    events = _new_events(session_id=session_id, turn=turn, first_seq=first_seq, items=items)
    rows_insert(events)
    transaction.on_commit(lambda: _history_extend(session_id, first_seq, items))
    return events


def event_append(*, session_id: Any, turn: str, kind: str, data: dict[str, Any]) -> SessionEvent:
    events = events_append(session_id=session_id, turn=turn, items=[(kind, data)])
    assert events, "without a holder the event is stored or NotFound is raised"
    return events[0]


_history: OrderedDict[str, tuple[int, list[Row]]] = OrderedDict()
_history_lock = threading.Lock()


def session_history(
    *, session_id: Any, last_seq: int | None = None, rewind_to: int | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The events a provider's conversation is rebuilt from, in order: the path the chat
    shows (``sessions_app.branches``: every ``rewind`` and ``branch`` applied;
    ``rewind_to`` applies one more rewind, for the turn about to store it).

    Given the session's ``last_seq`` as read in the caller's transaction, the history this
    process already holds is reused and only the log after it is read (nothing at all when
    nothing was added): the log is append-only, so what was read stays true. Events this
    process stores extend the cache once committed, never before.
    """
    rows = _history_rows(session_id, last_seq)
    tree = session_tree_of(rows, rewind_to)
    on_path = set(tree.path())
    return [(kind, data) for seq, kind, data in rows if seq in on_path]


def session_tree(*, session_id: Any, last_seq: int | None = None) -> Tree:
    """The chat's tree of history rows as of ``last_seq`` (read as ``session_history``
    reads, from this process's cache when it can)."""
    return session_tree_of(_history_rows(session_id, last_seq), None)


def user_message_kept(*, session_id: Any, seq: int, last_seq: int) -> bool:
    """Whether the person's message at ``seq`` is on the path the chat shows as of
    ``last_seq``: an edit or a regenerate goes back to just before or just after such a
    message, decided from the log as the history is."""
    tree = session_tree_of(_history_rows(session_id, last_seq), None)
    return tree.kinds.get(seq) == "user_message" and seq in tree.path()


def session_tree_of(rows: list[Row], rewind_to: int | None) -> Tree:
    """The tree of cached history ``rows``, with one more rewind to ``rewind_to``."""
    tree = tree_read(rows)
    tree.rewind(rewind_to)
    return tree


def _history_rows(session_id: Any, last_seq: int | None) -> list[Row]:
    key = str(session_id)
    with _history_lock:
        cached = _history.get(key)
        if cached is not None:
            _history.move_to_end(key)
    if last_seq is not None and cached is not None and cached[0] == last_seq:
        return cached[1]
    after, known = 0, cast("list[Row]", [])
    if last_seq is not None and cached is not None and cached[0] < last_seq:
        after, known = cached
    rows = SessionEvent.objects.filter(
        session_id=session_id, seq__gt=after, kind__in=HISTORY_KINDS
    ).order_by("seq")
    if last_seq is not None:
        rows = rows.filter(seq__lte=last_seq)
    history = [*known, *rows.values_list("seq", "kind", "data")]
    if last_seq is not None:
        # Kept once committed: a read inside a transaction may see its own inserts, which
        # a rollback would take back.
        transaction.on_commit(lambda: _history_keep(key, last_seq, history))
    return history


def _history_keep(key: str, last_seq: int, history: list[Row]) -> None:
    with _history_lock:
        _history[key] = (last_seq, history)
        _history.move_to_end(key)
        while len(_history) > HISTORY_CACHE_SESSIONS:
            _history.popitem(last=False)


def _history_extend(session_id: Any, first: int, items: list[tuple[str, dict[str, Any]]]) -> None:
    """Committed events join a cached history that ends just before them."""
    key = str(session_id)
    with _history_lock:
        cached = _history.get(key)
        if cached is None or cached[0] != first - 1:
            return
        added = [
            (first + offset, kind, data)
            for offset, (kind, data) in enumerate(items)
            if kind in HISTORY_KINDS
        ]
        _history[key] = (first + len(items) - 1, cached[1] + added if added else cached[1])


def session_events(
    *, session: ChatSession, after: int = 0, limit: int = EVENTS_PAGE
) -> tuple[list[SessionEvent], int]:
    if after < 0 or not 1 <= limit <= EVENTS_PAGE_MAX:
        raise Invalid(f"after must be >= 0 and limit within 1..{EVENTS_PAGE_MAX}")
    events = list(session.events.filter(seq__gt=after).order_by("seq")[:limit])
    # An event may land between reading the session and reading its events.
    last_seq = max(session.last_seq, events[-1].seq if events else 0)
    return events, last_seq


def event_frames_after(*, session_id: Any, after: int, limit: int = EVENTS_PAGE_MAX) -> list[Frame]:
    """Up to ``limit`` stored events after seq ``after``, as ``event`` frames, in order.

    Every socket's replay and catch-up reads here, most often finding nothing new, so the
    statement is written once per process and its rows become frames directly: the ORM
    built the query anew on each call, at three times the statement's cost.
    """
    sql, read = _frames_query()
    with connection.cursor() as cursor:
        session = _SESSION.get_db_prep_value(session_id, connection)
        cursor.execute(sql, [session, after, limit])
        return [event_frame(*read(row)) for row in cursor.fetchall()]


_SESSION = cast("Field[Any, Any]", SessionEvent._meta.get_field("session"))
_FRAME_FIELDS = ("seq", "turn", "kind", "data", "created")


@functools.cache
def _frames_query() -> tuple[str, Callable[[Any], tuple[Any, ...]]]:
    columns = ", ".join(_column(name) for name in _FRAME_FIELDS)
    session, seq = _column("session"), _column("seq")
    # Model metadata only; values are parameters.
    sql = (
        f"SELECT {columns} FROM {connection.ops.quote_name(SessionEvent._meta.db_table)} "  # noqa: S608
        f"WHERE {session} = %s AND {seq} > %s ORDER BY {seq} LIMIT %s"
    )
    return sql, rows_read(SessionEvent, _FRAME_FIELDS)


def _column(name: str) -> str:
    field = cast("Field[Any, Any]", SessionEvent._meta.get_field(name))
    return connection.ops.quote_name(str(field.column))
