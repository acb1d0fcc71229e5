"""The turn runner's own cost per provider round trip, on PostgreSQL and Redis.

Runs chat turns in-process against the fake Anthropic server (tests/fakes) answering at
once with five text deltas, through the real anthropic SDK over loopback HTTP. Each turn is
timed end to end (claim, resolution and freeze, history rebuild from the event log, event
storage, group sends on the Redis channel layer, release); the time spent inside the
provider's stream (HTTP, SDK parsing, the fake server) is measured separately and taken
off, leaving what is ours. Sessions carry up to 20 earlier turns, so the history rebuild
is realistic. Prints p50 and p99 in milliseconds.

The fake runs in a process of its own, as a real model's API is elsewhere: in this
process its request threads took the GIL from the turn's database thread just as the reply
ended, and their finishing work was counted as ours. It answers as a real API server does,
with TCP_NODELAY: without it each reply stalled ~40 ms on the client's delayed ACK, and the
idle gap that left made the next database and Redis round trips several times slower than
warm ones. A real model's reply leaves such gaps too, so on an idle host a turn after a
slow reply costs more than this.

It also prints the floor of that figure on this machine: the I/O a turn cannot do without
(two write transactions, claim and first events, then last events and release, each as
BEGIN, UPDATE, INSERT, COMMIT in raw SQL, and one group send on the Redis channel layer),
timed alone with no Python of ours around it.

Each run starts on a fresh database. Database: BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/toolhub_bench);
Redis: BENCH_REDIS_URL (default redis://127.0.0.1:6379/3).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _django import django_setup, flush_redis, recreate_database  # noqa: E402

DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolhub_bench"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/3")
SESSIONS = 15
TURNS_PER_SESSION = 20
WARMUP_TURNS = 5


# The fake model's process: prints its URL, then serves until its stdin closes.
_FAKE_MODEL = """
import sys
from tests.fakes import FakeAnthropic, Reply

with FakeAnthropic(responder=lambda body: Reply(text="one two three four five")) as model:
    print(model.url, flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def _fake_model() -> Iterator[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", _FAKE_MODEL],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        yield child.stdout.readline().strip()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)


class _TimedProvider:
    """Wraps the real provider and adds up the time spent inside its stream."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.name = inner.name
        self.default_model = inner.default_model
        self.supports_native = inner.supports_native
        self.is_demo = inner.is_demo
        # What the request carries is the real provider's wire form.
        self.wire_tools = inner.wire_tools
        self.origin = inner.origin
        self.model_window = inner.model_window
        self.spent = 0.0

    async def stream(self, request):
        started = time.perf_counter()
        try:
            async for event in self._inner.stream(request):
                self.spent += time.perf_counter() - started
                yield event
                started = time.perf_counter()
        finally:
            self.spent += time.perf_counter() - started


async def _run(sessions, provider) -> list[float]:
    from agent_app import turns

    overheads = []
    for index in range(WARMUP_TURNS + SESSIONS * TURNS_PER_SESSION):
        session = sessions[index % len(sessions)]
        provider.spent = 0.0
        started = time.perf_counter()
        await turns.turn_start(session=session, text=f"message {index}")
        await turns.wait_for_turns()
        elapsed = time.perf_counter() - started
        if index >= WARMUP_TURNS:
            overheads.append((elapsed - provider.spent) * 1000)
    return overheads


async def _floor(session_id) -> list[float]:
    """The unavoidable I/O of a one-step turn, timed alone (see the module docstring)."""
    from asgiref.sync import sync_to_async
    from channels.layers import get_channel_layer
    from django.db import connection, transaction

    from sessions_app.models import ChatSession, SessionEvent

    sessions = connection.ops.quote_name(ChatSession._meta.db_table)
    events = connection.ops.quote_name(SessionEvent._meta.db_table)

    def write() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {sessions} SET last_seq = last_seq + 2 WHERE id = %s RETURNING last_seq",  # noqa: S608
                [session_id],
            )
            (last,) = cursor.fetchone()
            cursor.execute(
                f"INSERT INTO {events} (session_id, seq, turn, kind, data, created) "  # noqa: S608
                "VALUES (%s, %s, '', 'floor', '{}', now()), (%s, %s, '', 'floor', '{}', now())",
                [session_id, last - 1, session_id, last],
            )

    layer = get_channel_layer()
    floors = []
    for _ in range(WARMUP_TURNS + 200):
        started = time.perf_counter()
        await sync_to_async(write)()
        await sync_to_async(write)()
        await layer.group_send(f"session.{session_id}", {"type": "session.events", "frames": []})
        floors.append((time.perf_counter() - started) * 1000)
    return sorted(floors[WARMUP_TURNS:])


def main() -> None:
    logging.disable(logging.INFO)
    # A fresh database and Redis each run: the figure must not depend on the dead rows
    # and keys earlier runs left behind.
    recreate_database(DATABASE_URL)
    flush_redis(REDIS_URL)
    django_setup(DATABASE_URL, redis_url=REDIS_URL)
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from agent_app import providers
    from agent_app.providers.anthropic import AnthropicProvider
    from sessions_app.models import ChatSession
    from sessions_app.services import session_create

    user, _ = get_user_model().objects.get_or_create(username="bench-turns")
    ChatSession.objects.filter(owner=user).delete()
    sessions = [session_create(user=user) for _ in range(SESSIONS)]
    with _fake_model() as model_url:
        provider = _TimedProvider(AnthropicProvider(api_key="bench", base_url=model_url))
        providers.PROVIDERS["bench"] = lambda: provider
        settings.TOOLHUB_PROVIDER = "bench"
        # The garbage collector as the server tunes it once it serves (toolhub/serve.py).
        from toolhub.lib.collector import collect_less

        collect_less()
        overheads = asyncio.run(_run(sessions, provider))
    overheads.sort()
    p99 = overheads[int(len(overheads) * 0.99) - 1]
    print(
        f"turn-overhead per provider round trip (ours): n={len(overheads)} "
        f"p50={statistics.median(overheads):.2f}ms p99={p99:.2f}ms "
        f"max={overheads[-1]:.2f}ms (PostgreSQL, Redis channel layer)"
    )
    floors = asyncio.run(_floor(sessions[0].pk))
    print(
        f"turn-overhead floor (2 raw write transactions + 1 group send, nothing of ours): "
        f"n={len(floors)} p50={statistics.median(floors):.2f}ms"
    )
    ChatSession.objects.filter(owner=user).delete()


if __name__ == "__main__":
    main()
