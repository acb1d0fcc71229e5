"""Chat under load over real sockets: 200 sessions, 5 turns each, through two daphne servers.

Drops and recreates the database ``toolhub_bench_ws`` on the PostgreSQL at
BENCH_WS_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/toolhub_bench_ws), flushes
the Redis database at BENCH_WS_REDIS_URL (default redis://127.0.0.1:6379/4), migrates, and
makes one user with a token and 200 chat sessions. Two daphne processes share that database
and the Redis channel layer; the fake Anthropic Messages API (tests.fakes) answers every
model call with 50 words streamed as 50 deltas. The 200 clients, spread across the two
servers alternately, connect at once, resume from seq 0, then run 5 turns each, all
concurrently, each turn reading frames until its ``turn_finished``.

Prints events per second over the load phase, delivery latency (receipt on the client
minus ``SessionEvent.created``, stamped by the writing server on this machine), turn
latency (``chat`` sent to ``turn_finished`` received), and the delivery check: per
session the seqs received must be exactly 1..last once each, and every stored event must
have been received. Figures are printed, not asserted; a turn that never finishes ends the
run with a non-zero status after the figures, naming the session, server and last seq.
Everything it started is stopped and the database and Redis index are emptied at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATABASE_URL = os.environ.get(
    "BENCH_WS_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolhub_bench_ws"
)
REDIS_URL = os.environ.get("BENCH_WS_REDIS_URL", "redis://127.0.0.1:6379/4")
SESSIONS = 200
TURNS = 5
DELTAS = 50
SERVERS = 2
CONNECT_TIMEOUT = 60.0
TURN_TIMEOUT = 120.0
REPLY = " ".join(f"word{index}" for index in range(DELTAS))
TERMINAL = ("turn_finished", "turn_failed")


@dataclass
class _Client:
    """One session's socket and everything it saw, in receipt order."""

    session_id: str
    server: int
    url: str
    # (seq, kind, wall-clock receipt time) per event frame.
    events: list[tuple[int, str, float]] = field(default_factory=list)
    turn_ms: list[float] = field(default_factory=list)
    finished: int = 0
    failed: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    hung: str = ""


def _admin_url() -> str:
    return DATABASE_URL.replace(urlsplit(DATABASE_URL).path, "/postgres")


def _database_name() -> str:
    return urlsplit(DATABASE_URL).path.lstrip("/")


def _drop_database() -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(_admin_url(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(_database_name())
            )
        )


def _create_database() -> None:
    import psycopg
    from psycopg import sql

    # Dropped first so a run never inherits the seqs or sessions of an earlier one.
    _drop_database()
    with psycopg.connect(_admin_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(_database_name())))


def _flush_redis() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.flushdb()
    finally:
        client.close()


@contextlib.contextmanager
def _daphne(env: dict[str, str], log: Path) -> Iterator[int]:
    """Serve toolhub.asgi on a free port; yields the port.

    Unlike tests.conftest.daphne, stderr goes to a file: under load a server can log more
    than a pipe holds, and a full pipe would stall it mid-run. The file is read afterwards.
    """
    from tests.conftest import free_port

    port = free_port()
    daphne_bin = Path(sys.executable).parent / "daphne"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [
                str(daphne_bin),
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "toolhub.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        _wait_listening(port, process, log)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    import socket

    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            pass
        if process.poll() is not None:
            raise SystemExit(f"ws_load: daphne exited early:\n{log.read_text()}")
        if time.monotonic() > deadline:
            raise SystemExit("ws_load: daphne did not listen within 30 s")
        time.sleep(0.1)


def _setup(var_dir: Path) -> tuple[str, list[str]]:
    """Django in this process, on the database the servers use: a user, a token, sessions."""
    os.environ.update(
        DATABASE_URL=DATABASE_URL,
        REDIS_URL=REDIS_URL,
        DEBUG="1",
        TOOLHUB_VAR_DIR=str(var_dir),
        DJANGO_SETTINGS_MODULE="toolhub.settings",
    )
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from sessions_app.services import session_create

    user = get_user_model().objects.create_user(username="bench")
    token = Token.objects.create(user=user)
    sessions = [str(session_create(user=user).pk) for _ in range(SESSIONS)]
    return token.key, sessions


async def _open(client: _Client, token: str) -> Any:
    from websockets.asyncio.client import connect

    return await connect(
        client.url,
        additional_headers={"Authorization": f"Token {token}"},
        open_timeout=CONNECT_TIMEOUT,
        # The bench's own loop can be busy for seconds under load; a missed keepalive pong
        # must not close a socket the server is still writing to.
        ping_interval=None,
    )


async def _converse(client: _Client, socket: Any) -> None:
    for number in range(1, TURNS + 1):
        started = time.perf_counter()
        await socket.send(json.dumps({"type": "chat", "text": f"turn {number}"}))
        deadline = time.monotonic() + TURN_TIMEOUT
        while True:
            remaining = deadline - time.monotonic()
            try:
                raw = await asyncio.wait_for(socket.recv(), max(remaining, 0.001))
            except TimeoutError:
                last = client.events[-1][0] if client.events else 0
                client.hung = (
                    f"session {client.session_id} on server {client.server}: turn {number} "
                    f"did not end within {TURN_TIMEOUT:g} s (last seq received {last})"
                )
                return
            received = time.time()
            frame = json.loads(raw)
            if frame["type"] == "error":
                # Each turn starts after the previous one's terminal event, which the server
                # stores together with the release: a refusal here is a product bug.
                client.errors.append({"turn": number, **frame})
                break
            if frame["type"] != "event":
                continue
            client.events.append((frame["seq"], frame["kind"], received))
            if frame["kind"] in TERMINAL:
                client.turn_ms.append((time.perf_counter() - started) * 1000)
                if frame["kind"] == "turn_failed":
                    client.failed.append({"turn": number, "seq": frame["seq"], **frame["data"]})
                else:
                    client.finished += 1
                break


async def _load(clients: list[_Client], token: str) -> tuple[float, float]:
    """Connect every client, then run every conversation at once; returns the connect and
    load phase durations in seconds."""
    started = time.perf_counter()
    opened = await asyncio.gather(
        *(_open(client, token) for client in clients), return_exceptions=True
    )
    sockets = [socket for socket in opened if not isinstance(socket, BaseException)]
    try:
        refused = [
            (client, socket)
            for client, socket in zip(clients, opened, strict=True)
            if isinstance(socket, BaseException)
        ]
        if refused:
            client, error = refused[0]
            raise SystemExit(
                f"ws_load: {len(refused)} of {len(clients)} sockets did not open; first: "
                f"server {client.server} session {client.session_id}: {error!r}"
            )
        await asyncio.gather(
            *(socket.send(json.dumps({"type": "resume", "after_seq": 0})) for socket in sockets)
        )
        connected = time.perf_counter() - started
        started = time.perf_counter()
        await asyncio.gather(
            *(_converse(client, socket) for client, socket in zip(clients, sockets, strict=True))
        )
        return connected, time.perf_counter() - started
    finally:
        await asyncio.gather(*(socket.close() for socket in sockets), return_exceptions=True)


def _stored() -> dict[str, dict[int, tuple[str, float]]]:
    """Every stored event: session id -> seq -> (kind, created as a wall-clock time)."""
    from sessions_app.models import SessionEvent

    stored: dict[str, dict[int, tuple[str, float]]] = {}
    rows = SessionEvent.objects.values_list("session_id", "seq", "kind", "created")
    for session_id, seq, kind, created in rows.iterator(chunk_size=5000):
        stored.setdefault(str(session_id), {})[seq] = (kind, created.timestamp())
    return stored


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _report(
    clients: list[_Client], model_calls: int, connected: float, elapsed: float, logs: list[Path]
) -> list[str]:
    """Print the figures; returns the problems worth a non-zero status."""
    stored = _stored()
    received = sum(len(client.events) for client in clients)
    kinds = Counter(kind for client in clients for _, kind, _ in client.events)
    delivery_ms: list[float] = []
    duplicated = lost = out_of_order = unknown = 0
    findings: list[str] = []
    for client in clients:
        seqs = [seq for seq, _, _ in client.events]
        log = stored.get(client.session_id, {})
        extra = len(seqs) - len(set(seqs))
        missing = sorted(set(log) - set(seqs))
        # A seq sent but never stored would be an event the log cannot replay.
        phantom = sorted(set(seqs) - set(log))
        disordered = sum(1 for before, after in itertools.pairwise(seqs) if after <= before)
        gaps = sorted(set(range(1, max(seqs, default=0) + 1)) - set(seqs))
        duplicated += extra
        lost += len(set(missing) | set(gaps))
        out_of_order += disordered
        unknown += len(phantom)
        if extra or missing or gaps or phantom or disordered:
            findings.append(
                f"session {client.session_id} server {client.server}: duplicated={extra} "
                f"missing={[(seq, log.get(seq, ('?',))[0]) for seq in missing][:10]} "
                f"gaps={gaps[:10]} unstored={phantom[:10]} out_of_order={disordered}"
            )
        first_seen: set[int] = set()
        for seq, _, at in client.events:
            if seq in log and seq not in first_seen:
                first_seen.add(seq)
                delivery_ms.append((at - log[seq][1]) * 1000)
    turns = sum(len(client.turn_ms) for client in clients)
    turn_ms = [ms for client in clients for ms in client.turn_ms]
    failed = [(client, failure) for client in clients for failure in client.failed]
    refused = [(client, error) for client in clients for error in client.errors]
    hung = [client.hung for client in clients if client.hung]
    server_errors = [
        line
        for log in logs
        for line in log.read_text(errors="replace").splitlines()
        if " ERROR " in line or line.startswith("Traceback")
    ]

    print(
        f"ws_load sessions={len(clients)} servers={SERVERS} turns={turns} events={received} "
        f"stored={sum(len(log) for log in stored.values())} model_calls={model_calls} "
        f"text_delta_events={kinds['text_delta']}"
    )
    print(f"ws_load connect_s {connected:.2f}")
    print(f"ws_load load_s {elapsed:.2f}")
    print(f"ws_load events_per_s {received / elapsed:.0f}")
    print(f"ws_load turns_per_s {turns / elapsed:.1f}")
    print(f"ws_load delivery_p50_ms {_percentile(delivery_ms, 0.50):.1f}")
    print(f"ws_load delivery_p99_ms {_percentile(delivery_ms, 0.99):.1f}")
    print(f"ws_load delivery_max_ms {max(delivery_ms, default=float('nan')):.1f}")
    print(f"ws_load turn_p50_ms {_percentile(turn_ms, 0.50):.1f}")
    print(f"ws_load turn_p99_ms {_percentile(turn_ms, 0.99):.1f}")
    print(f"ws_load lost {lost}")
    print(f"ws_load duplicated {duplicated}")
    print(f"ws_load out_of_order {out_of_order}")
    print(f"ws_load unstored {unknown}")
    print(f"ws_load failed_turns {len(failed)}")
    print(f"ws_load refused_chats {len(refused)}")
    print(f"ws_load hung_turns {len(hung)}")
    print(f"ws_load server_errors {len(server_errors)}")

    for line in findings[:10]:
        print(f"ws_load finding {line}", file=sys.stderr)
    for client, failure in failed[:10]:
        print(
            f"ws_load failed session {client.session_id} server {client.server}: {failure}",
            file=sys.stderr,
        )
    for client, error in refused[:10]:
        print(
            f"ws_load refused session {client.session_id} server {client.server}: {error}",
            file=sys.stderr,
        )
    for line in server_errors[:20]:
        print(f"ws_load server {line}", file=sys.stderr)
    return hung


def _run(var_dir: Path) -> list[str]:
    from tests.conftest import app_env, manage
    from tests.fakes import FakeAnthropic, Reply

    _create_database()
    _flush_redis()
    with FakeAnthropic(responder=lambda body: Reply(text=REPLY, chunks=DELTAS)) as model:
        env = app_env(
            var_dir,
            DATABASE_URL=DATABASE_URL,
            REDIS_URL=REDIS_URL,
            TOOLHUB_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="bench",
        )
        migrated = manage("migrate", "--noinput", env=env)
        if migrated.returncode != 0:
            raise SystemExit(f"ws_load: migrate failed:\n{migrated.stderr}")
        token, sessions = _setup(var_dir)
        logs = [var_dir / f"daphne-{number}.log" for number in range(SERVERS)]
        with contextlib.ExitStack() as servers:
            ports = [servers.enter_context(_daphne(env, log)) for log in logs]
            clients = [
                _Client(
                    session_id=session_id,
                    server=index % SERVERS,
                    url=f"ws://127.0.0.1:{ports[index % SERVERS]}/ws/sessions/{session_id}/",
                )
                for index, session_id in enumerate(sessions)
            ]
            connected, elapsed = asyncio.run(_load(clients, token))
        # The servers are stopped, so every event that will ever be stored is stored.
        return _report(clients, len(model.requests), connected, elapsed, logs)


def _close_django() -> None:
    if "django.db" in sys.modules:
        from django.db import connections

        connections.close_all()


def main() -> None:
    started = time.perf_counter()
    var_dir = Path(tempfile.mkdtemp(prefix="toolhub-ws-load-"))
    try:
        hung = _run(var_dir)
    finally:
        _close_django()
        with contextlib.suppress(Exception):
            _drop_database()
        with contextlib.suppress(Exception):
            _flush_redis()
        shutil.rmtree(var_dir, ignore_errors=True)
    print(f"ws_load run_s {time.perf_counter() - started:.1f}")
    if hung:
        raise SystemExit(f"ws_load: {len(hung)} turns never ended; first: {hung[0]}")


if __name__ == "__main__":
    main()
