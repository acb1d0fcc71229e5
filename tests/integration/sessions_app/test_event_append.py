"""Appending to the event log: a flush's events, its provider call and the session row's
changes land together or not at all, under contiguous seqs no two writers share, and
every value comes back exactly as it was given (on PostgreSQL all of it is one
statement, so nothing here may depend on a transaction of the caller's)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agent_app.turns.claim import Waiting, persist
from sessions_app.eventlog import event_frames_after, events_append, session_history
from sessions_app.models import ChatSession, ProviderCall, SessionEvent
from sessions_app.services import session_create
from tests.conftest import ROOT, app_env, need
from toolhub.lib.event_frames import event_frames

pytestmark = pytest.mark.django_db

CALL = {
    "provider": "anthropic",
    "model": "claude-sonnet-4-6",
    "fingerprint": "f" * 64,
    "resident_tokens": 1200,
    "catalog_tokens": 40,
    "input_tokens": 1500,
    "output_tokens": 30,
    "cache_read_input_tokens": 900,
    "cache_creation_input_tokens": 0,
    "estimated_input_tokens": 1480,
    "latency_ms": 812,
}

# Text a hand-built statement gets wrong: quotes, casts, placeholders, backslashes, JSON
# that looks like SQL, characters outside the BMP, and a long string.
ODD = {
    "text": "it's \"quoted\" \\ back'slashed %s %(name)s $1 ::jsonb; DROP TABLE x; --",
    "emoji": "naïve café 🧪 \u2028 \u00a0",
    "nested": {"list": [1, 2.5, None, True, {"k": "'"}], "empty": {}},
    "long": "x" * 20_000,
}


def _claimed(owner, turn: str = "turn-1") -> ChatSession:
    session = session_create(user=owner)
    ChatSession.objects.filter(pk=session.pk).update(turn_id=turn, turn_channel="control")
    return session


def test_a_finished_flush_stores_events_call_and_release_together(owner):
    session = _claimed(owner)
    items = [
        ("assistant_message", {"text": "Done.", "html": "<p>Done.</p>"}),
        ("usage", {"input_tokens": 1500, "output_tokens": 30}),
        ("turn_finished", {"reason": "end_turn"}),
    ]

    with CaptureQueriesContext(connection) as captured:
        events = persist(
            session_id=session.pk,
            turn="turn-1",
            items=items,
            call=CALL,
            loaded=["web_fetch"],
            release=True,
        )

    if connection.vendor == "postgresql":
        assert len(captured) == 1, [query["sql"][:80] for query in captured]
    assert [event.seq for event in events] == [1, 2, 3]
    stored = list(
        SessionEvent.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "turn", "kind", "data")
    )
    assert stored == [(n + 1, "turn-1", kind, data) for n, (kind, data) in enumerate(items)]
    row = ChatSession.objects.values("last_seq", "turn_id", "turn_channel", "loaded_tools").get(
        pk=session.pk
    )
    assert row == {"last_seq": 3, "turn_id": "", "turn_channel": "", "loaded_tools": ["web_fetch"]}
    call = ProviderCall.objects.values(*CALL).get(session=session, turn="turn-1")
    assert call == CALL


def test_odd_bytes_in_events_and_calls_come_back_exactly(owner):
    session = _claimed(owner)
    call = {**CALL, "model": "model 'with' %s \\ quotes"}

    events = persist(
        session_id=session.pk,
        turn="turn-1",
        items=[("tool_result", ODD), ("text_delta", {"text": "%%"})],
        call=call,
        waiting=Waiting(kind="question", call_id="c'1"),
    )

    assert [event.data for event in events] == [ODD, {"text": "%%"}]
    stored = list(SessionEvent.objects.filter(session=session).order_by("seq"))
    assert [event.data for event in stored] == [ODD, {"text": "%%"}]
    assert ProviderCall.objects.get(session=session).model == "model 'with' %s \\ quotes"
    waiting = ChatSession.objects.values_list("turn_waiting", flat=True).get(pk=session.pk)
    assert waiting == {"kind": "question", "call_id": "c'1"}


def test_a_flush_with_only_a_session_change_stores_no_event(owner):
    session = _claimed(owner)

    events = persist(session_id=session.pk, turn="turn-1", items=[], loaded=["grep"])

    assert events == []
    row = ChatSession.objects.values("last_seq", "loaded_tools").get(pk=session.pk)
    assert row == {"last_seq": 0, "loaded_tools": ["grep"]}


def test_stored_events_extend_the_history_this_process_keeps_without_a_read(
    owner, django_capture_on_commit_callbacks
):
    session = session_create(user=owner)
    with django_capture_on_commit_callbacks(execute=True):
        events_append(session_id=session.pk, turn="t", items=[("user_message", {"text": "one"})])
        assert session_history(session_id=session.pk, last_seq=1) == [
            ("user_message", {"text": "one"})
        ]
        events_append(
            session_id=session.pk,
            turn="t",
            items=[("assistant_message", {"text": "two"}), ("usage", {"input_tokens": 1})],
        )

    with CaptureQueriesContext(connection) as captured:
        history = session_history(session_id=session.pk, last_seq=3)

    assert history == [("user_message", {"text": "one"}), ("assistant_message", {"text": "two"})]
    assert len(captured) == 0


@pytest.mark.django_db(transaction=True)
def test_writers_on_many_threads_get_contiguous_seqs_and_never_share_one(owner):
    if connection.vendor != "postgresql":
        need("PostgreSQL", "concurrent writers need the real database (set DATABASE_URL)")
    session = session_create(user=owner)
    writers, rounds = 6, 15
    barrier = threading.Barrier(writers)
    failures: list[BaseException] = []

    def writer(number: int) -> None:
        try:
            barrier.wait()
            for round_ in range(rounds):
                size = 1 + (number + round_) % 3
                items = [("text_delta", {"text": f"{number}:{round_}:{n}"}) for n in range(size)]
                events_append(session_id=session.pk, turn=f"w{number}", items=items)
        except BaseException as exc:  # reported below, on the test's thread
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    rows = list(SessionEvent.objects.filter(session=session).values_list("seq", "data"))
    expected = sum(1 + (n + r) % 3 for n in range(writers) for r in range(rounds))
    assert sorted(seq for seq, _ in rows) == list(range(1, expected + 1))
    # A batch is contiguous: its pieces sit next to each other, in the order given.
    by_text = {data["text"]: seq for seq, data in rows}
    for n in range(writers):
        for r in range(rounds):
            seqs = [by_text[f"{n}:{r}:{k}"] for k in range(1 + (n + r) % 3)]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert ChatSession.objects.get(pk=session.pk).last_seq == expected


def test_frames_read_after_a_seq_are_the_stored_events_in_order_up_to_the_limit(owner):
    session = session_create(user=owner)
    items = [("tool_result", ODD), ("text_delta", {"text": "%%"}), ("usage", {"input_tokens": 1})]
    events_append(session_id=session.pk, turn="turn-1", items=items * 3)
    stored = list(SessionEvent.objects.filter(session=session).order_by("seq"))

    frames = event_frames_after(session_id=session.pk, after=3, limit=4)

    assert frames == event_frames(stored[3:7])
    assert frames[0]["data"] == ODD
    assert frames[0]["created"] == stored[3].created.isoformat()
    assert frames[0]["created"].endswith("+00:00")
    assert event_frames_after(session_id=session.pk, after=9) == []
    other = session_create(user=owner)
    assert event_frames_after(session_id=other.pk, after=0) == []


# The same appends and reads on the embedded default (SQLite), whose path is one
# transaction of one statement per table instead of PostgreSQL's one statement.
_ON_SQLITE = """
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.db import connection
from django.contrib.auth import get_user_model
from agent_app.turns.claim import LostClaim, persist
from sessions_app.eventlog import event_frames_after, events_append
from sessions_app.models import ChatSession, ProviderCall, SessionEvent
from sessions_app.services import session_create
from toolhub.lib.event_frames import event_frames

assert connection.vendor == "sqlite", connection.vendor
odd = {"text": "it's \\"q\\" %s \\\\ \U0001f9ea", "n": [1, None, {"k": "'"}]}
session = session_create(user=get_user_model().objects.create_user(username="x"))
events_append(session_id=session.pk, turn="t", items=[("user_message", odd), ("usage", {})])
ChatSession.objects.filter(pk=session.pk).update(turn_id="t")
call = {"provider": "p", "model": "m", "fingerprint": "f"}
last = [("turn_finished", {})]
done = persist(session_id=session.pk, turn="t", items=last, call=call, release=True)
assert [event.seq for event in done] == [3]
try:
    persist(session_id=session.pk, turn="t", items=[("usage", {})], call=call, release=True)
    raise SystemExit("a flush after the release was stored")
except LostClaim:
    pass
frames = event_frames_after(session_id=session.pk, after=0)
stored = SessionEvent.objects.filter(session=session).order_by("seq")
assert frames == event_frames(stored), frames
assert frames[0]["data"] == odd and frames[0]["created"].endswith("+00:00"), frames[0]
row = ChatSession.objects.values_list("last_seq", "turn_id").get(pk=session.pk)
assert row == (3, "") and ProviderCall.objects.count() == 1, row
print("stored and read back")
"""


@pytest.mark.processes
def test_the_embedded_sqlite_database_appends_flushes_and_reads_back_the_same(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _ON_SQLITE],
        cwd=ROOT,
        env=app_env(tmp_path, DJANGO_SETTINGS_MODULE="toolhub.settings"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("stored and read back")
