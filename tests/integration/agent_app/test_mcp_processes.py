"""MCP connections in the real processes: a daphne server and a Celery worker connect the
configured servers as they start, and a server added through the API reaches the process
that saved it at once and the others within their poll interval.
"""

from __future__ import annotations

import sys
import time

import httpx
import pytest

from tests.conftest import app_env, celery_worker, daphne, manage, started_together
from tests.mcp import SERVER
from tests.products import seeded_var_dir
from tests.workers import redis_db

pytestmark = [pytest.mark.services, pytest.mark.processes]

SETUP = """
from agent_app.models import McpServer
McpServer.objects.create(name="first", transport="stdio", command={python!r}, args=[{server!r}])
"""


def _tools(base: str, token: str) -> list[str]:
    response = httpx.get(f"{base}/api/tools/", headers={"Authorization": f"Token {token}"})
    assert response.status_code == 200, response.text
    return [tool["name"] for tool in response.json()]


def _eventually(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return value


def test_web_and_worker_processes_connect_on_start_and_follow_new_servers(tmp_path, redis_url):
    env = app_env(
        tmp_path,
        REDIS_URL=redis_db(redis_url, 2),
        TOOLHUB_MCP_CONNECT="1",
        TOOLHUB_MCP_POLL="0.5",
    )
    token = seeded_var_dir(tmp_path).token  # the demo account, staff
    made = manage("shell", "-c", SETUP.format(python=sys.executable, server=str(SERVER)), env=env)
    assert made.returncode == 0, made.stderr
    worker_log = tmp_path / "worker.log"

    with started_together(
        daphne(env, log=tmp_path / "daphne.log"), celery_worker(env, log=worker_log)
    ) as (base, _):
        _eventually(lambda: "first__echo" in _tools(base, token))
        _eventually(lambda: "MCP server first connected: 12 tools" in worker_log.read_text())

        added = httpx.post(
            f"{base}/api/mcp-servers/",
            headers={"Authorization": f"Token {token}"},
            json={
                "name": "second",
                "transport": "stdio",
                "command": sys.executable,
                "args": [str(SERVER), "--tools", "3"],
                "allowlist": ["echo", "noop_001"],
            },
        )
        assert added.status_code == 201, added.text
        names = _eventually(lambda: [n for n in _tools(base, token) if n.startswith("second__")])
        assert names == ["second__echo", "second__noop_001"]
        _eventually(lambda: "MCP server second connected: 2 tools" in worker_log.read_text())
