"""Through a real daphne (started as ``bin/run`` starts it): inline tools cannot stall the
server, since pathological inputs to ``calculate`` and ``grep`` sent by a model end at once
while ``/healthz`` keeps answering; and oversized or broken frames get a clear answer.

The demo model turns "use <tool>: <text>" into that tool call, so these are the calls a
scripted model would make. Each result carries the server's own ``elapsed_ms``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import app_env, daphne
from tests.products import seeded_var_dir

pytestmark = pytest.mark.processes

# What used to take seconds of one interpreter lock: a power computed before its size
# was checked, and a backtracking pattern on a short line.
HUGE_POWER = "(9**999)**9999"
HUGE_ROUND = "round(5, -10**9)"
BACKTRACKING = "(a+)+$"
BACKREFERENCE = r"(a)\1"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    var_dir = tmp_path_factory.mktemp("inline")
    env = app_env(var_dir, TOOLHUB_SEMANTIC_SEARCH="0")
    token = seeded_var_dir(var_dir).token
    with daphne(env) as base:
        yield base, token, var_dir


async def _call(server, text: str, workspace_file: str = "") -> tuple[dict, list[int]]:
    """Ask the demo model to make one call; returns its result and every /healthz status
    seen while the turn ran."""
    base, token, var_dir = server
    headers = {"Authorization": f"Token {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as client:
        session = (await client.post("/api/sessions/", json={})).json()["id"]
        if workspace_file:
            workspace = Path(var_dir) / "workspaces" / session
            workspace.mkdir(parents=True, exist_ok=True)
            (workspace / "line.txt").write_text(workspace_file)
        statuses: list[int] = []
        done = asyncio.Event()

        async def probe() -> None:
            while not done.is_set():
                statuses.append((await client.get("/healthz")).status_code)
                await asyncio.sleep(0.02)

        url = base.replace("http://", "ws://") + f"/ws/sessions/{session}/"
        async with connect(url, additional_headers=headers) as socket:
            prober = asyncio.create_task(probe())
            await socket.send(json.dumps({"type": "chat", "text": text}))
            result = None
            while True:
                frame = json.loads(await asyncio.wait_for(socket.recv(), 30))
                if frame.get("kind") == "tool_result":
                    result = frame["data"]
                if frame.get("kind") in ("turn_finished", "turn_failed"):
                    break
            done.set()
            await prober
    assert result is not None
    return result, statuses


@pytest.mark.parametrize(
    ("expression", "reason"),
    [(HUGE_POWER, "result too large"), (HUGE_ROUND, "round to at most 1000 digits")],
    ids=["power", "round"],
)
async def test_a_calculation_too_big_to_compute_is_refused_at_once(server, expression, reason):
    result, statuses = await _call(server, f"use calculate: {expression}")

    assert (result["name"], result["status"]) == ("calculate", "error")
    assert reason in result["content"]
    assert result["elapsed_ms"] < 1000
    assert statuses
    assert set(statuses) == {200}


async def test_a_backtracking_pattern_searches_in_linear_time(server):
    result, statuses = await _call(
        server, f"use grep: {BACKTRACKING}", workspace_file="a" * 64 + "!\n"
    )

    assert (result["name"], result["status"]) == ("grep", "ok")
    assert result["content"] == f"no matches for {BACKTRACKING}"
    assert result["elapsed_ms"] < 1000
    assert statuses
    assert set(statuses) == {200}


async def test_a_pattern_outside_linear_time_regex_is_refused_with_the_reason(server):
    result, _ = await _call(server, f"use grep: {BACKREFERENCE}", workspace_file="aa\n")

    assert (result["name"], result["status"]) == ("grep", "error")
    assert "RE2 syntax, without backreferences or lookaround" in result["content"]


async def _socket(server):
    base, token, _ = server
    headers = {"Authorization": f"Token {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as client:
        session = (await client.post("/api/sessions/", json={})).json()["id"]
    url = base.replace("http://", "ws://") + f"/ws/sessions/{session}/"
    return connect(url, additional_headers=headers, max_size=None)


async def test_a_frame_far_over_the_apps_limit_gets_too_large_on_an_open_socket(server):
    async with await _socket(server) as socket:
        await socket.send(json.dumps({"type": "chat", "text": "x" * 2_000_000}))
        refused = json.loads(await asyncio.wait_for(socket.recv(), 30))
        await socket.send(json.dumps({"type": "cancel"}))
        after = json.loads(await asyncio.wait_for(socket.recv(), 30))

    assert (refused["type"], refused["code"]) == ("error", "too_large")
    assert after["code"] == "no_turn"


async def test_a_message_over_the_transport_cap_is_closed_with_1009(server):
    from toolhub.serve import TRANSPORT_CAP_BYTES

    async with await _socket(server) as socket:
        await socket.send("x" * (TRANSPORT_CAP_BYTES + 1))
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), 30)

    assert closed.value.rcvd.code == 1009


async def test_a_text_frame_that_is_not_utf8_is_closed_with_1007(server):
    async with await _socket(server) as socket:
        await socket.send(b'{"type": "chat", "text": "\xff\xfe"}', text=True)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), 30)

    assert closed.value.rcvd.code == 1007
