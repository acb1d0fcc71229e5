"""A worker tool's live output, from the line it prints to the frame on a browser's socket.

Recreates the database ``toolhub_bench_tail`` on the PostgreSQL at BENCH_TAIL_DATABASE_URL
(default postgres://postgres@127.0.0.1:5432/toolhub_bench_tail) and flushes the Redis
database at BENCH_TAIL_REDIS_URL (default redis://127.0.0.1:6379/6). One daphne serves the
app, one real Celery worker (one process) serves the tools queue, and the fake Anthropic
Messages API (tests.fakes) makes every turn call ``chatter``, a worker tool that prints
10,000 lines as fast as it can, each stamped with the time it was printed. A websocket
client runs the turns and reads the ``tail`` frames.

Prints: latency from a line being printed to the frame carrying it reaching the client
(for each frame, its newest line; p50 and p99); from one more call printing 300,000 lines
(long enough to have a rate), its tail frames per second (the design allows ten) and the
smallest gap between two of its frames as they arrived; and the growth of the worker
process's resident memory over all of it (after one warm-up turn). Everything it started
is stopped, the database dropped and the Redis index flushed at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATABASE_URL = os.environ.get(
    "BENCH_TAIL_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolhub_bench_tail"
)
REDIS_URL = os.environ.get("BENCH_TAIL_REDIS_URL", "redis://127.0.0.1:6379/6")
LINES = 10_000
LONG_LINES = 300_000
TURNS = 5
TOOL_MODULE = "tests.integration.worker_tools"


def _responder(body: dict):
    from tests.fakes import Reply

    last = body["messages"][-1]["content"]
    if any(block.get("type") == "tool_result" for block in last):
        return Reply(text="done")
    said = str(last[-1].get("text", "")).split()
    if not said or not said[-1].isdigit():
        # Anything else the product asks the model (a new chat's title): plain text.
        return Reply(text="Chatter")
    lines = int(said[-1])
    return Reply(tool_calls=[(f"toolu_{uuid.uuid4().hex[:12]}", "chatter", {"lines": lines})])


def _setup(var_dir: Path) -> tuple[str, str]:
    os.environ.update(
        DATABASE_URL=DATABASE_URL,
        REDIS_URL=REDIS_URL,
        DEBUG="1",
        TOOLHUB_VAR_DIR=str(var_dir),
        TOOLHUB_TOOL_MODULES=TOOL_MODULE,
        DJANGO_SETTINGS_MODULE="toolhub.settings",
    )
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from sessions_app.services import session_create

    user = get_user_model().objects.create_user(username="bench")
    return Token.objects.create(user=user).key, str(session_create(user=user).pk)


async def _turn(url: str, token: str, lines: int = LINES) -> tuple[list[float], list[float]]:
    """One turn; returns each tail frame's newest-line latency and the gaps between
    frames (ms)."""
    from websockets.asyncio.client import connect

    latencies = []
    arrivals = []
    async with connect(url, additional_headers={"Authorization": f"Token {token}"}) as socket:
        await socket.send(json.dumps({"type": "chat", "text": f"print {lines}"}))
        while True:
            frame = json.loads(await asyncio.wait_for(socket.recv(), 120))
            received = time.time()
            if frame["type"] == "tail":
                arrivals.append(received)
                newest = frame["tail"].rstrip("\n").rsplit("\n", 1)[-1].split()
                latencies.append((received - float(newest[2])) * 1000)
            elif frame["type"] == "event" and frame["kind"] in ("turn_finished", "turn_failed"):
                if frame["kind"] == "turn_failed":
                    raise SystemExit(f"tail_stream: turn failed: {frame['data']}")
                break
    gaps = [(later - earlier) * 1000 for earlier, later in itertools.pairwise(arrivals)]
    return latencies, gaps


def _worker_pid() -> int:
    from agent_app.models import ToolRun

    run = ToolRun.objects.order_by("-created").first()
    return int(run.worker.rsplit(":", 1)[1])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"tail_stream: no VmRSS for process {pid}")


def _run(var_dir: Path) -> None:
    from _django import flush_redis, recreate_database

    from tests.conftest import app_env, celery_worker, daphne, manage
    from tests.fakes import FakeAnthropic

    recreate_database(DATABASE_URL)
    flush_redis(REDIS_URL)
    with FakeAnthropic(responder=_responder) as model:
        env = app_env(
            var_dir,
            DATABASE_URL=DATABASE_URL,
            REDIS_URL=REDIS_URL,
            TOOLHUB_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="bench",
            TOOLHUB_TOOL_MODULES=TOOL_MODULE,
            TOOLHUB_SEMANTIC_SEARCH="0",
        )
        migrated = manage("migrate", "--noinput", env=env)
        if migrated.returncode != 0:
            raise SystemExit(f"tail_stream: migrate failed:\n{migrated.stderr}")
        token, session_id = _setup(var_dir)
        with (
            celery_worker(env, log=var_dir / "worker.log"),
            daphne(env, log=var_dir / "daphne.log") as base,
        ):
            url = base.replace("http://", "ws://") + f"/ws/sessions/{session_id}/"
            asyncio.run(_turn(url, token))
            pid = _worker_pid()
            before = _rss_mib(pid)
            latencies: list[float] = []
            for _ in range(TURNS):
                turn_latencies, _ = asyncio.run(_turn(url, token))
                latencies += turn_latencies
            # The rate needs a call that streams for seconds.
            _, long_gaps = asyncio.run(_turn(url, token, LONG_LINES))
            growth = _rss_mib(pid) - before
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)]
    print(
        f"tail_stream lines={LINES} turns={TURNS} frames={len(latencies)} "
        f"line_to_socket_p50={p50:.1f}ms p99={p99:.1f}ms "
        f"worker_rss_growth={growth:.1f}MB"
    )
    print(
        f"tail_stream long call lines={LONG_LINES} frames={len(long_gaps) + 1} "
        f"frames_per_s={len(long_gaps) / (sum(long_gaps) / 1000):.1f} "
        f"min_gap={min(long_gaps):.0f}ms"
    )


def main() -> None:
    from _django import drop_database, flush_redis

    var_dir = Path(tempfile.mkdtemp(prefix="toolhub-tail-"))
    try:
        _run(var_dir)
    finally:
        if "django.db" in sys.modules:
            from django.db import connections

            connections.close_all()
        with contextlib.suppress(Exception):
            drop_database(DATABASE_URL)
        with contextlib.suppress(Exception):
            flush_redis(REDIS_URL)
        shutil.rmtree(var_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
