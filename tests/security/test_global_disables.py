"""A global disable holds from the moment it commits, under concurrency, on the real
PostgreSQL and Redis: readers hammering the disables and the inspector, staff toggling,
and a scripted model calling the tool while the disable lands mid-turn."""

from __future__ import annotations

import threading
import time

import pytest
from channels.db import database_sync_to_async
from django.db import connection

from tests.conftest import need
from tests.fakes import Reply
from tests.integration.chat import events, open_socket, send, until
from toolhub.tools import function

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

TOOL = "counter_tool"
ROUNDS = 60
# Turns mid-turn: each round is the same ordered sequence (the hold makes the disable
# commit after the tools froze and before the call is vetted), so more rounds only add
# interleavings of the hammer, whose stale-copy race the toggle test attacks ROUNDS * 3
# times. Reading the rows before the token (a copy kept stale for good) fails here in the
# first two rounds; each round costs about half a second under the hammer.
TURN_ROUNDS = 20
READERS = 12
# Readers yield between reads, and a quarter of them go through the inspector (a whole
# resolution each): the race needs them interleaved with the writes, not starving the
# event loop that runs the turns in this same process.
READ_PAUSE = 0.005


@pytest.fixture
def real_services(settings):
    if connection.vendor != "postgresql":
        need("PostgreSQL", "the race needs the real database (set DATABASE_URL)")
    if not settings.REDIS_URL:
        need("Redis", "the race runs with the product's Redis cache (set REDIS_URL)")


@pytest.fixture
def ran(registry_state):
    """A tool in the live registry; the list records every real execution."""
    calls: list[str] = []

    def counter_tool(note: str = "") -> str:
        """Count a call.

        Args:
            note: Anything.
        """
        calls.append(note)
        return "counted"

    registry_state.register(function(counter_tool, register_globally=False))
    return calls


class Hammer:
    """Threads that read the disables and the toolset inspector as fast as they can, so
    any copy of the disables that could be refilled with an old list would be."""

    def __init__(self, api, user, session_id) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.reads = 0
        self._threads = [
            threading.Thread(target=self._read, args=(api, user, session_id, n % 4 == 0))
            for n in range(READERS)
        ]

    def __enter__(self) -> Hammer:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join()

    def _read(self, api, user, session_id, through_api: bool) -> None:
        from profiles_app.services import global_disables

        try:
            client = api(user)
            while not self.stop.is_set():
                if through_api:
                    assert client.get(f"/api/sessions/{session_id}/toolset/").status_code == 200
                else:
                    global_disables()
                self.reads += 1
                time.sleep(READ_PAUSE)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            connection.close()


def _session(user):
    from sessions_app.services import session_create

    return session_create(user=user)


def _toggle(staff, *, disabled: bool) -> None:
    from profiles_app.services import tool_disable_globally, tool_enable_globally

    if disabled:
        tool_disable_globally(user=staff, tool=TOOL, reason="race test")
    else:
        tool_enable_globally(user=staff, tool=TOOL)


def _seen_disabled() -> bool:
    from profiles_app.services import global_disables

    try:
        return TOOL in global_disables()
    finally:
        connection.close()


def _record(seen: list[bool]) -> None:
    seen.append(_seen_disabled())


def test_after_every_committed_toggle_every_reader_sees_the_database(
    real_services, api, owner, staff, ran
):
    session = _session(owner)
    stale: list[tuple[int, bool]] = []
    with Hammer(api, owner, session.pk) as hammer:
        for round_ in range(ROUNDS * 3):
            disabled = round_ % 2 == 0
            _toggle(staff, disabled=disabled)
            # Read on a fresh thread (its own connection), as another request would.
            seen: list[bool] = []
            checker = threading.Thread(target=_record, args=(seen,))
            checker.start()
            checker.join()
            if seen != [disabled]:
                stale.append((round_, disabled))

    assert hammer.errors == []
    assert hammer.reads > ROUNDS
    assert stale == []


async def test_a_disable_committed_mid_turn_is_vetoed_in_every_round_and_an_enable_runs_again(
    real_services, api, owner, staff, model, ran
):
    session = await database_sync_to_async(_session)(owner)
    socket = await open_socket(session.pk, owner)
    statuses: list[tuple[str, str]] = []
    # One turn first, so the provider's SDK is imported before twelve threads compete
    # with that import for the interpreter.
    model.replies.append(Reply(text="warm"))
    await send(socket, {"type": "chat", "text": "warm up"})
    await until(socket)
    with Hammer(api, owner, session.pk) as hammer:
        for round_ in range(TURN_ROUNDS):
            # The turn freezes its tools with the tool enabled; the disable commits while
            # the model is still answering, before the call is vetted.
            hold = threading.Event()
            model.replies.extend(
                [
                    Reply(text="calling", tool_calls=[(f"toolu_v{round_}", TOOL, {})], hold=hold),
                    Reply(text="ok"),
                ]
            )
            await send(socket, {"type": "chat", "text": f"round {round_}"})
            await until(socket, ("turn_started",))
            await database_sync_to_async(_toggle)(staff, disabled=True)
            hold.set()
            vetoed = events(await until(socket), "tool_result")[0]["data"]

            await database_sync_to_async(_toggle)(staff, disabled=False)
            model.replies.extend(
                [
                    Reply(tool_calls=[(f"toolu_r{round_}", TOOL, {"note": str(round_)})]),
                    Reply(text="done"),
                ]
            )
            await send(socket, {"type": "chat", "text": f"again {round_}"})
            again = events(await until(socket), "tool_result")[0]["data"]
            statuses.append((vetoed["status"], again["status"]))
    await socket.disconnect()

    assert hammer.errors == []
    assert statuses == [("vetoed", "ok")] * TURN_ROUNDS
    # Only the calls made while the tool was enabled ran, each once.
    assert ran == [str(round_) for round_ in range(TURN_ROUNDS)]
