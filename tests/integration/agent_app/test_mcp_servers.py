"""MCP servers in the product: rows staff configure, the process's connections, turns that
find and call MCP tools, what pages and the API show, and what they never show (secrets).

The servers are real (tests/mcp/server.py, the SDK's MCPServer) over stdio; the turns run
through the session socket against the fake Messages API, as in test_chat_turns.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal

import pytest
from channels.db import database_sync_to_async

from agent_app import mcp
from agent_app.models import McpServer
from tests.fakes import Reply
from tests.integration.chat import events, open_socket, send, until
from tests.mcp import SERVER, free_port, http_server, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "sk-very-secret-value-123"


@pytest.fixture
def demo_server(registry_state, staff, tmp_path):
    """One stdio server, ``demo``, connected in this process; its calls are counted."""
    counter = tmp_path / "calls.txt"
    paces = _pace(
        health_interval=0.2, backoff_initial=0.1, backoff_max=0.5, probe_interval=0.2, hold=0.3
    )
    server = McpServer.objects.create(
        name="demo",
        transport="stdio",
        command=os.sys.executable,
        args=[str(SERVER), "--counter", str(counter), "--refuse-if", str(tmp_path / "down")],
        env={"DEMO_TOKEN": SECRET},
        created_by=staff,
    )
    mcp.mcp_sync(wait=10)
    wait_for(lambda: connected("demo"), what="the demo server to connect")
    server.counter = counter
    server.down = tmp_path / "down"  # while it exists, the server cannot be restarted
    yield server
    McpServer.objects.all().delete()
    mcp.mcp_sync(wait=10)
    _pace(**paces)


def _pace(**knobs: float) -> dict[str, float]:
    """Set the process manager's intervals for a test; returns what they were."""
    was = {name: getattr(mcp.manager, name) for name in knobs}
    for name, value in knobs.items():
        setattr(mcp.manager, name, value)
    return was


def add_remote(client, authorization: str, **fields):
    """POST a streamable HTTP server with an Authorization header through the API."""
    body = {
        "name": "remote",
        "transport": "streamable_http",
        "url": "http://127.0.0.1:9/mcp",
        "headers": {"Authorization": authorization},
        **fields,
    }
    return client.post("/api/mcp-servers/", body, format="json")


def server_row(*, name: str, args: list[str], staff, **switches) -> McpServer:
    """A stdio server row of the test's, connected in this process before it returns."""
    server = McpServer.objects.create(
        name=name,
        transport="stdio",
        command=os.sys.executable,
        args=args,
        created_by=staff,
        **switches,
    )
    mcp.mcp_sync(wait=10)
    wait_for(lambda: connected(name), what=f"the {name} server to connect")
    return server


def connected(name: str) -> bool:
    status = mcp.manager.statuses().get(name)
    return status is not None and status.state == "connected"


def calls(server) -> list[str]:
    return server.counter.read_text().split() if server.counter.exists() else []


@database_sync_to_async
def new_session(user):
    from sessions_app.services import session_create

    return session_create(user=user)


def load_then_call(model, name: str, arguments: dict) -> None:
    """Script the model: load ``name`` with tool_search, call it, then answer."""
    model.replies.extend(
        [
            Reply(tool_calls=[("t1", "tool_search", {"query": f"select:{name}"})]),
            Reply(tool_calls=[("t2", "call_tool", {"name": name, "arguments": arguments})]),
            Reply(text="Done."),
        ]
    )


async def chat(socket, text):
    await send(socket, {"type": "chat", "text": text})
    return await until(socket, timeout=30)


@pytest.mark.processes
async def test_a_turn_finds_an_mcp_tool_through_tool_search_and_calls_it(owner, model, demo_server):
    model.replies.extend(
        [
            Reply(tool_calls=[("t1", "tool_search", {"query": "repeat a text back"})]),
            Reply(
                tool_calls=[
                    ("t2", "call_tool", {"name": "demo__echo", "arguments": {"text": "hello"}})
                ]
            ),
            Reply(text="It said hello."),
        ]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "echo hello with whatever tool does that")

    first_request = model.requests[0].body
    assert "demo__echo" not in [tool["name"] for tool in first_request["tools"]]
    assert "demo__echo" in first_request["system"][-1]["text"]  # the deferred catalog
    found, called = events(frames, "tool_result")
    assert "demo__echo" in found["data"]["content"]
    assert (called["data"]["status"], called["data"]["content"]) == ("ok", "hello")
    assert calls(demo_server) == ["echo"]
    await socket.disconnect()


@pytest.mark.processes
async def test_the_offline_demo_model_loads_an_mcp_tool_and_calls_it(owner, settings, demo_server):
    settings.TOOLHUB_PROVIDER = "demo"
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "use demo__echo: hello from the demo")

    calls = [frame["data"] for frame in events(frames, "tool_call")]
    results = [frame["data"] for frame in events(frames, "tool_result")]
    assert calls[0]["name"] == "tool_search"
    assert calls[0]["arguments"] == {"query": "select:demo__echo"}
    assert results[-1]["status"] == "ok"
    assert results[-1]["content"] == "hello from the demo"
    assert events(frames, "turn_started")[0]["data"]["demo"] is True
    await socket.disconnect()


@pytest.mark.processes
async def test_a_progress_reporting_mcp_tool_streams_its_tail_while_it_runs(
    owner, model, demo_server
):
    load_then_call(model, "demo__count_up", {"steps": 4})
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "count to four")

    tails = [frame["tail"] for frame in frames if frame["type"] == "tail"]
    assert tails, "no tail frame reached the socket"
    assert tails[-1].endswith("step 4 of 4 (4/4)\n")
    assert events(frames, "tool_result")[-1]["data"]["content"] == "counted to 4"
    await socket.disconnect()


@pytest.mark.processes
async def test_arguments_invalid_for_an_mcp_tools_schema_never_reach_the_server(
    owner, model, demo_server
):
    load_then_call(model, "demo__add", {"a": -5, "b": 1})
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "add -5 and 1")

    result = events(frames, "tool_result")[-1]["data"]
    assert result["status"] == "error"
    assert "-5 is less than the minimum of 0" in result["content"]
    assert calls(demo_server) == []
    await socket.disconnect()


@pytest.mark.processes
async def test_a_server_gone_past_the_hold_hides_its_tools_with_the_reason_and_they_return(
    owner, staff, model, demo_server, api
):
    session = await new_session(owner)
    client = await database_sync_to_async(api)(owner)
    toolset = database_sync_to_async(
        lambda: client.get(f"/api/sessions/{session.pk}/toolset/").json()
    )
    socket = await open_socket(session.pk, owner)
    model.replies.append(Reply(text="Hello."))
    await chat(socket, "hi")  # the conversation's tier plan is made with the server up
    before = await toolset()
    assert "demo__echo" in [tool["name"] for tool in before["catalog"]]
    assert "demo__pid" in [tool["name"] for tool in before["resident"]]
    pid = int((await mcp.manager.call("demo", "pid", {}, ctx=_ctx())).content)

    demo_server.down.touch()
    os.kill(pid, signal.SIGKILL)
    model.replies.extend(
        [
            Reply(
                tool_calls=[("t1", "call_tool", {"name": "demo__echo", "arguments": {"text": "x"}})]
            ),
            Reply(text="The server is gone."),
        ]
    )
    await wait_for_async(lambda: mcp.manager.statuses()["demo"].state == "disconnected")
    frames = await chat(socket, "echo x")

    result = events(frames, "tool_result")[-1]["data"]
    # The model is told why, so it can tell the person the server is down.
    assert (result["status"], result["content"]) == (
        "vetoed",
        "demo__echo is unavailable right now: MCP server demo disconnected",
    )
    during = await toolset()
    hidden = {item["name"]: item for item in during["hidden"]}
    assert hidden["demo__echo"]["layer"] == "L4"
    assert hidden["demo__echo"]["reason"] == "MCP server demo disconnected"
    ops = await database_sync_to_async(_ops_page)(staff)
    assert "MCP server demo disconnected" in ops
    catalog = await database_sync_to_async(lambda: client.get("/api/tools/").json())()
    (echo,) = [tool for tool in catalog if tool["name"] == "demo__echo"]
    assert (echo["available"], echo["layer"]) == (False, "L4")
    assert echo["reason"] == "MCP server demo disconnected"

    demo_server.down.unlink()
    await wait_for_async(lambda: connected("demo"))
    after = await toolset()
    assert after["fingerprint"] == before["fingerprint"]
    assert after["catalog"] == before["catalog"]
    await socket.disconnect()


@pytest.mark.processes
def test_a_global_disable_names_an_mcp_tool_like_any_other(owner, staff, api, demo_server):
    response = api(staff).post(
        "/api/global-disables/", {"tool": "demo__echo", "reason": "echoes secrets"}, format="json"
    )
    assert response.status_code == 201
    from sessions_app.services import session_create

    session = session_create(user=owner)
    toolset = api(owner).get(f"/api/sessions/{session.pk}/toolset/").json()

    hidden = {item["name"]: item for item in toolset["hidden"]}
    assert hidden["demo__echo"]["layer"] == "L5"
    assert "echoes secrets" in hidden["demo__echo"]["reason"]
    assert "demo__add" in [tool["name"] for tool in toolset["catalog"]]


def test_secrets_are_written_but_never_shown_by_the_api_the_admin_or_the_ops_page(
    staff, api, admin_client
):
    created = add_remote(api(staff), f"Bearer {SECRET}", enabled=False)
    assert created.status_code == 201, created.content
    server_id = created.json()["id"]
    assert created.json()["header_names"] == ["Authorization"]

    changed = api(staff).patch(
        f"/api/mcp-servers/{server_id}/", {"timeout": 5, "env": {"X": SECRET}}, format="json"
    )
    listed = api(staff).get("/api/mcp-servers/")
    detail = api(staff).get(f"/api/mcp-servers/{server_id}/")
    pages = [
        admin_client.get(f"/admin/agent_app/mcpserver/{server_id}/change/"),
        admin_client.get("/admin/agent_app/mcpserver/"),
        admin_client.get("/ops/tools/"),
    ]

    for response in (created, changed, listed, detail, *pages):
        assert response.status_code == 200 or response is created
        assert SECRET not in response.content.decode()
    assert detail.json()["env_keys"] == ["X"]
    stored = McpServer.objects.get(pk=server_id)
    # Kept when a change leaves them out; replaced when given; cleared by {}.
    assert stored.headers == {"Authorization": f"Bearer {SECRET}"}
    assert stored.env == {"X": SECRET}
    api(staff).patch(f"/api/mcp-servers/{server_id}/", {"headers": {}}, format="json")
    assert McpServer.objects.get(pk=server_id).headers == {}


def test_the_admin_keeps_stored_secrets_when_their_box_is_left_empty(admin_client):
    server = McpServer.objects.create(
        name="kept", transport="stdio", command="true", env={"TOKEN": SECRET}, enabled=False
    )

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
        "headers_update": '{"X-Key": "new"}',
    }
    response = admin_client.post(f"/admin/agent_app/mcpserver/{server.pk}/change/", fields)

    assert response.status_code == 302, response.content.decode()[:2000]
    refused = admin_client.post(
        f"/admin/agent_app/mcpserver/{server.pk}/change/",
        {**fields, "headers_update": '{"X-Key": " padded"}'},
    )
    assert refused.status_code == 200
    assert "surrounding spaces or control characters" in refused.content.decode()
    not_a_map = admin_client.post(
        f"/admin/agent_app/mcpserver/{server.pk}/change/", {**fields, "env_update": '["x"]'}
    )
    assert "env must be an object of strings" in not_a_map.content.decode()
    server.refresh_from_db()
    assert server.env == {"TOKEN": SECRET}
    assert server.headers == {"X-Key": "new"}
    assert server.timeout == 30


def test_only_staff_can_see_or_change_mcp_servers_and_an_unknown_one_is_a_json_404(
    owner, staff, api
):
    missing = api(staff).get("/api/mcp-servers/999999/")
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
    assert api(owner).get("/api/mcp-servers/").status_code == 403
    refused = api(owner).post(
        "/api/mcp-servers/",
        {"name": "evil", "transport": "stdio", "command": "/bin/sh"},
        format="json",
    )
    assert refused.status_code == 403
    assert not McpServer.objects.exists()


def test_a_server_that_could_not_work_is_refused_with_the_reason(staff, api):
    no_command = api(staff).post(
        "/api/mcp-servers/", {"name": "broken", "transport": "stdio"}, format="json"
    )
    bad_name = api(staff).post(
        "/api/mcp-servers/",
        {"name": "has_underscore", "transport": "stdio", "command": "x"},
        format="json",
    )
    pasted = add_remote(api(staff), f"Bearer {SECRET}\n")

    numbers = api(staff).post(
        "/api/mcp-servers/",
        {"name": "numbers", "transport": "stdio", "command": "x", "args": [1, 2]},
        format="json",
    )

    assert no_command.status_code == 400
    assert "a stdio server needs a command" in no_command.content.decode()
    assert numbers.status_code == 400
    assert "args must be a list of strings" in numbers.content.decode()
    assert bad_name.status_code == 400
    assert pasted.status_code == 400
    assert "surrounding spaces or control characters" in pasted.content.decode()
    assert SECRET not in pasted.content.decode()
    assert not McpServer.objects.exists()


def test_a_second_server_with_a_taken_name_is_a_conflict_and_the_first_is_kept(staff, api):
    body = {"transport": "stdio", "command": "true"}
    first = api(staff).post("/api/mcp-servers/", {"name": "twin", **body}, format="json")
    second = api(staff).post(
        "/api/mcp-servers/", {"name": "twin", **body, "command": "false"}, format="json"
    )
    newline = api(staff).post("/api/mcp-servers/", {"name": "twin2\n", **body}, format="json")

    assert first.status_code == 201
    assert (second.status_code, second.json()["code"]) == (409, "conflict")
    assert newline.status_code == 400
    assert list(McpServer.objects.values_list("name", "command")) == [("twin", "true")]


def test_adding_changing_and_deleting_a_server_is_audited_without_its_secrets(staff, api):
    created = add_remote(api(staff), f"Bearer {SECRET}")
    server_id = created.json()["id"]
    changed = api(staff).patch(
        f"/api/mcp-servers/{server_id}/",
        {"timeout": 5, "headers": {"X-Key": SECRET}},
        format="json",
    )
    deleted = api(staff).delete(f"/api/mcp-servers/{server_id}/")
    audit = api(staff).get("/api/audit/")

    assert (created.status_code, changed.status_code, deleted.status_code) == (201, 200, 204)
    assert not McpServer.objects.filter(pk=server_id).exists()
    entries = [(e["type"], e["action"], e["message"]) for e in audit.json()]
    assert entries[:3] == [
        ("mcpserver", "deleted", "deleted MCP server remote"),
        ("mcpserver", "changed", "changed headers, timeout"),
        ("mcpserver", "added", "added"),
    ]
    assert SECRET not in audit.content.decode()


@pytest.mark.processes
def test_the_ops_page_shows_each_server_and_disabling_one_takes_its_tools_away(
    staff, client, password, demo_server
):
    from toolhub.tools import registry

    client.login(username=staff.username, password=password)
    page = client.get("/ops/tools/").content.decode()
    assert 'id="mcp-demo"' in page
    assert "Connected: 12 tools" in page
    assert "since <time datetime=" in page.split('id="mcp-demo"')[1].split("</tr>")[0]
    assert "DEMO_TOKEN" in page  # the secret's name, never its value
    assert SECRET not in page

    response = client.post(f"/ops/mcp/{demo_server.pk}/enabled/", {"enabled": "0"})
    mcp.mcp_sync(wait=10)

    assert response.status_code == 302
    assert not McpServer.objects.get(pk=demo_server.pk).enabled
    assert not [name for name in registry.names() if name.startswith("demo__")]
    assert "Disabled" in client.get("/ops/tools/").content.decode()


def _ops_page(staff) -> str:
    from django.test import Client

    client = Client()
    client.force_login(staff)
    return client.get("/ops/tools/").content.decode()


def _ctx():
    from toolhub.tools import ToolContext

    return ToolContext(env={})


async def wait_for_async(predicate, timeout: float = 20.0) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.processes
async def test_a_server_that_drops_briefly_keeps_the_array_and_its_calls_fail_fast(
    owner, staff, model, api, registry_state
):
    port = free_port()
    paces = _pace(health_interval=0.2, backoff_initial=0.1, probe_interval=0.2, hold=60)
    try:
        with http_server(port):
            await database_sync_to_async(_add_http)(staff, port)
            await wait_for_async(lambda: connected("remote"))
            session = await new_session(owner)
            client = await database_sync_to_async(api)(owner)
            toolset = database_sync_to_async(
                lambda: client.get(f"/api/sessions/{session.pk}/toolset/").json()
            )
            socket = await open_socket(session.pk, owner)
            model.replies.append(Reply(text="Hello."))
            await chat(socket, "hi")
            before = await toolset()

        await wait_for_async(lambda: mcp.manager.statuses()["remote"].state == "reconnecting")
        # Its tools are still found, loaded and called; the call fails at once, with why.
        load_then_call(model, "remote__echo", {"text": "x"})
        frames = await chat(socket, "echo x")

        result = events(frames, "tool_result")[-1]["data"]
        assert result["status"] == "error"
        assert "MCP server remote lost its connection" in result["content"]
        during = await toolset()
        assert during["fingerprint"] == before["fingerprint"]
        assert "remote__echo" not in {item["name"] for item in during["hidden"]}
        ops = await database_sync_to_async(_ops_page)(staff)
        assert "Reconnecting" in ops
        with http_server(port):
            await wait_for_async(lambda: connected("remote"))
            assert (await toolset())["fingerprint"] == before["fingerprint"]
        await socket.disconnect()
    finally:
        await database_sync_to_async(_remove_all)()
        _pace(**paces)


def _add_http(staff, port: int) -> None:
    McpServer.objects.create(
        name="remote",
        transport="streamable_http",
        url=f"http://127.0.0.1:{port}/mcp",
        created_by=staff,
    )
    mcp.mcp_sync(wait=10)


def _remove_all() -> None:
    McpServer.objects.all().delete()
    mcp.mcp_sync(wait=10)


@pytest.mark.processes
async def test_server_instructions_reach_the_model_as_the_inspector_shows_and_its_log_the_ops_page(
    owner, staff, model, api, registry_state
):
    paces = _pace(health_interval=0.2, backoff_initial=0.1, probe_interval=0.2)
    try:
        await database_sync_to_async(_add_stdio)(
            staff, "--lively", "--instructions", "Prefer add for sums."
        )
        await wait_for_async(lambda: connected("lively"))
        session = await new_session(owner)
        client = await database_sync_to_async(api)(owner)
        toolset = await database_sync_to_async(
            lambda: client.get(f"/api/sessions/{session.pk}/toolset/").json()
        )()
        socket = await open_socket(session.pk, owner)
        load_then_call(model, "lively__shout", {"text": "cache warmed", "level": "notice"})
        await chat(socket, "shout")
        await socket.disconnect()

        (note,) = toolset["instructions"]
        assert note["origin"] == "mcp:lively"
        assert "MCP server lively says how to use its tools:\nPrefer add for sums." in note["text"]
        sent = model.requests[0].body["system"][-1]["text"]
        assert sent.endswith(note["text"])  # the catalog block ends with it, as shown
        ops = await database_sync_to_async(_ops_page)(staff)
        assert "Its log (1 latest)" in ops
        assert "cache warmed" in ops
    finally:
        await database_sync_to_async(_remove_all)()
        _pace(**paces)


@pytest.fixture
def lively_chat(owner, other_user, staff, registry_state):
    """``tests/mcp/server.py --lively`` connected here, a chat of ``owner``, and a browser
    signed in as its owner and one as somebody else."""
    from django.test import Client

    from sessions_app.services import session_create

    paces = _pace(health_interval=0.2, backoff_initial=0.1, probe_interval=0.2)
    try:
        _add_stdio(staff, "--lively")
        wait_for(lambda: connected("lively"), what="the lively server")
        mine, theirs = Client(), Client()
        mine.force_login(owner)
        theirs.force_login(other_user)
        yield session_create(user=owner), mine, theirs
    finally:
        _remove_all()
        _pace(**paces)


def _add_stdio(staff, *args: str) -> None:
    McpServer.objects.create(
        name="lively",
        transport="stdio",
        command=os.sys.executable,
        args=[str(SERVER), *args],
        created_by=staff,
    )
    mcp.mcp_sync(wait=10)


@pytest.mark.processes
def test_a_chats_prompts_are_listed_and_filled_for_its_owner_only_and_bad_input_is_told(
    lively_chat,
):
    session, mine, theirs = lively_chat
    base = f"/chat/{session.pk}/prompts/"

    def fill(client, name, arguments="{}", server="lively"):
        data = {"server": server, "name": name, "arguments": arguments}
        return client.post(f"{base}fill/", data)

    listed = mine.get(base).json()["prompts"]
    filled = fill(mine, "review", '{"code": "x = 1"}')
    missing = fill(mine, "review", '{"focus": "style"}')
    not_text = fill(mine, "review", '{"code": 1}')
    not_json = fill(mine, "review", "{nope")
    too_long = fill(mine, "review", '{"code": "' + "x" * 200_001 + '"}')
    unknown = fill(mine, "nothing")
    elsewhere = fill(mine, "review", '{"code": "x"}', server="gone")
    their_list, their_fill = theirs.get(base), fill(theirs, "hello")

    assert [(p["server"], p["name"]) for p in listed] == [
        ("lively", "hello"),
        ("lively", "review"),
    ]
    assert filled.json() == {"text": "Please review this code for bugs:\n\nx = 1"}
    assert (missing.status_code, missing.json()) == (400, {"error": "review needs code"})
    assert (not_text.status_code, not_text.json()["error"]) == (
        400,
        "a prompt's arguments are an object of texts",
    )
    assert (not_json.status_code, not_json.json()["error"]) == (
        400,
        "the arguments are not JSON",
    )
    assert too_long.status_code == 400
    assert "longer than 200,000 characters" in too_long.json()["error"]
    assert unknown.status_code == 409
    assert elsewhere.json() == {"error": "MCP server gone offers no prompt 'review' now"}
    assert (their_list.status_code, their_fill.status_code) == (404, 404)


@pytest.mark.processes
def test_a_chats_resources_are_attached_for_its_owner_only_and_never_past_a_disable(
    lively_chat, staff, api
):
    from tests.mcp.server import EXACT_TEXT

    session, mine, theirs = lively_chat
    base = f"/chat/{session.pk}/resources/"

    def attach(client, uri, server="lively"):
        return client.post(f"{base}attach/", {"server": server, "uri": uri})

    listed = mine.get(base).json()["resources"]
    attached = attach(mine, "note://greeting")
    binary = attach(mine, "blob://pixel")
    unlisted = attach(mine, "file:///etc/passwd")
    their_list, their_attach = theirs.get(base), attach(theirs, "note://greeting")
    api(staff).post(
        "/api/global-disables/",
        {"tool": "lively__read_resource", "reason": "reads too much"},
        format="json",
    )
    after_disable, listed_after = attach(mine, "note://greeting"), mine.get(base).json()

    assert [(r["server"], r["uri"]) for r in listed] == [
        ("lively", "note://greeting"),
        ("lively", "blob://pixel"),
    ]
    assert attached.json() == {
        "text": "[Resource greeting (note://greeting) from MCP server lively]\n" + EXACT_TEXT
    }
    # An image (or any binary file) is not pasted as text: the reader tool carries it.
    assert binary.status_code == 409
    assert binary.json()["error"].startswith("pixel is a binary file, and a message carries")
    assert "lively__read_resource" in binary.json()["error"]
    assert unlisted.status_code == 400
    assert "lists no resource 'file:///etc/passwd'" in unlisted.json()["error"]
    assert (their_list.status_code, their_attach.status_code) == (404, 404)
    assert after_disable.status_code == 409
    assert after_disable.json()["error"].endswith("disabled globally by ops: reads too much")
    assert listed_after == {"resources": []}


@pytest.mark.processes
def test_while_a_server_is_relisted_again_and_again_its_resources_never_vanish_from_the_composer(
    lively_chat,
):
    session, mine, _ = lively_chat
    # Relisted every 5 ms: each relisting reads the server's resources again.
    _pace(health_interval=0.005)

    seen = [
        tuple(r["uri"] for r in mine.get(f"/chat/{session.pk}/resources/").json()["resources"])
        for _ in range(200)
    ]

    assert set(seen) == {("note://greeting", "blob://pixel")}


async def _news(layer, channel, timeout: float):
    """The next message on ``channel`` within ``timeout`` seconds, else None."""
    try:
        return await asyncio.wait_for(layer.receive(channel), timeout)
    except TimeoutError:
        return None


@database_sync_to_async
def _saved_elsewhere(staff) -> None:
    # Saved by another process: no signal here, so this one announces nothing yet, and
    # the other's announcement reached open chats before this process had the tools.
    McpServer.objects.bulk_create(
        [McpServer(name="elsewhere", transport="stdio", command=os.sys.executable,
                   args=[str(SERVER)], created_by=staff)]
    )  # fmt: skip
    mcp.mcp_sync(wait=10)
    wait_for(lambda: mcp.manager.registry.get("elsewhere__echo"), what="the tools")


@database_sync_to_async
def _removed_elsewhere() -> None:
    McpServer.objects.filter(name="elsewhere").delete()
    mcp.mcp_sync(wait=10)


@pytest.mark.processes
async def test_a_process_following_the_table_tells_open_chats_once_its_own_tools_changed(
    registry_state, staff
):
    from channels.layers import get_channel_layer

    from toolhub.lib.catalog_news import CATALOG_GROUP

    follow = database_sync_to_async(functools.partial(mcp.mcp_follow_once, announce=True))
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(CATALOG_GROUP, channel)
    await follow()
    while await _news(layer, channel, 0.3) is not None:
        pass
    try:
        await _saved_elsewhere(staff)
        before_following = await _news(layer, channel, 0.3)
        await follow()
        told = await _news(layer, channel, 5)
        await follow()
        told_again = await _news(layer, channel, 0.5)
    finally:
        await _removed_elsewhere()

    assert before_following is None
    assert told == {"type": "catalog.changed"}
    assert told_again is None
