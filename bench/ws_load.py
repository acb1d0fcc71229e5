"""Chat under load over real sockets: 200 sessions, 5 turns each, over 1, 2 and 4 daphne
servers, beside the floor the same sockets reach with no turns.

For each server count (BENCH_WS_SERVERS, default "1,2,4"): drops and recreates the database
``toolhub_bench_ws`` on the PostgreSQL at BENCH_WS_DATABASE_URL (default
postgres://postgres@127.0.0.1:5432/toolhub_bench_ws), flushes the Redis database at
BENCH_WS_REDIS_URL (default redis://127.0.0.1:6379/4), migrates, and makes a person with a
token for each chat (a server's chats are many people's). The servers run as in
production (DEBUG off) and share that database and the Redis channel layer; the fake
Anthropic Messages API (tests.fakes) answers every model call with 50 words streamed as
50 deltas. Tool phrasings are off: they are asked once per machine, and a fresh database
would ask again during the load.

The load: one warm-up turn per server goes first (its time is printed apart); then the 200
clients, spread across the servers in turn, all connect at once, resume from seq 0 and run
5 turns each, each turn reading frames until its terminal event. A client whose socket the
server closes reconnects to the same server and resumes after the last seq it received, as
the real client does; that is counted.

The floor: 200 more sockets on the same servers, and this process sends each of them,
through plain channels-redis group sends to its session's group (no turn, no database),
the frames one load client received: the same kinds, sizes and number, each turn's in two
sends, back to back. A probe frame per socket goes first, so that sending starts once every
socket listens.

Prints, per server count, events per second (events received over the time from the start
of the phase to the last event received), delivery latency (receipt on the client minus
``SessionEvent.created``, stamped by the writing server on this machine; for the floor,
minus the publisher's stamp), turn latency (``chat`` sent to terminal event received), the
CPU seconds each phase took from the servers, this process (clients, publisher and fake
model), PostgreSQL and Redis, with the servers' CPU per turn (two cores here: when their sum
nears twice the phase's seconds, the machine, not the product, sets the pace) beside what
the anthropic SDK alone spends on the same replies, as many calls a turn
(``sdk_ms_per_turn``: the provider's request path in a process of its own, the chat's title
call included; the target is at most twice it), the servers' system share
(``servers_system``: the kernel's, for system calls), what the servers spent per turn
delivering the floor's frames (``floor_delivery_ms_per_turn``: the same frames reaching the
same sockets with no turn, no database and no model call), and the ratio a turn cannot go
below on this stack (``ratio_at_least``: the SDK's cost plus that delivery, over the SDK's);
and, for ``ws_capacity``, the share of the floor's chats a server whose CPU sets the pace
carries (``capacity_share``: the floor's delivery per turn over the turn's) and the most it
could carry (``capacity_share_at_most``: a turn costing only the SDK and the delivery),
and the delivery check: per session the seqs received must be 1..last, each once, in order, and
every stored event must have arrived. Then a table of the counts side by side, with each
load's share of its floor's events per second. Figures are printed, not asserted; details
of anything that went wrong go to stderr. A client that cannot finish (a turn silent for
120 s, or no socket) makes the run exit non-zero after the figures. Everything it started
is stopped, the database dropped and the Redis index flushed at the end.

With BENCH_WS_PYSPY set to a directory, py-spy (on PATH, not a dependency) records each
server while the load runs (the samples holding the GIL), as raw stacks there, for the
profile's top frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATABASE_URL = os.environ.get(
    "BENCH_WS_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolhub_bench_ws"
)
REDIS_URL = os.environ.get("BENCH_WS_REDIS_URL", "redis://127.0.0.1:6379/4")
SESSIONS = 200
TURNS = 5
DELTAS = 50
# The load runs once per server count; the figures without a count are from the first.
SERVER_COUNTS = tuple(
    int(count) for count in os.environ.get("BENCH_WS_SERVERS", "1,2,4").split(",") if count
)
FLOOR_TIMEOUT = 120.0
CONNECT_TIMEOUT = 30.0
CONNECT_ATTEMPTS = 5
TURN_TIMEOUT = 120.0
REPLY = " ".join(f"word{index}" for index in range(DELTAS))
TERMINAL = ("turn_finished", "turn_failed")


@dataclass
class _Client:
    """One session's client and everything it saw, in receipt order."""

    session_id: str
    server: int
    url: str
    token: str
    # (seq, kind, wall-clock receipt time) per event frame, and each frame's size.
    events: list[tuple[int, str, float]] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    # Each event's ``created`` as its frame carries it (the stored event's), by seq.
    created: dict[int, float] = field(default_factory=dict)
    # The floor's clients: receipt minus the publisher's stamp, per frame; and, when the
    # layer dropped frames, how many arrived of how many were sent.
    floor_ms: list[float] = field(default_factory=list)
    short: str = ""
    open_ms: list[float] = field(default_factory=list)
    turn_ms: list[float] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    # Handshakes that did not open, and open sockets the server closed mid-run.
    retries: list[str] = field(default_factory=list)
    drops: list[str] = field(default_factory=list)
    stuck: str = ""

    @property
    def last_seq(self) -> int:
        return max((seq for seq, _, _ in self.events), default=0)


class _Stuck(Exception):
    """A client cannot go on: no socket opens, or a turn never ends."""


def _django(var_dir: Path, env: dict[str, str]) -> None:
    """Django in this process, on the database and channel layer the servers use."""
    os.environ.update({key: env[key] for key in _SHARED_SETTINGS})
    os.environ.update(TOOLHUB_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="toolhub.settings")
    import django

    django.setup()


def _people(count: int) -> list[tuple[str, str]]:
    """(token, session) of ``count`` chats, each a person's own, as a server's chats are
    (one person's 200 chats would make every handshake count that person's open sockets,
    which no deployment sees)."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from sessions_app.services import session_create

    chats = []
    for number in range(count):
        # No password: hashing one is a tenth of a second the bench does not measure.
        user = get_user_model().objects.create(username=f"bench{number}")
        token = Token.objects.create(user=user)
        chats.append((token.key, str(session_create(user=user).pk)))
    return chats


def _clients(chats: list[tuple[str, str]], bases: list[str]) -> list[_Client]:
    """A client per chat, spread across the servers at ``bases`` in turn."""
    return [
        _Client(
            session_id=session_id,
            server=index % len(bases),
            url=bases[index % len(bases)].replace("http://", "ws://")
            + f"/ws/sessions/{session_id}/",
            token=token,
        )
        for index, (token, session_id) in enumerate(chats)
    ]


async def _open(client: _Client) -> Any:
    """Open the session's socket and resume after the last seq received, as a client that
    reconnects does; a refused handshake is retried with backoff and counted."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import WebSocketException

    for attempt in range(CONNECT_ATTEMPTS):
        started = time.perf_counter()
        try:
            socket = await connect(
                client.url,
                additional_headers={"Authorization": f"Token {client.token}"},
                open_timeout=CONNECT_TIMEOUT,
                # The bench's own loop can be busy for seconds under load; a late keepalive
                # pong must not close a socket the server is still writing to.
                ping_interval=None,
            )
            opened = time.perf_counter()
            await socket.send(json.dumps({"type": "resume", "after_seq": client.last_seq}))
        except (OSError, TimeoutError, WebSocketException) as exc:
            client.retries.append(f"attempt {attempt + 1}: {exc!r}")
            await asyncio.sleep(0.5 * 2**attempt)
            continue
        client.open_ms.append((opened - started) * 1000)
        return socket
    raise _Stuck(f"no socket opened in {CONNECT_ATTEMPTS} attempts: {client.retries[-1]}")


async def _converse(client: _Client, turns: int = TURNS) -> None:
    try:
        socket = await _open(client)
    except _Stuck as exc:
        client.stuck = f"session {client.session_id} on server {client.server}: {exc}"
        return
    try:
        for number in range(1, turns + 1):
            socket = await _turn(client, socket, number)
    except _Stuck as exc:
        client.stuck = (
            f"session {client.session_id} on server {client.server}: {exc} "
            f"(last seq received {client.last_seq})"
        )
    finally:
        await socket.close()


async def _turn(client: _Client, socket: Any, number: int) -> Any:
    """Run turn ``number`` to its terminal event; returns the socket, reopened if the server
    closed it meanwhile (the events in between then come from the resume replay)."""
    from websockets.exceptions import ConnectionClosed

    started = time.perf_counter()
    deadline = time.monotonic() + TURN_TIMEOUT
    chat = json.dumps({"type": "chat", "text": f"turn {number}"})
    sent = False
    while True:
        try:
            if not sent:
                await socket.send(chat)
                sent = True
            raw = await asyncio.wait_for(socket.recv(), max(deadline - time.monotonic(), 0.001))
        except TimeoutError:
            raise _Stuck(f"turn {number} did not end within {TURN_TIMEOUT:g} s") from None
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else None
            client.drops.append(f"turn {number}: close code {code} after seq {client.last_seq}")
            socket = await _open(client)
            continue
        received = time.time()
        frame = json.loads(raw)
        if frame["type"] == "error":
            # Each turn starts after the previous one's terminal event, which the server
            # stores together with the release: a refusal here is a product bug.
            client.errors.append({"turn": number, **frame})
            return socket
        if frame["type"] != "event":
            continue
        client.events.append((frame["seq"], frame["kind"], received))
        client.sizes.append(len(raw))
        client.created[frame["seq"]] = _wall_clock(frame["created"])
        if frame["kind"] in TERMINAL:
            client.turn_ms.append((time.perf_counter() - started) * 1000)
            if frame["kind"] == "turn_failed":
                client.failed.append({"turn": number, "seq": frame["seq"], **frame["data"]})
            return socket


async def _warm(warmups: list[_Client]) -> None:
    """One turn per server, before the load: it takes each server's one-time costs (the
    provider SDK is imported by the first turn, for seconds) out of the figures; its
    duration is printed on its own."""
    for warmup in warmups:
        await _converse(warmup, turns=1)


async def _load(clients: list[_Client]) -> float:
    """Every client connects and runs its turns, all at once; returns the wall-clock time
    the load started."""
    started = time.time()
    await asyncio.gather(*(_converse(client) for client in clients))
    return started


def _turns_of(client: _Client) -> list[list[tuple[str, int]]]:
    """The frames a load client received, as (kind, size), cut into its turns."""
    turns: list[list[tuple[str, int]]] = [[]]
    for (_, kind, _), size in zip(client.events, client.sizes, strict=True):
        turns[-1].append((kind, size))
        if kind in TERMINAL:
            turns.append([])
    return [turn for turn in turns if turn]


@dataclass
class _FloorSocket:
    """How far one floor socket has got: its publisher sends a turn's frames only once the
    previous turn's arrived, as a load client sends its next chat only after a turn ends."""

    expected: int
    received: int = 0
    listening: asyncio.Event = field(default_factory=asyncio.Event)
    moved: asyncio.Event = field(default_factory=asyncio.Event)

    async def reached(self, count: int) -> None:
        while self.received < count:
            self.moved.clear()
            await asyncio.wait_for(self.moved.wait(), FLOOR_TIMEOUT)


async def _floor_client(client: _Client, state: _FloorSocket) -> None:
    """Receive the expected frames after the probe; each frame's delivery is its receipt
    minus the time the publisher stamped on it."""
    try:
        socket = await _open(client)
    except _Stuck as exc:
        client.stuck = f"floor session {client.session_id}: {exc}"
        state.listening.set()
        return
    try:
        while state.received < state.expected:
            raw = await asyncio.wait_for(socket.recv(), FLOOR_TIMEOUT)
            received = time.time()
            frame = json.loads(raw)
            if frame["type"] != "event":
                continue
            if frame["kind"] == "probe":
                state.listening.set()
                continue
            client.events.append((frame["seq"], frame["kind"], received))
            client.floor_ms.append((received - frame["data"]["sent"]) * 1000)
            state.received += 1
            state.moved.set()
    except TimeoutError:
        client.short = f"floor session {client.session_id}: {state.received} of {state.expected}"
    finally:
        state.listening.set()
        await socket.close()


async def _publish(client: _Client, plan: list[list[tuple[str, int]]], state: _FloorSocket):
    """Plain channels-redis group sends to the session's sockets, no turn: the load's frames
    for this socket, each turn's in two sends (its first two events, then the rest, as a
    one-step turn sends them), the next turn's once this one's arrived."""
    from channels.layers import get_channel_layer

    from agent_app.delivery import session_group

    layer, group = get_channel_layer(), session_group(client.session_id)
    seq, sent = 1, 0
    for turn in plan:
        seq = await send_turn(layer, group, turn, seq)
        sent += len(turn)
        try:
            await state.reached(sent)
        except TimeoutError:
            return  # the receiver says which frames never came


async def send_turn(layer: Any, group: str, turn: list[tuple[str, int]], seq: int) -> int:
    """One turn's frames (kind and size as a load client received them) to ``group``, in
    two group sends as a one-step turn sends them (its first two events, then the rest),
    each stamped as sent; returns the last seq used."""
    frames = []
    for kind, size in turn:
        seq += 1
        # Padded to the size the load's frame had on the wire.
        data = {"pad": "x" * max(size - 110, 0)}
        frames.append({"type": "event", "seq": seq, "turn": "floor", "kind": kind, "data": data})
    for batch in (frames[:2], frames[2:]):
        if batch:
            stamp = time.time()
            for frame in batch:
                frame["data"]["sent"] = stamp
            await layer.group_send(group, {"type": "session.events", "frames": batch})
    return seq


async def _probe(client: _Client, state: _FloorSocket) -> None:
    """Seq 1 until the socket has it: its consumer has joined the group and resumed."""
    from channels.layers import get_channel_layer

    from agent_app.delivery import session_group

    layer, group = get_channel_layer(), session_group(client.session_id)
    probe = {"type": "event", "seq": 1, "turn": "", "kind": "probe", "data": {}}
    while not state.listening.is_set():
        await layer.group_send(group, {"type": "session.events", "frames": [probe]})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.listening.wait(), 0.1)


async def _floor(load: list[_Client], floor: list[_Client]) -> float:
    """The floor: as many sockets on the same servers receive the same frames (kinds,
    sizes, per socket, turn by turn) through plain group sends; returns when sending
    began."""
    plans = [_turns_of(client) for client in load]
    states = [_FloorSocket(expected=sum(map(len, plan))) for plan in plans]
    receivers = [
        asyncio.create_task(_floor_client(client, state))
        for client, state in zip(floor, states, strict=True)
    ]
    await asyncio.gather(*(_probe(c, state) for c, state in zip(floor, states, strict=True)))
    started = time.time()
    await asyncio.gather(
        *(
            _publish(client, plan, state)
            for client, plan, state in zip(floor, plans, states, strict=True)
        )
    )
    await asyncio.gather(*receivers)
    return started


def _stored() -> dict[str, dict[int, tuple[str, float]]]:
    """Every stored event: session id -> seq -> (kind, created as a wall-clock time)."""
    from sessions_app.models import SessionEvent

    stored: dict[str, dict[int, tuple[str, float]]] = {}
    rows = SessionEvent.objects.values_list("session_id", "seq", "kind", "created")
    for session_id, seq, kind, created in rows.iterator(chunk_size=5000):
        stored.setdefault(str(session_id), {})[seq] = (kind, created.timestamp())
    return stored


def _wall_clock(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _report(
    clients: list[_Client],
    warmups: list[_Client],
    model_calls: int,
    started: float,
    logs: list[Path],
    floor: list[_Client],
    floor_started: float,
) -> tuple[list[str], dict[str, float]]:
    """Print the figures and, on stderr, what went wrong where; returns the clients that
    could not finish, which make the run fail, and the figures the closing table shows."""
    servers = len(logs)
    stored = _stored()
    received = sum(len(client.events) for client in clients)
    kinds = Counter(kind for client in clients for _, kind, _ in client.events)
    delivery_ms: list[float] = []
    duplicated = lost = out_of_order = unstored = 0
    findings: list[str] = []
    for client in clients:
        seqs = [seq for seq, _, _ in client.events]
        log = stored.get(client.session_id, {})
        extra = len(seqs) - len(set(seqs))
        missing = set(log) - set(seqs)
        gaps = set(range(1, max(seqs, default=0) + 1)) - set(seqs)
        # A seq sent but never stored would be an event no replay can give back.
        phantom = set(seqs) - set(log)
        disordered = sum(1 for before, after in itertools.pairwise(seqs) if after <= before)
        duplicated += extra
        lost += len(missing | gaps)
        out_of_order += disordered
        unstored += len(phantom)
        if extra or missing or gaps or phantom or disordered:
            shown = [(seq, log.get(seq, ("?",))[0]) for seq in sorted(missing | gaps)[:10]]
            findings.append(
                f"session {client.session_id} server {client.server}: duplicated={extra} "
                f"lost={shown} unstored={sorted(phantom)[:10]} out_of_order={disordered}"
            )
        first_seen: set[int] = set()
        for seq, _, at in client.events:
            if seq in log and seq not in first_seen:
                first_seen.add(seq)
                delivery_ms.append((at - log[seq][1]) * 1000)
    turn_ms = [ms for client in clients for ms in client.turn_ms]
    open_ms = [ms for client in clients for ms in client.open_ms]
    failed = [(client, failure) for client in clients for failure in client.failed]
    refused = [(client, error) for client in clients for error in client.errors]
    retries = [(client, retry) for client in clients for retry in client.retries]
    drops = [(client, drop) for client in clients for drop in client.drops]
    stuck = [client.stuck for client in clients if client.stuck]
    lines = [
        (number, line)
        for number, log in enumerate(logs)
        for line in log.read_text(errors="replace").splitlines()
    ]
    server_errors = [f"server {number}: {line}" for number, line in lines if " ERROR " in line]
    # channels_redis drops a group message, with only this INFO line, when the receiving
    # process already has `capacity` messages waiting.
    layer_drops = [f"server {number}: {line}" for number, line in lines if "over capacity" in line]
    warm_ms = " ".join(
        f"server{warmup.server}={ms:.0f}" for warmup in warmups for ms in warmup.turn_ms
    )

    print(
        f"ws_load sessions={len(clients)} servers={servers} turns={len(turn_ms)} "
        f"events={received} stored={sum(len(stored.get(c.session_id, {})) for c in clients)} "
        f"model_calls={model_calls} text_delta_events={kinds['text_delta']}"
    )
    print(f"ws_load warmup_turn_ms {warm_ms}")
    # Up to the last event received, so clients left waiting for a lost event do not
    # stretch the phase by their timeout.
    elapsed = max((at for c in clients for _, _, at in c.events), default=started) - started
    elapsed = max(elapsed, 1e-9)
    print(f"ws_load load_s {elapsed:.2f}")
    print(f"ws_load events_per_s {received / elapsed:.0f}")
    print(f"ws_load turns_per_s {len(turn_ms) / elapsed:.1f}")
    print(f"ws_load delivery_p50_ms {_percentile(delivery_ms, 0.50):.1f}")
    print(f"ws_load delivery_p99_ms {_percentile(delivery_ms, 0.99):.1f}")
    print(f"ws_load delivery_max_ms {max(delivery_ms, default=float('nan')):.1f}")
    print(f"ws_load turn_p50_ms {_percentile(turn_ms, 0.50):.1f}")
    print(f"ws_load turn_p99_ms {_percentile(turn_ms, 0.99):.1f}")
    print(f"ws_load open_p50_ms {_percentile(open_ms, 0.50):.1f}")
    print(f"ws_load open_max_ms {max(open_ms, default=float('nan')):.1f}")
    print(f"ws_load lost {lost}")
    print(f"ws_load duplicated {duplicated}")
    print(f"ws_load out_of_order {out_of_order}")
    print(f"ws_load unstored {unstored}")
    print(f"ws_load failed_turns {len(failed)}")
    print(f"ws_load refused_chats {len(refused)}")
    print(f"ws_load handshake_retries {len(retries)}")
    print(f"ws_load dropped_sockets {len(drops)}")
    print(f"ws_load stuck_clients {len(stuck)}")
    print(f"ws_load server_errors {len(server_errors)}")
    print(f"ws_load layer_over_capacity {len(layer_drops)}")
    floor_received = sum(len(client.events) for client in floor)
    floor_ms = [ms for client in floor for ms in client.floor_ms]
    floor_elapsed = max(
        max((at for c in floor for _, _, at in c.events), default=floor_started) - floor_started,
        1e-9,
    )
    floor_lost = sum(
        len(plan_frames) - len({seq for seq, _, _ in c.events})
        for c, plan_frames in zip(floor, (c.events for c in clients), strict=True)
    )
    # The floor is plain channel-layer sends with no log behind them: a frame the layer
    # dropped (it drops under this load) leaves its client short, which is the floor's
    # `lost` figure, not a failure of the run. A floor socket that never opened is one.
    stuck += [client.stuck for client in floor if client.stuck]
    for client in floor:
        if client.short:
            print(f"ws_load floor short: {client.short}", file=sys.stderr)
    print(
        f"ws_load floor events={floor_received} events_per_s {floor_received / floor_elapsed:.0f} "
        f"delivery_p50_ms {_percentile(floor_ms, 0.50):.1f} "
        f"delivery_p99_ms {_percentile(floor_ms, 0.99):.1f} lost {floor_lost}"
    )

    # A few of each kind, so one loud kind does not hide the others.
    details = [
        [f"stuck {line}" for line in stuck],
        [f"finding {line}" for line in findings],
        [f"failed {c.session_id} server {c.server}: {f}" for c, f in failed],
        [f"refused {c.session_id} server {c.server}: {e}" for c, e in refused],
        [f"retry {c.session_id} server {c.server}: {r}" for c, r in retries],
        [f"dropped {c.session_id} server {c.server}: {d}" for c, d in drops],
        server_errors,
        layer_drops,
    ]
    for kind in details:
        for line in kind[:5]:
            print(f"ws_load {line}", file=sys.stderr)
    figures = {
        "servers": servers,
        "events_per_s": received / elapsed,
        "floor_events_per_s": floor_received / floor_elapsed,
        "delivery_p50_ms": _percentile(delivery_ms, 0.50),
        "floor_delivery_p50_ms": _percentile(floor_ms, 0.50),
        "delivery_p99_ms": _percentile(delivery_ms, 0.99),
        "turn_p50_ms": _percentile(turn_ms, 0.50),
        "lost": lost,
        "duplicated": duplicated,
    }
    return stuck, figures


# What this process shares with the servers (it writes their sessions, publishes the floor).
_SHARED_SETTINGS = (
    "DATABASE_URL",
    "REDIS_URL",
    "DEBUG",
    "SECRET_KEY",
    "TOOLHUB_SECRETS_KEYS",
    "ALLOWED_HOSTS",
    "TOOLHUB_TOOL_PHRASINGS",
    "TOOLHUB_EMBEDDING_CACHE",
)


def _cpu(servers: list[int]) -> dict[str, float]:
    """CPU seconds used so far (user + system, every thread) by the servers, this process
    (the clients, the floor's publisher and the fake model), PostgreSQL and Redis."""
    tick = os.sysconf("SC_CLK_TCK")

    def used(pid: int | str, *, system_only: bool = False) -> float:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a backend that ended between the listing and the read
            return 0.0
        return (int(fields[12]) + (0 if system_only else int(fields[11]))) / tick

    def named(name: str) -> float:
        total = 0.0
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if (entry / "comm").read_text().strip() == name:
                        total += used(entry.name)
        return total

    return {
        "servers": sum(used(pid) for pid in servers),
        # The kernel's share of it (system calls: sockets, futexes), which no profile of
        # the servers' Python shows.
        "servers_system": sum(used(pid, system_only=True) for pid in servers),
        "bench": used(os.getpid()),
        "postgres": named("postgres"),
        "redis": named("redis-server"),
    }


def _print_cpu(
    phase: str, before: dict[str, float], after: dict[str, float], more: str = ""
) -> dict[str, float]:
    spent = {name: after[name] - before[name] for name in after}
    print(
        f"ws_load cpu_s {phase} "
        + " ".join(f"{name}={seconds:.1f}" for name, seconds in spent.items())
        + more
    )
    return spent


def _profiling(servers: list[int]) -> list[subprocess.Popen[bytes]]:
    """py-spy recording each server while the load runs, where BENCH_WS_PYSPY names a
    directory for its raw stacks (``py-spy`` on PATH; it is not a dependency)."""
    where = os.environ.get("BENCH_WS_PYSPY")
    if not where:
        return []
    Path(where).mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            [
                # Only samples holding the GIL: where the servers' CPU goes, not where
                # their threads wait (a thread blocked on PostgreSQL looks busy otherwise).
                *("py-spy", "record", "-p", str(pid), "-r", "100", "-f", "raw", "--gil"),
                *("--nonblocking", "-o", str(Path(where) / f"server-{len(servers)}-{number}.raw")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for number, pid in enumerate(servers)
    ]


async def _phases(
    load: list[_Client],
    floor: list[_Client],
    warmups: list[_Client],
    servers: list[int],
) -> tuple[float, float, dict[str, float]]:
    """The warm-up, the load and the floor; the load's CPU seconds by process (from after
    the warm-up: one-time costs are not a turn's)."""
    await _warm(warmups)
    recorders = _profiling(servers)
    before = _cpu(servers)
    started = await _load(load)
    between = _cpu(servers)
    for recorder in recorders:
        recorder.send_signal(signal.SIGINT)
        recorder.wait()
    floor_started = await _floor(load, floor)
    floor_spent = _print_cpu("floor", between, _cpu(servers))
    spent = {name: between[name] - before[name] for name in between}
    return started, floor_started, {**spent, "floor_servers": floor_spent["servers"]}


@contextlib.contextmanager
def _model_and_env(var_dir: Path) -> Any:
    """The fake Anthropic API and the servers' environment, on a fresh database (migrated)
    and Redis index, with Django set up in this process on the same; yields the env and
    the fake model (which records the requests it answered)."""
    from _django import BENCH_SECRETS_KEY, flush_redis, recreate_database

    from tests.conftest import app_env, manage
    from tests.fakes import FakeAnthropic, Reply

    _close_django()  # the previous count's connection: the database is dropped
    recreate_database(DATABASE_URL)
    flush_redis(REDIS_URL)
    with FakeAnthropic(responder=lambda body: Reply(text=REPLY, chunks=DELTAS)) as model:
        env = app_env(
            var_dir,
            DATABASE_URL=DATABASE_URL,
            REDIS_URL=REDIS_URL,
            # Production shape: DEBUG off (no query log per statement).
            DEBUG="0",
            SECRET_KEY="bench-" + "x" * 60,
            TOOLHUB_SECRETS_KEYS=BENCH_SECRETS_KEY,
            ALLOWED_HOSTS="127.0.0.1,localhost",
            TOOLHUB_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="bench",
            # Tools are phrased once per machine; a fresh bench database would ask again.
            TOOLHUB_TOOL_PHRASINGS="0",
            TOOLHUB_EMBEDDING_CACHE=str(ROOT / "var" / "bench" / "embeddings.sqlite3"),
        )
        (ROOT / "var" / "bench").mkdir(parents=True, exist_ok=True)
        migrated = manage("migrate", "--noinput", env=env)
        if migrated.returncode != 0:
            raise SystemExit(f"ws_load: migrate failed:\n{migrated.stderr}")
        if not _django_ready():  # this process sets Django up once, for the first count
            _django(var_dir, env)
        yield env, model


def _clients_collect_less() -> None:
    """This process's collector as a server's (toolhub.lib.collector): its clients stand
    for browsers on other machines, and with CPython's defaults its full collections (a
    heap of thousands of clients and the frames they received) paused it for up to 270 ms,
    which read as late delivery of every event it was receiving meanwhile."""
    from toolhub.lib.collector import collect_less

    collect_less()


def _run(var_dir: Path, servers: int) -> tuple[list[str], dict[str, float]]:
    from tests.conftest import daphne

    with _model_and_env(var_dir) as (env, model):
        # The load's chats, the floor's, one warm-up per server.
        chats = _people(2 * SESSIONS + servers)
        logs = [var_dir / f"daphne-{servers}-{number}.log" for number in range(servers)]
        with contextlib.ExitStack() as running:
            # Server output goes to files: under load a full pipe would stall a server.
            processes: list[subprocess.Popen[str]] = []
            bases = [running.enter_context(daphne(env, log=log, started=processes)) for log in logs]
            everyone = _clients(chats, bases)
            load, floor = everyone[:SESSIONS], everyone[SESSIONS : 2 * SESSIONS]
            warmups = everyone[2 * SESSIONS :]
            _clients_collect_less()
            started, floor_started, spent = asyncio.run(
                _phases(load, floor, warmups, [process.pid for process in processes])
            )
            # The SDK's own share, in a process of its own, for the same replies and as
            # many model calls a turn (the chat's title call included).
            calls = sum(1 for seen in model.requests if seen.path == "/v1/messages") - servers
            turns = TURNS * len(load)
            sdk_ms = _sdk_ms_per_call(model.url) * calls / turns
        server_ms = spent["servers"] / turns * 1000
        # What the servers spent delivering the same frames with no turn (the floor's
        # phase): with the SDK's own cost, what a turn costs at the least on this stack.
        floor_ms = spent["floor_servers"] / turns * 1000
        print(
            f"ws_load cpu_s load servers={spent['servers']:.1f} "
            f"servers_system={spent['servers_system']:.1f} bench={spent['bench']:.1f} "
            f"postgres={spent['postgres']:.1f} redis={spent['redis']:.1f} "
            f"server_ms_per_turn={server_ms:.1f} sdk_ms_per_turn={sdk_ms:.1f} "
            f"ratio={server_ms / sdk_ms:.2f} floor_delivery_ms_per_turn={floor_ms:.1f} "
            f"ratio_at_least={(sdk_ms + floor_ms) / sdk_ms:.2f} "
            f"capacity_share={floor_ms / server_ms:.2f} "
            f"capacity_share_at_most={floor_ms / (sdk_ms + floor_ms):.2f}"
        )
        # The servers are stopped: every event that will ever be stored is stored.
        return _report(load, warmups, calls, started, logs, floor, floor_started)


# What the anthropic SDK costs a model call on its own: the provider's request path
# (agent_app.providers.anthropic: a raw POST streamed into RawMessageStreamEvents), read to
# its end, in a fresh process; CPU seconds per call after a warm-up.
_SDK_ALONE = """
import asyncio, sys, time
import anthropic
from anthropic.types import Message, RawMessageStreamEvent

BODY = (b'{"model":"bench","max_tokens":64,"stream":true,'
        b'"messages":[{"role":"user","content":"hi"}]}')

async def main(url, calls):
    client = anthropic.AsyncAnthropic(api_key="bench", base_url=url, max_retries=0)
    async def one():
        response = await client.post(
            "/v1/messages", cast_to=Message, content=BODY,
            options={"headers": {"Content-Type": "application/json"}},
            stream=True, stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
        )
        async for event in response:
            if event.type == "content_block_delta":
                event.delta.text
    for _ in range(20):
        await one()
    started = time.process_time()
    for _ in range(calls):
        await one()
    print((time.process_time() - started) / calls * 1000)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""
SDK_CALLS = 200


def _sdk_ms_per_call(url: str) -> float:
    measured = subprocess.run(
        [sys.executable, "-c", _SDK_ALONE, url, str(SDK_CALLS)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return float(measured.stdout.strip())


def _django_ready() -> bool:
    from django.apps import apps

    return apps.ready


def _table(rows: list[dict[str, float]]) -> None:
    print(
        "ws_load table servers events_per_s floor_events_per_s share_of_floor "
        "delivery_p50_ms floor_delivery_p50_ms delivery_p99_ms turn_p50_ms lost duplicated"
    )
    for row in rows:
        print(
            f"ws_load table {row['servers']:.0f} {row['events_per_s']:.0f} "
            f"{row['floor_events_per_s']:.0f} "
            f"{row['events_per_s'] / row['floor_events_per_s']:.2f} "
            f"{row['delivery_p50_ms']:.1f} {row['floor_delivery_p50_ms']:.1f} "
            f"{row['delivery_p99_ms']:.1f} {row['turn_p50_ms']:.1f} "
            f"{row['lost']:.0f} {row['duplicated']:.0f}"
        )


def _close_django() -> None:
    if "django.db" in sys.modules:
        from django.db import connections

        connections.close_all()
        for connection in connections.all(initialized_only=True):
            # Its pool's connections too: the database they are on is about to go.
            if getattr(connection, "pool", None) is not None:
                connection.close_pool()


def tear_down(var_dir: Path) -> None:
    """What a run leaves: Django's connections, the bench database, the Redis index and the
    servers' directory."""
    from _django import drop_database, flush_redis

    _close_django()
    with contextlib.suppress(Exception):
        drop_database(DATABASE_URL)
    with contextlib.suppress(Exception):
        flush_redis(REDIS_URL)
    shutil.rmtree(var_dir, ignore_errors=True)


def main() -> None:
    started = time.perf_counter()
    var_dir = Path(tempfile.mkdtemp(prefix="toolhub-ws-load-"))
    stuck: list[str] = []
    rows: list[dict[str, float]] = []
    try:
        for servers in SERVER_COUNTS:
            stuck_here, figures = _run(var_dir, servers)
            stuck += stuck_here
            rows.append(figures)
        _table(rows)
    finally:
        tear_down(var_dir)
    print(f"ws_load run_s {time.perf_counter() - started:.1f}")
    if stuck:
        raise SystemExit(f"ws_load: {len(stuck)} clients could not finish; first: {stuck[0]}")


if __name__ == "__main__":
    main()
