"""Scaling out on one machine: two daphne servers and two Celery workers on one PostgreSQL
and one Redis, as the compose file runs N web and M worker containers.

What a person would notice: a chat started on one server streams live to a socket on the
other, every turn ends whole whichever server took it, and worker tools called at the same
time run side by side on both workers, each once.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from tests.conftest import app_env, celery_worker, daphne, started_together
from tests.fakes import FakeAnthropic, Reply
from tests.products import seeded_database
from tests.workers import redis_db

pytestmark = [pytest.mark.services, pytest.mark.processes]

SESSIONS = 8


def _model_answer(body: dict) -> Reply:
    """Each chat's first call asks for ``whoami``; once its result is in, the answer."""
    last = body["messages"][-1]["content"]
    results = [
        block for block in last if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    if results:
        return Reply(text="done")
    return Reply(tool_calls=[(f"toolu_{uuid.uuid4().hex[:12]}", "whoami", {"seconds": 1})])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, postgres_url, redis_url):
    with (
        seeded_database(postgres_url, "toolhub_scale") as (database, seed),
        FakeAnthropic(responder=_model_answer) as model,
    ):
        var = tmp_path_factory.mktemp("cluster")
        env = app_env(
            var,
            DATABASE_URL=database,
            REDIS_URL=redis_db(redis_url, 2),
            TOOLHUB_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="test-key",
            TOOLHUB_TOOL_MODULES="tests.integration.worker_tools",
            TOOLHUB_SEMANTIC_SEARCH="0",
        )
        token = seed.token
        with started_together(
            celery_worker(env, log=var / "worker-1.log"),
            celery_worker(env, log=var / "worker-2.log"),
            daphne(env, log=var / "daphne-1.log"),
            daphne(env, log=var / "daphne-2.log"),
        ) as (worker_1, worker_2, first, second):
            yield (first, second), (worker_1, worker_2), token, var


def _said(var: Path) -> str:
    return "\n".join(path.read_text()[-6000:] for path in sorted(var.glob("*.log")))


def _ws(base: str, session_id: str, token: str):
    url = base.replace("http://", "ws://") + f"/ws/sessions/{session_id}/"
    return connect(url, additional_headers={"Authorization": f"Token {token}"})


async def _chat(servers: tuple[str, str], index: int, token: str, var: Path) -> list[dict]:
    """A session made on one server, its turn sent and followed on a socket to the other."""
    try:
        return await _chat_followed(servers, index, token, var)
    except (OSError, WebSocketException) as exc:
        # What the servers and workers logged is the diagnosis (a refused or reset socket).
        raise AssertionError(f"chat {index} failed: {exc!r}; they said:\n{_said(var)}") from exc


async def _chat_followed(servers: tuple[str, str], index: int, token: str, var: Path) -> list[dict]:
    made_on, watched_on = servers[index % 2], servers[(index + 1) % 2]
    headers = {"Authorization": f"Token {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as client:
        session = (await client.post(f"{made_on}/api/sessions/", json={})).json()["id"]
    frames = []
    async with _ws(watched_on, session, token) as socket:
        await socket.send(json.dumps({"type": "chat", "text": f"who are you {index}"}))
        while True:
            try:
                frame = json.loads(await asyncio.wait_for(socket.recv(), 60))
            except TimeoutError:
                raise AssertionError(f"chat {index} stalled; they said:\n{_said(var)}") from None
            frames.append(frame)
            if frame["type"] == "event" and frame["kind"] == "turn_finished":
                return frames


async def test_chats_and_worker_tools_spread_over_two_servers_and_two_workers(cluster):
    servers, workers, token, var = cluster

    chats = await asyncio.gather(*(_chat(servers, n, token, var) for n in range(SESSIONS)))

    results = [
        frame["data"]
        for frames in chats
        for frame in frames
        if frame["type"] == "event" and frame["kind"] == "tool_result"
    ]
    assert [result["status"] for result in results] == ["ok"] * SESSIONS
    ran_on = {result["content"] for result in results}
    # Two worker processes (one child each) ran them: calls at once are shared out.
    assert len(ran_on) == 2, ran_on
    for frames in chats:
        seqs = [frame["seq"] for frame in frames if frame["type"] == "event"]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert frames[-1]["data"]["reason"] == "end_turn"
    assert all(worker.poll() is None for worker in workers)
