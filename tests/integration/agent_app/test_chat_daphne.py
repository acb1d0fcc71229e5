"""Chat over real sockets: two daphne processes sharing PostgreSQL and the Redis channel
layer, a websocket client, and the fake Messages API.

What a person would notice across processes: a dropped socket does not stop the turn and
a socket on the other server resumes it without a gap or a duplicate; one turn per session
holds across servers; a cancel sent to either server stops the turn.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import httpx
import pytest
from channels_redis.core import RedisChannelLayer
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import app_env, daphne, started_together
from tests.fakes import FakeAnthropic, Reply
from tests.products import seeded_database
from tests.workers import redis_db

pytestmark = [pytest.mark.services, pytest.mark.processes]
# The servers' logs, quoted when a socket closes unexpectedly.
_LOGS: list[str] = []


@pytest.fixture(scope="module")
def stack(tmp_path_factory, postgres_url, redis_url):
    with (
        seeded_database(postgres_url, "toolhub_ws") as (database, seed),
        FakeAnthropic() as model,
    ):
        env = app_env(
            tmp_path_factory.mktemp("stack"),
            DATABASE_URL=database,
            REDIS_URL=redis_db(redis_url, 1),
            TOOLHUB_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="test-key",
        )
        token = seed.token
        logs = [env["TOOLHUB_VAR_DIR"] + f"/daphne-{n}.log" for n in (1, 2)]
        with started_together(daphne(env, log=Path(logs[0])), daphne(env, log=Path(logs[1]))) as (
            first,
            second,
        ):
            _LOGS[:] = logs
            yield first, second, token, model


async def _new_session(base: str, token: str) -> str:
    # A server's first request may wait on its start (the provider SDK's import): on a
    # loaded runner that took more than httpx's default 5 s once.
    headers = {"Authorization": f"Token {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as client:
        return (await client.post(f"{base}/api/sessions/", json={})).json()["id"]


def _ws(base: str, session_id: str, token: str):
    url = base.replace("http://", "ws://") + f"/ws/sessions/{session_id}/"
    return connect(url, additional_headers={"Authorization": f"Token {token}"})


async def _until(socket, kinds: tuple[str, ...]) -> list[dict]:
    frames = []
    while True:
        try:
            frame = json.loads(await asyncio.wait_for(socket.recv(), 20))
        except ConnectionClosed as exc:
            said = "\n".join(_tail(log) for log in _LOGS)
            raise AssertionError(f"socket closed: {exc}\nservers said:\n{said}") from None
        frames.append(frame)
        if frame["type"] == "event" and frame["kind"] in kinds:
            return frames


def _tail(log: str) -> str:
    return Path(log).read_text()[-3000:]


def _seqs(frames: list[dict]) -> list[int]:
    return [frame["seq"] for frame in frames if frame["type"] == "event"]


async def test_a_turn_survives_its_socket_and_resumes_on_another_server(stack):
    first, second, token, model = stack
    session = await _new_session(first, token)
    model.replies.append(Reply(text=" ".join(f"word{n}" for n in range(40)), delay=0.03))

    async with _ws(first, session, token) as socket:
        await socket.send(json.dumps({"type": "chat", "text": "tell me a long story"}))
        seen = await _until(socket, ("text_delta",))
    async with _ws(second, session, token) as socket:
        await socket.send(json.dumps({"type": "resume", "after_seq": _seqs(seen)[-1]}))
        rest = await _until(socket, ("turn_finished",))

    seqs = _seqs(seen + rest)
    assert seqs == list(range(1, seqs[-1] + 1))
    text = "".join(f["data"]["text"] for f in seen + rest if f.get("kind") == "text_delta")
    assert text == " ".join(f"word{n}" for n in range(40))
    async with httpx.AsyncClient(headers={"Authorization": f"Token {token}"}) as client:
        log = (await client.get(f"{second}/api/sessions/{session}/events/")).json()
    assert [event["seq"] for event in log["events"]] == seqs


async def test_one_turn_per_session_and_cancel_hold_across_servers(stack):
    first, second, token, model = stack
    session = await _new_session(first, token)
    hold = threading.Event()
    model.replies.append(Reply(text="never finished", hold=hold))
    try:
        async with _ws(first, session, token) as talker, _ws(second, session, token) as other:
            await other.send(json.dumps({"type": "resume", "after_seq": 0}))
            await talker.send(json.dumps({"type": "chat", "text": "go"}))
            await _until(other, ("text_delta",))

            await other.send(json.dumps({"type": "chat", "text": "me too"}))
            refused = json.loads(await asyncio.wait_for(other.recv(), 20))
            await other.send(json.dumps({"type": "cancel"}))
            on_other = await _until(other, ("turn_finished",))
            on_talker = await _until(talker, ("turn_finished",))
    finally:
        hold.set()

    assert (refused["type"], refused["code"]) == ("error", "turn_in_progress")
    assert on_other[-1]["data"]["reason"] == "cancelled"
    assert on_talker[-1]["seq"] == on_other[-1]["seq"]
    assert model.wait_for_disconnects(1) >= 1


async def test_an_idle_socket_stays_open_past_the_channel_layers_blocking_read(stack):
    first, _, token, _ = stack
    session = await _new_session(first, token)
    async with _ws(first, session, token) as socket:
        await socket.send(json.dumps({"type": "resume", "after_seq": 0}))
        # channels-redis blocks 5 s per read (RedisChannelLayer.brpop_timeout): a Redis
        # socket timeout no longer than that killed the socket at the first read's end,
        # so the socket must outlive one whole read.
        await asyncio.sleep(RedisChannelLayer.brpop_timeout + 1.5)
        await socket.send(json.dumps({"type": "cancel"}))
        answer = json.loads(await asyncio.wait_for(socket.recv(), 20))

    assert (answer["type"], answer["code"]) == ("error", "no_turn")
