"""Capacity at people's pace: how many chats a server count carries while each chat sends a
message every P seconds, before event delivery p99 passes 250 ms; beside the floor, the same
number of sockets receiving the same frames at the same pace through plain group sends (no
turn, no database).

The set-up is ``ws_load``'s (its database, Redis index, fake Anthropic API answering every
call with 50 words in 50 deltas, daphne servers as in production, a person per chat). For
each server count (BENCH_CAPACITY_SERVERS, default "1,2"), chats are added in steps
(CHATS_START, then half as many again each step, at most CHATS_MAX). Every chat keeps its
socket and sends its next message P seconds (BENCH_CAPACITY_PACE_S, default 20) after it
sent the last one, or as soon as the last turn ended if that took longer; each starts at a
random point of its first P seconds (a fixed seed), as people do. A step lasts
``WINDOW_PACES`` paces after its new chats began: its p99 is over the events received in
that window, each one's delivery being its receipt on the client minus
``SessionEvent.created`` (the floor's: minus the publisher's stamp). The steps stop at the
first step whose p99 is over ``P99_MS`` in two windows running; the capacity is the last
step under it (so it is known to within a factor of ``GROWTH``).

Prints a line per step (``ws_load capacity step …``, with the share of a core each server
used in its window, ``server_core``: near 1.0 a server's CPU sets the pace) and per server
count ``ws_load capacity servers=S pace_s=P chats=N floor_chats=F``. A run takes about
(steps * (WINDOW_PACES + 1) * P) per phase: with the defaults, 20 to 40 minutes in all.
Figures are printed, not asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ws_load
from ws_load import _Client, _open, _percentile

PACE_S = float(os.environ.get("BENCH_CAPACITY_PACE_S", "20"))
SERVER_COUNTS = tuple(
    int(count) for count in os.environ.get("BENCH_CAPACITY_SERVERS", "1,2").split(",") if count
)
CHATS_START = int(os.environ.get("BENCH_CAPACITY_START", "25"))
CHATS_MAX = int(os.environ.get("BENCH_CAPACITY_MAX", "1600"))
P99_MS = 250.0
# Each step has this many times the chats of the last: the capacity's resolution (a
# doubling could not tell 0.5 of the floor from 0.9 of it).
GROWTH = 1.5
WINDOW_PACES = 1
SEED = 45


class _Paced:
    """The chats of one phase (toolhub's or the floor's), added step by step, each on its
    own pace until ``stop``; ``seen`` holds (receipt, delivery ms) of every event."""

    def __init__(self, clients: list[_Client], run_one: Any) -> None:
        self._waiting = list(clients)
        self._run_one = run_one
        self._tasks: list[asyncio.Task[None]] = []
        self.stop = asyncio.Event()
        self.seen: list[tuple[float, float]] = []
        self.stuck: list[str] = []

    def add(self, count: int) -> int:
        rng = random.Random(SEED + len(self._tasks))  # noqa: S311 (a fixed seed on purpose)
        while len(self._tasks) < count and self._waiting:
            client = self._waiting.pop(0)
            offset = rng.uniform(0, PACE_S)
            self._tasks.append(asyncio.create_task(self._run_one(self, client, offset)))
        return len(self._tasks)

    async def close(self) -> None:
        self.stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _sleep_or_stop(paced: _Paced, seconds: float) -> bool:
    """Sleep ``seconds`` unless the phase stops first; True when it stopped."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(paced.stop.wait(), max(seconds, 0))
    return paced.stop.is_set()


async def _opened(paced: _Paced, client: _Client) -> Any:
    """The chat's socket, or None (counted as stuck) when none opens."""
    try:
        return await _open(client)
    except ws_load._Stuck as exc:
        paced.stuck.append(f"session {client.session_id}: {exc}")
        return None


async def _chat(paced: _Paced, client: _Client, offset: float) -> None:
    """A person: a message every PACE_S seconds, each turn read to its end."""
    if (socket := await _opened(paced, client)) is None:
        return
    number = 0
    try:
        if await _sleep_or_stop(paced, offset):
            return
        while not paced.stop.is_set():
            number += 1
            sent = time.monotonic()
            socket = await ws_load._turn(client, socket, number)
            if await _listen(paced, client, socket, PACE_S - (time.monotonic() - sent)):
                return
    except ws_load._Stuck as exc:
        paced.stuck.append(f"session {client.session_id}: {exc}")
    finally:
        await socket.close()


async def _listen(paced: _Paced, client: _Client, socket: Any, seconds: float) -> bool:
    """Read what comes between turns (the chat's title arrives after its first turn ends)
    for ``seconds``, unless the phase stops first; True when it stopped."""
    from websockets.exceptions import ConnectionClosed

    deadline = time.monotonic() + max(seconds, 0)
    while not paced.stop.is_set() and (left := deadline - time.monotonic()) > 0:
        try:
            raw = await asyncio.wait_for(socket.recv(), min(left, 1.0))
        except TimeoutError:
            continue
        except ConnectionClosed:
            return await _sleep_or_stop(paced, deadline - time.monotonic())
        frame = json.loads(raw)
        if frame.get("type") == "event":
            client.events.append((frame["seq"], frame["kind"], time.time()))
            client.sizes.append(len(raw))
            client.created[frame["seq"]] = ws_load._wall_clock(frame["created"])
    return paced.stop.is_set()


def _floor_chat(turn: list[tuple[str, int]]) -> Any:
    """The floor's person: the frames of one toolhub turn (kinds and sizes), each PACE_S
    seconds, in two group sends as a turn sends them, to the chat's socket."""

    async def run(paced: _Paced, client: _Client, offset: float) -> None:
        from channels.layers import get_channel_layer

        from agent_app.delivery import session_group

        if (socket := await _opened(paced, client)) is None:
            return
        receiving = asyncio.create_task(_receive(paced, socket))
        layer, group, seq = get_channel_layer(), session_group(client.session_id), 0
        try:
            if await _sleep_or_stop(paced, offset):
                return
            while not paced.stop.is_set():
                started = time.monotonic()
                seq = await ws_load.send_turn(layer, group, turn, seq)
                if await _sleep_or_stop(paced, PACE_S - (time.monotonic() - started)):
                    return
        finally:
            receiving.cancel()
            await socket.close()

    return run


async def _receive(paced: _Paced, socket: Any) -> None:
    from websockets.exceptions import ConnectionClosed

    with contextlib.suppress(ConnectionClosed, asyncio.CancelledError):
        async for raw in socket:
            frame = json.loads(raw)
            if frame.get("type") == "event" and "sent" in frame.get("data", {}):
                received = time.time()
                paced.seen.append((received, (received - frame["data"]["sent"]) * 1000))


def _toolhub_deliveries(clients: list[_Client], since: float) -> list[tuple[float, float]]:
    """(receipt, delivery ms) of every event the clients received after ``since``, by the
    ``created`` each frame carries: reading every stored event instead (as this did) took
    the bench's GIL and a share of PostgreSQL for a second or more at each window's end,
    and the deliveries around it read as late."""
    seen = []
    for client in clients:
        # In receipt order: the window's are at the end.
        for seq, _, received in reversed(client.events):
            if received < since:
                break
            if seq in client.created:
                seen.append((received, (received - client.created[seq]) * 1000))
    return seen


async def _ladder(label: str, servers: list[int], paced: _Paced, delivered: Any) -> int:
    """Add chats in steps of ``GROWTH`` until a step's p99 passes P99_MS twice running (a
    step over it is measured again, so one pause of a shared machine does not end the
    ladder); the last step under it."""
    capacity, chats = 0, CHATS_START
    while chats <= CHATS_MAX:
        count = paced.add(chats)
        # The new chats' first messages are spread over one pace; the window follows it.
        await asyncio.sleep(PACE_S)
        for attempt in range(2):
            p99 = await _window(label, servers, paced, delivered, count, attempt)
            if p99 <= P99_MS:
                break
        if not p99 <= P99_MS or paced.stuck or count < chats:
            break
        capacity, chats = count, round(chats * GROWTH)
    await paced.close()
    return capacity


async def _window(
    label: str, servers: list[int], paced: _Paced, delivered: Any, count: int, attempt: int
) -> float:
    """One window's delivery p99 (NaN without events), printed as a step line with the
    share of a core each server used in it (``server_core``, their mean: a server's Python
    runs on one core at a time, so near 1.0 its CPU, not the machine, sets the pace)."""
    since, cpu = time.time(), ws_load._cpu(servers)["servers"]
    await asyncio.sleep(WINDOW_PACES * PACE_S)
    core = (ws_load._cpu(servers)["servers"] - cpu) / (time.time() - since) / len(servers)
    window = [ms for received, ms in await delivered(since) if received >= since]
    p99 = _percentile(window, 0.99)
    print(
        f"ws_load capacity step servers={len(servers)} pace_s={PACE_S:g} kind={label} "
        f"chats={count} events={len(window)} delivery_p50_ms={_percentile(window, 0.5):.1f} "
        f"delivery_p99_ms={p99:.1f} server_core={core:.2f} stuck={len(paced.stuck)}"
        + (" again" if attempt else ""),
        flush=True,
    )
    return p99


async def _phases(
    servers: list[int], clients: list[_Client], warmup: list[_Client]
) -> tuple[int, int]:
    # The first turns pay one-time costs (the SDK's import): not the capacity's.
    for client in warmup:
        await ws_load._converse(client, turns=1)
    half = len(clients) // 2
    mine = clients[:half]
    paced = _Paced(mine, _chat)

    async def toolhub_seen(since: float) -> list[tuple[float, float]]:
        return _toolhub_deliveries(mine, since)

    chats = await _ladder("toolhub", servers, paced, toolhub_seen)
    turn = ws_load._turns_of(warmup[0])[0]
    floor = _Paced(clients[half:], _floor_chat(turn))

    async def floor_seen(since: float) -> list[tuple[float, float]]:
        return list(floor.seen)

    floor_chats = await _ladder("floor", servers, floor, floor_seen)
    return chats, floor_chats


def _run(var_dir: Path, servers: int) -> None:
    from tests.conftest import daphne

    with ws_load._model_and_env(var_dir) as (env, _model):
        chats = ws_load._people(2 * CHATS_MAX + servers)
        bases, processes = [], []
        with contextlib.ExitStack() as running:
            for number in range(servers):
                log = var_dir / f"capacity-{servers}-{number}.log"
                bases.append(running.enter_context(daphne(env, log=log, started=processes)))
            clients = ws_load._clients(chats, bases)
            ws_load._clients_collect_less()
            pids = [process.pid for process in processes]
            found, floor = asyncio.run(_phases(pids, clients[servers:], clients[:servers]))
    print(
        f"ws_load capacity servers={servers} pace_s={PACE_S:g} chats={found} floor_chats={floor}",
        flush=True,
    )


def main() -> None:
    var_dir = Path(tempfile.mkdtemp(prefix="toolhub-ws-capacity-"))
    try:
        for servers in SERVER_COUNTS:
            _run(var_dir, servers)
    finally:
        ws_load.tear_down(var_dir)


if __name__ == "__main__":
    main()
