"""MCP connections in the real processes: a daphne server and a Celery worker connect the
configured servers as they start, and a server added through the API reaches the process
that saved it at once and the others within their poll interval.
"""

from __future__ import annotations

import re
import sys
import time

import httpx
import pytest

from tests.conftest import app_env, celery_worker, daphne, manage
from tests.mcp import SERVER

pytestmark = pytest.mark.services

SETUP = """
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from agent_app.models import McpServer
user = get_user_model().objects.create_user("ops", password="x", is_staff=True)
print("token", Token.objects.create(user=user).key)
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
        REDIS_URL=f"{redis_url.rsplit('/', 1)[0]}/6",
        TOOLHUB_MCP_CONNECT="1",
        TOOLHUB_MCP_POLL="0.5",
    )
    assert manage("migrate", "--noinput", env=env).returncode == 0
    made = manage("shell", "-c", SETUP.format(python=sys.executable, server=str(SERVER)), env=env)
    assert made.returncode == 0, made.stderr
    token = re.search(r"token (\w+)", made.stdout).group(1)
    worker_log = tmp_path / "worker.log"

    with daphne(env, log=tmp_path / "daphne.log") as base, celery_worker(env, log=worker_log):
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
