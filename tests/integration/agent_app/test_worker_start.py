"""A worker's first start as deployed: two prefork children, MCP servers connected in
each, on PostgreSQL through the pool and Redis. Each child must start on database
connections of its own (a pool inherited through the fork has no threads left), so its log
is clean and the first worker tool it is given runs."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time

import pytest
from channels.db import database_sync_to_async

from tests.conftest import celery_worker
from tests.fakes import Reply
from tests.integration.chat import events, open_socket, send, until
from tests.integration.worker_env import worker_env
from tests.mcp import SERVER

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services, pytest.mark.processes]

# What the worker's children logged when they used the pool their parent made.
BROKEN = ("PoolClosed", "couldn't get a connection", "ERROR/", "Traceback")


@database_sync_to_async
def _mcp_server(staff):
    from agent_app.models import McpServer

    return McpServer.objects.create(
        name="demo", transport="stdio", command=sys.executable, args=[str(SERVER)], created_by=staff
    )


@database_sync_to_async
def _session(owner):
    from sessions_app.services import session_create

    return session_create(user=owner)


async def test_a_deployed_workers_children_start_clean_and_run_the_first_tool(
    owner, staff, model, registry_state, tmp_path
):
    from tests.integration import worker_tools

    for tool in worker_tools.TOOLS:
        if tool.name not in registry_state:
            registry_state.register(tool)
    await _mcp_server(staff)
    var_dir, env = worker_env(TOOLHUB_MCP_CONNECT="1")
    log = var_dir / "worker.log"
    tally = tmp_path / "tally"
    try:
        with celery_worker(env, log=log, as_deployed=True):
            deadline = time.monotonic() + 60
            while log.read_text().count("MCP server demo connected") < 2:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                await asyncio.sleep(0.2)
            model.replies.extend(
                [Reply(tool_calls=[("toolu_1", "tally", {"path": str(tally)})]), Reply(text="ok")]
            )
            socket = await open_socket((await _session(owner)).pk, owner)
            await send(socket, {"type": "chat", "text": "go"})
            frames = await until(socket, timeout=60)
            await socket.disconnect()
            # Read before the stop: its SIGTERM reaches the children with the main process,
            # which may log them ending by it, and that is not how they started.
            written = log.read_text()
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)

    result = events(frames, "tool_result")[0]["data"]
    assert (result["status"], result["content"]) == ("ok", "tallied")
    assert tally.read_text() == "ran\n"
    assert [line for line in written.splitlines() if any(bad in line for bad in BROKEN)] == []
