"""MCP annotations in the product: plan mode offers only what a server marks read-only,
a tool it marks destructive asks the person before it runs, and staff can turn that
approval off per server (the API, the admin).

The server is real (tests/mcp/server.py with ``--annotated``, over stdio); the turns run
through the session socket against the fake Messages API, as in test_mcp_servers.
"""

from __future__ import annotations

import os
import re

import pytest
from channels.db import database_sync_to_async

from agent_app import mcp
from agent_app.models import McpServer
from tests.fakes import Reply
from tests.integration.chat import events, open_socket, send, until
from tests.mcp import SERVER, wait_for
from toolhub.tools import ToolContext, registry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def annotated_server(registry_state, staff, tmp_path):
    """``demo`` with annotated tools (look: read-only, wipe: destructive, append:
    additive, tidy: hints left to their defaults), connected here; calls are counted."""
    counter = tmp_path / "calls.txt"
    intervals = (mcp.manager.health_interval, mcp.manager.backoff_initial)
    mcp.manager.health_interval, mcp.manager.backoff_initial = 0.2, 0.1
    server = McpServer.objects.create(
        name="demo",
        transport="stdio",
        command=os.sys.executable,
        args=[str(SERVER), "--annotated", "--counter", str(counter)],
        created_by=staff,
    )
    mcp.mcp_sync(wait=10)
    wait_for(lambda: registry.get("demo__wipe") is not None, what="the demo server to connect")
    server.counter = counter
    yield server
    McpServer.objects.all().delete()
    mcp.mcp_sync(wait=10)
    mcp.manager.health_interval, mcp.manager.backoff_initial = intervals


def calls(server) -> list[str]:
    return server.counter.read_text().split() if server.counter.exists() else []


def asks(name: str) -> bool:
    return registry.get(name).needs_approval({}, ToolContext(env={}))


@database_sync_to_async
def new_session(user, **fields):
    from sessions_app.services import session_create

    return session_create(user=user, **fields)


def load_then_call(model, name: str, arguments: dict | None = None) -> None:
    """Script the model: load ``name`` with tool_search, call it (as t2), then answer."""
    model.replies.extend(
        [
            Reply(tool_calls=[("t1", "tool_search", {"query": f"select:{name}"})]),
            Reply(tool_calls=[("t2", "call_tool", {"name": name, "arguments": arguments or {}})]),
            Reply(text="Done."),
        ]
    )


@pytest.mark.processes
def test_the_inspector_in_plan_mode_offers_the_read_only_tool_and_says_why_not_the_rest(
    owner, api, annotated_server
):
    from sessions_app.services import session_create

    planning = session_create(user=owner, plan_mode=True)
    working = session_create(user=owner)

    inspected = api(owner).get(f"/api/sessions/{planning.pk}/toolset/").json()
    normal = api(owner).get(f"/api/sessions/{working.pk}/toolset/").json()

    offered = [tool["name"] for tool in inspected["catalog"] + inspected["resident"]]
    assert [name for name in offered if name.startswith("demo__")] == ["demo__look"]
    hidden = {item["name"]: item for item in inspected["hidden"]}
    assert hidden["demo__wipe"]["layer"] == "L3"
    assert hidden["demo__wipe"]["reason"] == "hidden in plan mode: the server marks it destructive"
    assert hidden["demo__echo"]["reason"] == (
        "hidden in plan mode: the server does not mark it read-only (it has no annotations)"
    )
    assert "does not mark it read-only" in hidden["demo__append"]["reason"]
    assert "by MCP's defaults that makes it destructive" in hidden["demo__tidy"]["reason"]
    catalog = [tool["name"] for tool in normal["catalog"]]
    assert {"demo__look", "demo__wipe", "demo__append", "demo__echo"} <= set(catalog)


@pytest.mark.processes
async def test_in_plan_mode_a_turn_runs_the_read_only_tool_and_cannot_reach_a_destructive_one(
    owner, model, annotated_server
):
    model.replies.extend(
        [
            Reply(tool_calls=[("t1", "tool_search", {"query": "select:demo__look"})]),
            Reply(
                tool_calls=[
                    ("t2", "call_tool", {"name": "demo__look", "arguments": {"key": "k"}}),
                    ("t3", "call_tool", {"name": "demo__wipe", "arguments": {}}),
                ]
            ),
            Reply(text="Looked, did not wipe."),
        ]
    )
    session = await new_session(owner, plan_mode=True)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "plan a cleanup"})

    frames = await until(socket, timeout=30)

    _search, looked, wiped = (frame["data"] for frame in events(frames, "tool_result"))
    assert (looked["status"], looked["content"]) == ("ok", "value of k")
    # The model is told why, so it can tell the person (not "no such tool").
    assert wiped["status"] == "vetoed"
    assert wiped["content"].startswith("demo__wipe is hidden in plan mode: the server ")
    assert wiped["reason"].startswith("not allowed here: hidden in plan mode: the server ")
    assert not events(frames, "approval_request")
    assert calls(annotated_server) == ["look"]
    await socket.disconnect()


@pytest.mark.parametrize(
    ("allow", "status", "ran"),
    [(True, "ok", ["wipe"]), (False, "denied", [])],
    ids=["allow", "deny"],
)
@pytest.mark.processes
async def test_a_destructive_mcp_tool_waits_for_the_persons_approval(
    owner, model, annotated_server, allow, status, ran
):
    load_then_call(model, "demo__wipe")
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "wipe the store"})

    asked = events(await until(socket, ("approval_request",), timeout=30), "approval_request")
    assert asked[0]["data"]["call_id"] == "t2"
    assert asked[0]["data"]["name"] == "demo__wipe"
    assert calls(annotated_server) == []  # nothing reached the server while it waits
    await send(socket, {"type": "approve", "call_id": "t2", "allow": allow})
    frames = await until(socket, timeout=30)

    result = events(frames, "tool_result")[-1]["data"]
    assert result["status"] == status
    assert calls(annotated_server) == ran
    await socket.disconnect()


@pytest.mark.processes
async def test_read_only_and_additive_mcp_tools_run_without_asking(owner, model, annotated_server):
    model.replies.extend(
        [
            Reply(tool_calls=[("t1", "tool_search", {"query": "select:demo__look,demo__append"})]),
            Reply(
                tool_calls=[
                    ("t2", "call_tool", {"name": "demo__look", "arguments": {"key": "k"}}),
                    ("t3", "call_tool", {"name": "demo__append", "arguments": {"value": "v"}}),
                ]
            ),
            Reply(text="Done."),
        ]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "look and append"})

    frames = await until(socket, timeout=30)

    assert not events(frames, "approval_request")
    assert [frame["data"]["status"] for frame in events(frames, "tool_result")][1:] == ["ok", "ok"]
    assert calls(annotated_server) == ["look", "append"]
    await socket.disconnect()


@pytest.mark.processes
async def test_with_the_servers_approval_turned_off_a_destructive_tool_runs_without_asking(
    owner, staff, api, model, annotated_server
):
    client = await database_sync_to_async(api)(staff)
    changed = await database_sync_to_async(
        lambda: client.patch(
            f"/api/mcp-servers/{annotated_server.pk}/",
            {"approve_destructive": False},
            format="json",
        )
    )()
    assert changed.status_code == 200, changed.content
    assert changed.json()["approve_destructive"] is False
    await database_sync_to_async(mcp.mcp_sync)(wait=10)
    await database_sync_to_async(wait_for)(
        lambda: registry.get("demo__wipe") is not None and not asks("demo__wipe"),
        what="the tool to be registered without approval",
    )
    load_then_call(model, "demo__wipe")
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "wipe the store"})

    frames = await until(socket, timeout=30)

    assert not events(frames, "approval_request")
    assert events(frames, "tool_result")[-1]["data"]["status"] == "ok"
    assert calls(annotated_server) == ["wipe"]
    # Still hidden in plan mode: the switch is about asking, not about what it does.
    assert "plan" in registry.get("demo__wipe").unsafe_in
    await socket.disconnect()


def test_the_approval_switch_is_read_and_written_by_the_api_and_defaults_to_asking(staff, api):
    body = {"name": "quiet", "transport": "stdio", "command": "true", "enabled": False}

    created = api(staff).post("/api/mcp-servers/", body, format="json")
    quiet = api(staff).post(
        "/api/mcp-servers/",
        {**body, "name": "quieter", "approve_destructive": False},
        format="json",
    )
    refused = api(staff).patch(
        f"/api/mcp-servers/{created.json()['id']}/",
        {"approve_destructive": "sometimes"},
        format="json",
    )

    assert created.status_code == 201, created.content
    assert created.json()["approve_destructive"] is True
    assert quiet.json()["approve_destructive"] is False
    assert refused.status_code == 400
    listed = {item["name"]: item for item in api(staff).get("/api/mcp-servers/").json()}
    assert listed["quiet"]["approve_destructive"] is True
    assert listed["quieter"]["approve_destructive"] is False
    assert mcp.mcp_config(McpServer.objects.get(name="quieter")).approve_destructive is False


def test_the_admin_turns_a_servers_approval_off_and_on(admin_client):
    server = McpServer.objects.create(name="kept", transport="stdio", command="true", enabled=False)
    fields = {
        "name": "kept",
        "transport": "stdio",
        "command": "true",
        "args": "[]",
        "url": "",
        "timeout": "30",
        "timeout_ceiling": "600",
        "allowlist": "null",
        "env_update": "",
        "headers_update": "",
    }
    page = admin_client.get(f"/admin/agent_app/mcpserver/{server.pk}/change/").content.decode()
    assert 'name="approve_destructive"' in page

    # An unticked box is absent from the form: approval off.
    off = admin_client.post(f"/admin/agent_app/mcpserver/{server.pk}/change/", fields)
    server.refresh_from_db()
    assert off.status_code == 302, off.content.decode()[:2000]
    assert server.approve_destructive is False
    on = admin_client.post(
        f"/admin/agent_app/mcpserver/{server.pk}/change/", {**fields, "approve_destructive": "on"}
    )
    server.refresh_from_db()
    assert on.status_code == 302
    assert server.approve_destructive is True


@pytest.mark.processes
def test_the_catalog_shows_what_each_tools_annotations_say_it_does(owner, api, annotated_server):
    from django.test import Client

    catalog = {tool["name"]: tool for tool in api(owner).get("/api/tools/").json()}
    browser = Client()
    browser.force_login(owner)
    page = browser.get("/programs/").content.decode()

    assert {name: catalog[f"demo__{name}"]["effect"] for name in ("look", "wipe", "append")} == {
        "look": "read-only",
        "wipe": "destructive",
        "append": "additive",
    }
    assert catalog["demo__tidy"]["effect"] == "destructive"  # the spec's defaults
    assert catalog["demo__tidy"]["label"] == "Tidy"  # the annotations' title
    assert catalog["demo__echo"]["effect"] == "unknown"  # no annotations at all
    assert catalog["web_fetch"]["effect"] is None  # not an MCP tool
    rows = {
        name: re.search(rf'<tr id="[a-z]+-demo__{name}">(.*?)</tr>', page, re.S).group(1)
        for name in ("look", "wipe", "append", "echo")
    }
    assert ">read-only</span>" in rows["look"]
    assert ">destructive</span>" in rows["wipe"]
    assert ">changes, never destroys</span>" in rows["append"]
    assert ">no hints</span>" in rows["echo"]
