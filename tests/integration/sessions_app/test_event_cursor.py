"""A socket's position in the event log (``EventCursor``), without a socket: whatever the
live stream drops, repeats or reorders, and however replays and live frames interleave,
the browser gets every stored event after its resume, in order, exactly once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_app.delivery import TITLE_WATCH_SECONDS, EventCursor


def _frame(seq: int, kind: str = "text_delta") -> dict:
    return {"type": "event", "seq": seq, "turn": "t", "kind": kind, "data": {}}


class _Log:
    """A stored log that pages like the database and yields at every read, so live
    frames get to interleave with a replay."""

    def __init__(self, frames: list[dict], page: int) -> None:
        self.frames = frames
        self.page = page
        self.reads = 0

    async def read_after(self, seq: int, limit: int) -> list[dict]:
        self.reads += 1
        await asyncio.sleep(0)
        return [frame for frame in self.frames if frame["seq"] > seq][:limit]


def _cursor(log: _Log, sent: list[int], **kwargs) -> EventCursor:
    async def send(frame: dict) -> None:
        await asyncio.sleep(0)
        sent.append(frame["seq"])

    return EventCursor(read_after=log.read_after, send=send, page=log.page, **kwargs)


async def test_resume_replays_everything_after_the_seq_in_order_across_pages() -> None:
    log, sent = _Log([_frame(seq) for seq in range(1, 12)], page=3), []
    cursor = _cursor(log, sent)
    await cursor.resume(after_seq=4, last_seq=11)
    assert sent == list(range(5, 12))
    assert log.reads == 3


async def test_nothing_is_sent_before_resume_and_a_chat_subscribes_from_now() -> None:
    log, sent = _Log([_frame(seq) for seq in range(1, 4)], page=10), []
    cursor = _cursor(log, sent)
    await cursor.live([_frame(3)])
    assert sent == []
    cursor.start_at(3)
    log.frames.append(_frame(4))
    await cursor.live([_frame(4)])
    assert sent == [4]


async def test_a_resume_past_the_end_replays_nothing_and_hides_nothing_to_come() -> None:
    log, sent = _Log([_frame(1), _frame(2)], page=10), []
    cursor = _cursor(log, sent)
    await cursor.resume(after_seq=99, last_seq=2)
    assert sent == []
    log.frames.append(_frame(3))
    await cursor.live([_frame(3)])
    assert sent == [3]


async def test_a_live_frame_that_skips_ahead_brings_the_gap_from_the_log_first() -> None:
    log, sent = _Log([_frame(seq) for seq in range(1, 7)], page=10), []
    cursor = _cursor(log, sent)
    await cursor.resume(after_seq=0, last_seq=2)
    assert sent == [1, 2, 3, 4, 5, 6]
    log.frames += [_frame(7), _frame(8), _frame(9)]
    await cursor.live([_frame(9)])
    await cursor.live([_frame(8), _frame(9)])
    assert sent == list(range(1, 10))


async def test_a_quiet_open_turn_reads_the_log_and_a_closed_one_does_not() -> None:
    now = [0.0]
    log, sent = _Log([_frame(1, "turn_started")], page=10), []
    cursor = _cursor(log, sent, quiet_seconds=2.0, clock=lambda: now[0])
    await cursor.resume(after_seq=0, last_seq=1)
    assert cursor.turn_open
    log.frames += [_frame(2), _frame(3, "turn_finished")]
    now[0] = 1.0
    await cursor.catch_up()
    assert sent == [1], "not quiet long enough"
    now[0] = 3.5
    await cursor.catch_up()
    assert sent == [1, 2, 3]
    assert not cursor.turn_open
    log.frames.append(_frame(4))
    now[0] = 10.0
    await cursor.catch_up()
    assert sent == [1, 2, 3], "no turn is open: the live stream is enough"
    cursor.close()


async def test_the_watch_recovers_a_turn_end_the_live_stream_dropped() -> None:
    log, sent = _Log([_frame(1, "turn_started")], page=10), []
    cursor = _cursor(log, sent, quiet_seconds=0.01)
    await cursor.resume(after_seq=0, last_seq=1)
    log.frames += [_frame(2), _frame(3, "turn_finished")]
    for _ in range(200):
        if sent[-1] == 3:
            break
        await asyncio.sleep(0.01)
    assert sent == [1, 2, 3]
    cursor.close()


def _ended(seq: int, *, ago: float = 0.0) -> dict:
    """A turn's end saying the chat's title follows, stored ``ago`` seconds back."""
    created = datetime.now(UTC) - timedelta(seconds=ago)
    return {
        **_frame(seq, "turn_finished"),
        "data": {"title_follows": True},
        "created": created.isoformat(),
    }


async def test_after_a_turn_end_announcing_a_title_a_quiet_stream_reads_the_log_for_it() -> None:
    now = [0.0]
    log, sent = _Log([_frame(1, "turn_started"), _frame(2), _ended(3)], page=10), []
    cursor = _cursor(log, sent, quiet_seconds=2.0, clock=lambda: now[0])
    await cursor.resume(after_seq=0, last_seq=3)
    assert not cursor.turn_open
    assert cursor.watching
    # The title is stored; its live message never comes.
    log.frames.append(_frame(4, "title"))
    now[0] = 2.5
    await cursor.catch_up()
    assert sent == [1, 2, 3, 4]
    assert not cursor.watching, "the title came: nothing more is awaited"
    log.frames.append(_frame(5, "rename"))
    now[0] = 10.0
    await cursor.catch_up()
    assert sent == [1, 2, 3, 4]
    cursor.close()


async def test_a_title_that_never_comes_is_awaited_only_for_its_watch() -> None:
    now = [0.0]
    log, sent = _Log([_frame(1, "turn_started"), _ended(2, ago=5.0)], page=10), []
    cursor = _cursor(log, sent, quiet_seconds=2.0, clock=lambda: now[0])
    await cursor.resume(after_seq=0, last_seq=2)
    # What is left of the watch counts from the turn's end as stored (5 s ago).
    now[0] = TITLE_WATCH_SECONDS - 5.5
    assert cursor.watching
    now[0] = TITLE_WATCH_SECONDS - 4.5
    assert not cursor.watching
    log.frames.append(_frame(3))
    await cursor.catch_up()
    assert sent == [1, 2]
    cursor.close()


async def test_a_resume_replaying_an_old_turn_end_awaits_no_title() -> None:
    log, sent = _Log([_frame(1, "turn_started"), _ended(2, ago=3600.0)], page=10), []
    cursor = _cursor(log, sent, quiet_seconds=0.01)
    await cursor.resume(after_seq=0, last_seq=2)
    assert sent == [1, 2]
    assert not cursor.watching
    cursor.close()


async def test_a_page_that_resumes_at_a_turns_end_still_gets_the_title_that_follows() -> None:
    log, sent = _Log([_frame(1, "turn_started"), _frame(2), _ended(3)], page=10), []
    cursor = _cursor(log, sent, quiet_seconds=0.01)
    await cursor.resume(after_seq=2, last_seq=3)
    log.frames.append(_frame(4, "title"))
    for _ in range(200):
        if sent[-1] == 4:
            break
        await asyncio.sleep(0.01)
    assert sent == [3, 4]
    cursor.close()


async def test_the_watch_recovers_a_title_the_live_stream_dropped() -> None:
    log, sent = _Log([_frame(1, "turn_started"), _frame(2)], page=10), []
    cursor = _cursor(log, sent, quiet_seconds=0.01)
    await cursor.resume(after_seq=0, last_seq=2)
    # The turn's end arrives live; the title after it only in the log.
    log.frames += [_ended(3), _frame(4, "title")]
    await cursor.live([log.frames[2]])
    for _ in range(200):
        if sent[-1] == 4:
            break
        await asyncio.sleep(0.01)
    assert sent == [1, 2, 3, 4]
    cursor.close()


@settings(max_examples=150, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=40),
    after=st.integers(min_value=0, max_value=45),
    page=st.integers(min_value=1, max_value=7),
    batches=st.lists(st.lists(st.integers(min_value=1, max_value=40), max_size=6), max_size=12),
)
def test_whatever_the_live_stream_does_every_event_arrives_once_in_order(
    total: int, after: int, page: int, batches: list[list[int]]
) -> None:
    async def scenario() -> list[int]:
        log, sent = _Log([_frame(seq) for seq in range(1, total + 1)], page=page), []
        cursor = _cursor(log, sent)
        # Live batches (dropped, repeated, out of order) race the replay.
        live = [
            cursor.live([_frame(seq) for seq in sorted(batch) if seq <= total]) for batch in batches
        ]
        await asyncio.gather(cursor.resume(after_seq=after, last_seq=total), *live)
        # The last live frame of the turn always arrives (or the catch-up reads it).
        await cursor.live([_frame(total)])
        return sent

    sent = asyncio.run(scenario())
    assert sent == list(range(min(after, total) + 1, total + 1))
