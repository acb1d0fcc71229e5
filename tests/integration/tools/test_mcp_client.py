"""MCP servers through the runtime: real servers built with the SDK's MCPServer (FastMCP),
over stdio and streamable HTTP, connected by ``McpManager`` into a registry. (Here, not
in ``tests/unit``: every test starts server processes.)"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import TextIO, cast

import pytest

from tests.mcp import free_port, http_config, http_server, stdio_config, wait_for
from tests.mcp.server import EXACT_TEXT, PIXEL, RECORDING_WAV, REPORT_PDF, REPORT_URI
from toolhub.tools import ToolContext, ToolRegistry, TurnTools, function, resolve, token_cost
from toolhub.tools.mcp import (
    MAX_DESCRIPTION_CHARS,
    McpManager,
    McpServerConfig,
    build_tools,
    result_text,
    tool_name,
)
from toolhub.tools.tokens import count_cached


@pytest.fixture
def reg() -> ToolRegistry:
    """A registry of the test's own, so tests never see each other's tools."""
    return ToolRegistry()


def make_manager(reg: ToolRegistry, tmp_path: Path, **knobs) -> McpManager:
    """A manager with a test's pace: fast relists, probes and retries."""
    errlog = (tmp_path / "mcp-stderr.log").open("a")
    options = {
        "health_interval": 0.2,
        "probe_interval": 0.2,
        "probe_timeout": 3.0,
        "backoff_initial": 0.1,
        "backoff_max": 0.5,
        **knobs,
    }
    return McpManager(reg, errlog=errlog, **options)


@pytest.fixture
def manager(reg: ToolRegistry, tmp_path: Path):
    manager = make_manager(reg, tmp_path)
    yield manager
    manager.stop()
    cast(TextIO, manager.errlog).close()


def connect(manager: McpManager, *configs: McpServerConfig) -> None:
    manager.reconcile(configs, wait=10)
    for config in configs:
        wait_for(
            lambda name=config.name: manager.statuses()[name].state == "connected",
            what=f"{config.name} to connect",
        )


def run(coro):
    return asyncio.run(coro)


def succeeded(reg: ToolRegistry, name: str, arguments: dict | None = None):
    result = run(reg.get(name).execute(arguments or {}, ToolContext(env={})))
    return None if result.is_error else result


def fingerprint(reg: ToolRegistry) -> str:
    return resolve(reg, ctx=ToolContext(env={})).fingerprint


@pytest.mark.processes
def test_a_servers_tools_register_deferred_under_its_prefix_with_their_schema_unchanged(
    manager, reg
):
    connect(manager, stdio_config("demo"))

    names = reg.names()
    assert "demo__echo" in names
    assert "demo__count_up" in names
    assert names == sorted(names)
    # All deferred but the one whose _meta asks to stay resident.
    assert [name for name in names if not reg.get(name).defer] == ["demo__pid"]
    add = reg.get("demo__add")
    assert add.source == "mcp"
    assert add.origin == "mcp:demo"
    # Passed through as the server wrote it: nothing closed, its own title kept.
    assert add.parameters["properties"]["a"] == {"minimum": 0, "title": "A", "type": "integer"}
    assert "additionalProperties" not in add.parameters
    resolved = resolve(reg, ctx=ToolContext(env={}))
    assert "demo__add" in [tool.name for tool in resolved.deferred]
    assert "demo__add" not in resolved.array_names


@pytest.mark.processes
def test_a_server_can_be_registered_resident_instead(manager, reg):
    connect(manager, stdio_config("demo", defer=False))

    assert not any(reg.get(name).defer for name in reg.names())
    assert "demo__echo" in resolve(reg, ctx=ToolContext(env={})).array_names


@pytest.mark.processes
def test_a_shuffled_and_paginated_listing_gives_the_same_array_as_a_plain_one(reg, tmp_path):
    plain_reg, shuffled_reg = ToolRegistry(), ToolRegistry()
    errlog = (tmp_path / "mcp-stderr.log").open("w")
    plain = McpManager(plain_reg, health_interval=0.2, errlog=errlog)
    shuffled = McpManager(shuffled_reg, health_interval=0.2, errlog=errlog)
    try:
        connect(plain, stdio_config("demo", "--tools", "30", defer=False))
        connect(
            shuffled,
            stdio_config("demo", "--tools", "30", "--shuffle", "--page-size", "7", defer=False),
        )
        # Followed every page: 30 generated tools and the server's 10 fixed ones.
        assert len(shuffled_reg) == len(plain_reg) == 30 + 12
        assert shuffled_reg.names() == plain_reg.names()
        assert fingerprint(shuffled_reg) == fingerprint(plain_reg)
    finally:
        plain.stop()
        shuffled.stop()
        errlog.close()


@pytest.mark.processes
def test_arguments_invalid_for_the_schema_are_refused_before_anything_is_sent(
    manager, reg, tmp_path
):
    counter = tmp_path / "calls.txt"
    connect(manager, stdio_config("demo", "--counter", str(counter)))
    add = reg.get("demo__add")

    refused = run(add.execute({"a": -1, "b": 2}, ToolContext(env={})))
    missing = run(add.execute({"a": 1}, ToolContext(env={})))

    assert refused.is_error
    assert "minimum of 0" in refused.content
    assert missing.is_error
    assert "missing required argument 'b'" in missing.content
    assert not counter.exists()
    assert run(add.execute({"a": 1, "b": 2}, ToolContext(env={}))).content == "3"
    assert counter.read_text() == "add\n"


@pytest.mark.processes
def test_a_stopped_turn_cancels_the_running_call_on_the_server(manager, reg, tmp_path):
    counter = tmp_path / "calls.txt"
    connect(manager, stdio_config("demo", "--counter", str(counter)))
    ctx = ToolContext(env={})

    async def stop_soon():
        call = asyncio.ensure_future(reg.get("demo__sleep").execute({"seconds": 30}, ctx))
        await asyncio.to_thread(wait_for, lambda: counter.exists(), 20, "the call to start")
        ctx.cancel.cancel()
        return await call

    stopped = run(stop_soon())

    assert stopped.status == "cancelled"
    wait_for(lambda: "sleep-cancelled" in counter.read_text(), what="the server to stop")


@pytest.mark.processes
def test_progress_notifications_stream_to_on_update(manager, reg):
    connect(manager, stdio_config("demo"))
    updates = []

    result = run(
        reg.get("demo__count_up").execute(
            {"steps": 3}, ToolContext(env={}, on_update=lambda update: updates.append(update))
        )
    )

    assert result.content == "counted to 3"
    assert [update.chunk for update in updates] == [
        "step 1 of 3 (1/3)\n",
        "step 2 of 3 (2/3)\n",
        "step 3 of 3 (3/3)\n",
    ]
    assert updates[-1].tail.endswith("step 3 of 3 (3/3)\n")


@pytest.mark.processes
def test_the_servers_error_results_become_error_results_and_images_come_as_images(manager, reg):
    connect(manager, stdio_config("demo", "--lively"))

    failed = run(reg.get("demo__explode").execute({}, ToolContext(env={})))
    picture = succeeded(reg, "demo__picture")
    mislabelled = succeeded(reg, "demo__mislabelled")
    structured = succeeded(reg, "demo__weather")

    assert failed.is_error
    assert "Error executing tool explode" in failed.content
    assert picture.content == "a caption\n[image 1: image/png, about 69 bytes]"
    assert [(image.media_type, image.data) for image in picture.images] == [("image/png", PIXEL)]
    # A PNG that says it is a JPEG would be refused by the provider: a line says why.
    assert mislabelled.images == ()
    assert mislabelled.content == (
        "[image: image/jpeg, about 69 bytes; not sent as an image: its bytes are not a JPEG image]"
    )
    # The SDK's server sends structuredContent and its JSON as text: both are kept.
    assert json.loads(structured.content) == {"city": "Oslo", "degrees": -3}
    assert structured.structured == {"city": "Oslo", "degrees": -3}


class _Store:
    """The runtime's full-result store, kept in memory."""

    def __init__(self) -> None:
        self.kept: dict[str, str] = {}

    def put(self, *, tool, text, ctx) -> str:
        ref = f"/results/{len(self.kept)}"
        self.kept[ref] = text
        return ref


@pytest.mark.processes
def test_result_text_comes_back_exactly_as_the_server_sent_it(manager, reg):
    connect(manager, stdio_config("demo"))

    result = run(reg.get("demo__exact_text").execute({}, ToolContext(env={})))

    assert result.content == EXACT_TEXT
    # What an edit tool would be asked to find is what the file holds.
    assert "\r\n" in result.content
    assert "\u200d" in result.content
    assert "\u200c" in result.content
    assert "\u200f" in result.content


@pytest.mark.processes
def test_a_big_result_is_cut_once_with_the_true_count_the_real_tail_and_the_whole_kept(
    manager, reg
):
    from tests.mcp.server import big

    connect(manager, stdio_config("demo"))
    store = _Store()
    tool = reg.get("demo__big_text")

    result = run(tool.execute({"chars": 2_580_000}, ToolContext(env={}, store=store)))

    whole = big(2_580_000)
    assert result.truncated
    assert len(result.content) <= tool.max_result_chars
    assert result.content.startswith("HEAD\nline 00000000\n")
    assert result.content.endswith("TAIL-END")
    assert result.content.count("characters omitted") == 1
    marker = re.search(r"\[… ([\d,]+) characters omitted; full output: (\S+) …\]", result.content)
    omitted = int(marker[1].replace(",", ""))
    kept = len(result.content) - len(marker[0]) - len("\n\n") * 2
    assert omitted == len(whole) - kept
    assert omitted > 2_500_000
    # The tail is the end of the text, not its middle.
    assert whole.endswith(result.content[-1_000:])
    assert store.kept[marker[2]] == whole
    assert result.full_ref == marker[2]


def test_a_tool_that_runs_only_as_a_task_is_skipped_with_the_reason():
    # Declared by the 2025-11-25 revision's servers; the SDK's own server cannot say it.
    from mcp_types import Tool as McpTool
    from mcp_types import ToolExecution

    listing = [
        McpTool(
            name="later",
            input_schema={"type": "object"},
            execution=ToolExecution(task_support="required"),
        ),
        McpTool(
            name="either",
            input_schema={"type": "object"},
            execution=ToolExecution(task_support="optional"),
        ),
        McpTool(name="now", input_schema={"type": "object"}),
    ]

    tools, skipped = build_tools(
        stdio_config("demo"), listing, call=lambda *a, **k: None, check=lambda: True
    )

    assert [tool.name for tool in tools] == ["demo__either", "demo__now"]
    assert [(item.name, item.reason) for item in skipped] == [
        (
            "demo__later",
            "MCP tool later: it runs only as an MCP task, which toolhub does not support",
        )
    ]


@pytest.mark.processes
def test_a_call_past_the_servers_timeout_is_cancelled_on_the_server_and_the_connection_stays(
    manager, reg, tmp_path
):
    counter = tmp_path / "calls.txt"
    connect(manager, stdio_config("demo", "--counter", str(counter), timeout=0.5))

    slow = run(reg.get("demo__sleep").execute({"seconds": 5}, ToolContext(env={})))

    assert slow.is_error
    assert "timed out after 0.5 s" in slow.content
    wait_for(lambda: "sleep-cancelled" in counter.read_text(), what="the server to stop")
    assert run(
        reg.get("demo__echo").execute({"text": "still here"}, ToolContext(env={}))
    ).content == ("still here")


@pytest.mark.processes
def test_untrusted_names_and_descriptions_are_cleaned_and_cut(manager, reg):
    connect(manager, stdio_config("demo"))

    summarise = reg.get("demo__summarise")
    assert len(summarise.description) == MAX_DESCRIPTION_CHARS
    assert summarise.description.endswith("…")
    odd = reg.get(tool_name("demo", "bad\x1bname.tool"))
    assert odd is not None
    assert odd.name.startswith("demo__bad_name_tool-")
    assert odd.description == "Description with control characters."
    assert "\x1b" not in odd.label


def test_a_tool_whose_schema_no_provider_accepts_is_skipped_with_the_reason():
    # The SDK's own server refuses to list such a tool, so a listing is built here.
    from mcp_types import Tool as McpTool

    listing = [
        McpTool(name="scalar", input_schema={"type": "string"}),
        McpTool(name="broken", input_schema={"type": "object", "properties": 3}),
        McpTool(name="fine", input_schema={"type": "object"}),
    ]

    tools, skipped = build_tools(
        stdio_config("demo"), listing, call=lambda *a, **k: None, check=lambda: True
    )

    assert [tool.name for tool in tools] == ["demo__fine"]
    reasons = {item.name: item.reason for item in skipped}
    assert 'not of type "object"' in reasons["demo__scalar"]
    assert "not valid JSON Schema" in reasons["demo__broken"]


def test_a_schema_holding_infinity_is_skipped_so_no_request_body_carries_it():
    # The SDK parses NaN and Infinity off the wire; no provider accepts them in JSON.
    import json

    from mcp_types import Tool as McpTool

    parsed = json.loads('{"type": "object", "properties": {"n": {"maximum": Infinity}}}')
    listing = [
        McpTool(name="boundless", input_schema=parsed),
        McpTool(name="fine", input_schema={"type": "object"}),
    ]

    tools, skipped = build_tools(
        stdio_config("demo"), listing, call=lambda *a, **k: None, check=lambda: True
    )

    assert [tool.name for tool in tools] == ["demo__fine"]
    assert "NaN or Infinity" in skipped[0].reason
    assert all("Infinity" not in tool.wire_json for tool in tools)


@pytest.mark.processes
def test_an_allowlist_registers_only_the_tools_it_names(manager, reg):
    connect(manager, stdio_config("demo", allowlist=("echo", "add")))

    assert reg.names() == ["demo__add", "demo__echo"]


@pytest.mark.processes
def test_a_name_held_by_a_code_tool_is_skipped_with_the_reason(manager, reg):
    @function(name="demo__echo", registry=reg)
    def echo(text: str) -> str:
        """A code tool that came first."""
        return text

    connect(manager, stdio_config("demo"))

    assert reg.get("demo__echo").source == "code"
    (skipped,) = manager.statuses()["demo"].skipped
    assert skipped.name == "demo__echo"
    assert "taken by" in skipped.reason


@pytest.mark.processes
def test_a_killed_stdio_server_keeps_its_tools_in_place_fails_fast_and_returns_identically(
    manager, reg
):
    connect(manager, stdio_config("demo", defer=False))
    before, generation = fingerprint(reg), reg.generation
    pid = int(run(reg.get("demo__pid").execute({}, ToolContext(env={}))).content)

    os.kill(pid, signal.SIGKILL)

    # The manager notices, says why, and starts the server again by itself; meanwhile the
    # array is the one turns had, so the blip costs no prompt-cache miss.
    call = run(reg.get("demo__echo").execute({"text": "x"}, ToolContext(env={})))
    assert call.is_error
    assert "MCP server demo lost its connection" in call.content
    assert "reconnecting" in call.content
    assert manager.statuses()["demo"].state == "reconnecting"
    assert "demo__echo" in resolve(reg, ctx=ToolContext(env={})).array_names
    assert fingerprint(reg) == before
    again = wait_for(lambda: succeeded(reg, "demo__pid"), what="the reconnect")
    assert int(again.content) != pid
    assert fingerprint(reg) == before
    assert reg.generation == generation


@pytest.mark.processes
def test_a_server_gone_longer_than_the_hold_hides_its_tools_with_the_reason_and_they_come_back(
    reg, tmp_path
):
    manager = make_manager(reg, tmp_path, hold=0.3)
    port = free_port()
    try:
        with http_server(port):
            connect(manager, http_config("remote", port, defer=False))
            before = fingerprint(reg)
            assert (
                run(reg.get("remote__echo").execute({"text": "hi"}, ToolContext(env={}))).content
                == "hi"
            )

        wait_for(
            lambda: manager.statuses()["remote"].state == "disconnected", what="the disconnect"
        )
        resolved = resolve(reg, ctx=ToolContext(env={}))
        hidden = resolved.reason_for("remote__echo")
        assert (hidden.layer, hidden.reason) == ("L4", "MCP server remote disconnected")
        assert "remote__echo" not in resolved.array_names
        failed = run(reg.get("remote__echo").execute({"text": "hi"}, ToolContext(env={})))
        assert failed.is_error
        assert "MCP server remote disconnected" in failed.content

        with http_server(port):
            wait_for(
                lambda: manager.statuses()["remote"].state == "connected", what="the reconnect"
            )
            assert fingerprint(reg) == before
            assert run(
                reg.get("remote__echo").execute({"text": "back"}, ToolContext(env={}))
            ).content == ("back")
    finally:
        manager.stop()


@pytest.mark.processes
def test_an_http_server_back_within_the_hold_never_changed_the_array(manager, reg):
    port = free_port()
    with http_server(port):
        connect(manager, http_config("remote", port, defer=False))
    before, generation = fingerprint(reg), reg.generation
    wait_for(lambda: manager.statuses()["remote"].state == "reconnecting", what="the loss")
    assert "remote__echo" in resolve(reg, ctx=ToolContext(env={})).array_names

    with http_server(port):
        wait_for(lambda: manager.statuses()["remote"].state == "connected", what="the reconnect")
        assert succeeded(reg, "remote__echo", {"text": "back"}).content == "back"
    assert (fingerprint(reg), reg.generation) == (before, generation)


@pytest.mark.parametrize("which", ["sdk", "raw"])
@pytest.mark.processes
def test_a_hung_server_is_found_by_a_ping_and_the_call_waiting_on_it_ends_with_the_reason(
    manager, reg, which
):
    # The SDK's server speaks 2026-07-28 (no ping: server/discover is the probe); the
    # hand-written one speaks the handshake era and answers ping.
    config = stdio_config("demo", timeout=120) if which == "sdk" else raw_config(timeout=120)
    connect(manager, config)
    pid = server_children(b"tests/mcp/server.py" if which == "sdk" else b"raw_server.py")[0]
    name = "demo__sleep" if which == "sdk" else "raw__honest_reader"
    arguments = {"seconds": 60} if which == "sdk" else {}

    os.kill(pid, signal.SIGSTOP)
    try:
        # The call's timeout is 120 s; the probe ends it long before, and says why.
        result = run(reg.get(name).execute(arguments, ToolContext(env={})))
        status = manager.statuses()[config.name]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    assert result.is_error
    assert "it stopped answering: no reply to a ping within 3 s" in result.content
    assert "timed out" not in result.content
    assert status.state == "reconnecting"
    wait_for(lambda: manager.statuses()[config.name].state == "connected", what="the restart")
    wait_for(lambda: pid not in server_children(b"server.py"), what="the hung process to go")


@pytest.mark.processes
def test_progress_restarts_the_timeout_and_silence_ends_it(manager, reg):
    connect(manager, stdio_config("demo", timeout=0.5))

    # 40 steps 0.05 s apart: 2 s in all, four times the timeout, never 0.5 s silent.
    counted = run(reg.get("demo__count_up").execute({"steps": 40}, ToolContext(env={})))
    silent = run(reg.get("demo__sleep").execute({"seconds": 2}, ToolContext(env={})))

    assert counted.content == "counted to 40"
    assert silent.is_error
    assert "timed out after 0.5 s without progress" in silent.content


@pytest.mark.processes
def test_a_call_still_reporting_progress_is_stopped_at_the_ceiling(manager, reg, tmp_path):
    counter = tmp_path / "calls.txt"
    connect(
        manager,
        stdio_config("demo", "--counter", str(counter), timeout=0.5, timeout_ceiling=1.0),
    )

    endless = run(reg.get("demo__count_up").execute({"steps": 400}, ToolContext(env={})))

    assert endless.is_error
    assert "stopped at its limit of 1 s, still reporting progress" in endless.content
    assert "counted" not in endless.content
    assert succeeded(reg, "demo__echo", {"text": "still here"}).content == "still here"


@pytest.mark.processes
def test_a_stdio_server_gets_its_configured_environment_and_none_of_ours(manager, reg, monkeypatch):
    monkeypatch.setenv("TOOLHUB_OWN_SECRET", "never-for-a-server")
    connect(manager, stdio_config("demo", env=(("SERVER_TOKEN", "for-the-server"),)))

    def getenv(name: str) -> str:
        return run(reg.get("demo__getenv").execute({"name": name}, ToolContext(env={}))).content

    assert getenv("SERVER_TOKEN") == "for-the-server"
    assert getenv("TOOLHUB_OWN_SECRET") == "<unset>"


@pytest.mark.processes
def test_a_changed_listing_reaches_the_next_resolution_but_never_a_frozen_turn(manager, reg):
    port = free_port()
    with http_server(port, "--tools", "1"):
        connect(manager, http_config("remote", port, defer=False))
        frozen = TurnTools(resolve(reg, ctx=ToolContext(env={})))
        sent = frozen.tools_json()

    with http_server(port, "--tools", "2"):
        wait_for(lambda: reg.get("remote__noop_001") is not None, what="the new listing")
        assert frozen.tools_json() == sent
        assert "remote__noop_001" not in frozen.tools_json()
        assert "remote__noop_001" in resolve(reg, ctx=ToolContext(env={})).array_names


@pytest.mark.processes
def test_after_a_configuration_change_the_kept_tools_follow_the_new_connection(manager, reg):
    connect(manager, stdio_config("demo", defer=False))
    before, echo = fingerprint(reg), reg.get("demo__echo")
    first_pid = int(succeeded(reg, "demo__pid").content)

    manager.reconcile([stdio_config("demo", defer=False, env=(("A", "1"),))], wait=10)
    second = wait_for(lambda: succeeded(reg, "demo__pid"), what="the new connection")

    assert int(second.content) != first_pid
    assert reg.get("demo__echo") is echo  # unchanged tools are kept as they were
    assert fingerprint(reg) == before
    os.kill(int(second.content), signal.SIGKILL)
    failed = run(echo.execute({"text": "x"}, ToolContext(env={})))
    assert "MCP server demo lost its connection" in failed.content


def server_children(command: bytes = b"tests/mcp/server.py") -> list[int]:
    """Our child processes whose command line holds ``command`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and command in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.processes
def test_removing_a_server_unregisters_its_tools_and_stops_its_process(manager, reg):
    connect(manager, stdio_config("demo"))
    assert len(reg) > 0
    assert len(server_children()) == 1

    manager.reconcile([], wait=20)

    assert reg.names() == []
    assert manager.statuses() == {}
    wait_for(lambda: not server_children(), what="the server process to end")


@pytest.mark.processes
def test_a_command_that_never_speaks_mcp_is_reported_and_retried_not_waited_on(reg, tmp_path):
    errlog = (tmp_path / "mcp-stderr.log").open("w")
    manager = McpManager(reg, list_timeout=0.5, backoff_initial=5, errlog=errlog)
    silent = McpServerConfig(name="silent", transport="stdio", command="sleep", args=("60",))
    try:
        manager.reconcile([silent], wait=10)

        status = wait_for(
            lambda: (
                manager.statuses()["silent"].state == "disconnected"
                and manager.statuses()["silent"]
            ),
            what="the handshake to time out",
        )
        assert status.error == "TimeoutError"
        assert reg.names() == []
        wait_for(lambda: not server_children(b"sleep\x0060"), what="the silent process to end")
    finally:
        manager.stop()
        errlog.close()


@pytest.mark.processes
def test_reconciles_apply_in_order_whatever_their_timing(manager, reg):
    config = stdio_config("demo")
    manager.reconcile([config])
    manager.reconcile([])
    manager.reconcile([config])
    manager.reconcile([], wait=30)

    assert reg.names() == []
    assert manager.statuses() == {}
    wait_for(lambda: not server_children(), what="every server process to end")


@pytest.mark.processes
def test_a_tool_the_allowlist_dropped_is_refused_to_a_turn_that_froze_it(manager, reg, tmp_path):
    counter = tmp_path / "calls.txt"
    connect(manager, stdio_config("demo", "--counter", str(counter)))
    echo = reg.get("demo__echo")  # what a running turn holds

    manager.reconcile(
        [stdio_config("demo", "--counter", str(counter), allowlist=("add",))], wait=20
    )
    wait_for(lambda: reg.names() == ["demo__add"], what="the narrowed listing")
    refused = run(echo.execute({"text": "x"}, ToolContext(env={})))

    assert refused.is_error
    assert "no longer offers this tool" in refused.content
    assert not counter.exists()


def test_header_values_that_an_http_client_would_quote_in_its_errors_are_refused():
    with pytest.raises(ValueError, match="surrounding spaces") as refused:
        McpServerConfig(
            name="remote",
            transport="streamable_http",
            url="http://127.0.0.1:9/mcp",
            allow_private=True,
            headers=(("Authorization", "Bearer sk-secret "),),
        )
    assert "sk-secret" not in str(refused.value)
    config = McpServerConfig(
        name="remote", transport="stdio", command="x", env=(("TOKEN", "sk-secret"),)
    )
    assert config.redact("failed: sk-secret rejected") == "failed: *** rejected"


@pytest.mark.parametrize(
    ("remote", "expected"),
    [
        ("search", "gh__search"),
        ("list-issues", "gh__list-issues"),
        ("files.read", "gh__files_read-"),
        ("x" * 80, "gh__" + "x" * 51 + "-"),
    ],
)
def test_tool_names_are_prefixed_and_cleaned_without_collisions(remote, expected):
    name = tool_name("gh", remote)
    assert name.startswith(expected)
    assert len(name) <= 64


def test_a_cleaned_name_never_meets_the_valid_name_it_was_cleaned_into():
    # A cleaned name carries a hash of the original: "files.read" and "files_read"
    # (itself a valid name) stay two different tools.
    assert tool_name("gh", "files_read") == "gh__files_read"
    assert tool_name("gh", "files.read") != "gh__files_read"


def test_a_server_name_that_could_not_be_split_back_is_refused():
    for bad in ("Bad", "has_underscore", "", "x" * 25, "-lead"):
        with pytest.raises(ValueError, match="MCP server name"):
            McpServerConfig(name=bad, transport="stdio", command="true")


# --- annotations: plan mode and approval ---------------------------------------------

RAW_SERVER = Path(__file__).resolve().parents[2] / "mcp" / "raw_server.py"


def raw_config(*args: str, **fields) -> McpServerConfig:
    """The hand-written server (tests/mcp/raw_server.py): hints that are not booleans."""
    return McpServerConfig(
        name="raw",
        transport="stdio",
        command=sys.executable,
        args=(str(RAW_SERVER), *args),
        **fields,
    )


def plan(reg: ToolRegistry):
    return resolve(reg, ctx=ToolContext(env={}, mode="plan"))


def listed(name: str, annotations=None):
    from mcp_types import Tool as McpTool

    return McpTool(name=name, input_schema={"type": "object"}, annotations=annotations)


@pytest.mark.parametrize(
    ("hints", "kind", "hidden_in_plan", "asks"),
    [
        ({"read_only_hint": True}, "read-only", False, False),
        ({"read_only_hint": True, "destructive_hint": True}, "read-only", False, False),
        ({"read_only_hint": False, "destructive_hint": True}, "destructive", True, True),
        ({"read_only_hint": False}, "destructive", True, True),
        ({"title": "Only a title"}, "destructive", True, True),
        ({"read_only_hint": False, "destructive_hint": False}, "additive", True, False),
        ({"destructive_hint": False}, "additive", True, False),
        (None, "unknown", True, False),
    ],
    ids=[
        "read-only",
        "read-only-wins-over-destructive",
        "destructive",
        "destructive-by-default",
        "title-only-is-destructive-by-default",
        "additive",
        "additive-with-read-only-left-to-its-default",
        "no-annotations",
    ],
)
def test_annotations_decide_plan_mode_and_approval_as_the_spec_defines_the_hints(
    hints, kind, hidden_in_plan, asks
):
    from mcp_types import ToolAnnotations

    annotations = None if hints is None else ToolAnnotations(**hints)
    listing = [listed("tool", annotations)]

    (asking,), _ = build_tools(stdio_config("demo"), listing, call=None, check=lambda: True)
    (silent,), _ = build_tools(
        stdio_config("demo", approve_destructive=False), listing, call=None, check=lambda: True
    )

    assert asking.effect.kind == kind
    assert ("plan" in asking.unsafe_in) is hidden_in_plan
    assert asking.needs_approval({}, ToolContext(env={})) is asks
    # The operator's switch turns the approval off and nothing else.
    assert silent.needs_approval({}, ToolContext(env={})) is False
    assert silent.unsafe_in == asking.unsafe_in


@pytest.mark.parametrize(
    ("parsed", "wire"),
    [
        ({"read_only_hint": True}, {"readOnlyHint": "true"}),
        ({"read_only_hint": True}, {"readOnlyHint": 1}),
        ({"read_only_hint": True}, {"readOnlyHint": "yes"}),
        ({"read_only_hint": False, "destructive_hint": False}, {"destructiveHint": "false"}),
        ({"read_only_hint": True}, "annotations"),
        (None, {"readOnlyHint": True}),
    ],
    ids=["string", "number", "yes", "string-false", "not-an-object", "parsed-away"],
)
def test_a_hint_the_sdk_coerced_from_its_wire_form_makes_the_tool_destructive(parsed, wire):
    # What the SDK hands over (parsed) next to what the server sent (wire): any hint that
    # was not already a JSON boolean is doubted, never believed.
    from mcp_types import ToolAnnotations

    annotations = None if parsed is None else ToolAnnotations(**parsed)

    (tool,), _ = build_tools(
        stdio_config("demo"),
        [listed("tool", annotations)],
        call=None,
        check=lambda: True,
        wire={"tool": wire},
    )

    assert tool.effect.kind == "destructive"
    assert "plan" in tool.unsafe_in
    assert tool.needs_approval({}, ToolContext(env={}))


def test_a_hint_that_is_not_a_boolean_even_after_parsing_is_never_read_only():
    from mcp_types import ToolAnnotations

    # A listing built past validation (model_construct), as a plugin or a future SDK might.
    odd = ToolAnnotations.model_construct(read_only_hint="true")

    (tool,), _ = build_tools(
        stdio_config("demo"), [listed("tool", odd)], call=None, check=lambda: True
    )

    assert tool.effect.kind == "destructive"
    assert "plan" in tool.unsafe_in


@pytest.mark.processes
def test_plan_mode_offers_a_servers_read_only_tool_and_says_why_it_hides_the_rest(manager, reg):
    connect(manager, stdio_config("demo", "--annotated", defer=False))

    planning = plan(reg)
    reasons = {
        hidden.name: (hidden.layer, hidden.reason)
        for hidden in planning.hidden
        if hidden.name.startswith("demo__")
    }

    assert [name for name in planning.array_names if name.startswith("demo__")] == ["demo__look"]
    assert reasons["demo__wipe"] == ("L3", "hidden in plan mode: the server marks it destructive")
    assert reasons["demo__tidy"] == (
        "L3",
        "hidden in plan mode: the server does not mark it read-only, and by MCP's defaults "
        "that makes it destructive",
    )
    assert reasons["demo__append"] == (
        "L3",
        "hidden in plan mode: the server does not mark it read-only (it changes things)",
    )
    assert reasons["demo__echo"] == (
        "L3",
        "hidden in plan mode: the server does not mark it read-only (it has no annotations)",
    )
    # Out of plan mode every one is offered; only the destructive ones ask first.
    everything = resolve(reg, ctx=ToolContext(env={}))
    assert {"demo__look", "demo__wipe", "demo__append", "demo__echo"} <= set(everything.array_names)
    asking = [name for name in reg.names() if reg.get(name).needs_approval({}, ToolContext())]
    assert asking == ["demo__tidy", "demo__wipe"]


@pytest.mark.processes
def test_hints_that_are_not_booleans_on_the_wire_are_never_believed_read_only(manager, reg):
    connect(manager, raw_config(defer=False))

    effects = {name: reg.get(name).effect.kind for name in reg.names()}
    planning = plan(reg)

    assert effects == {
        "raw__honest_reader": "read-only",
        "raw__quoted_true": "destructive",
        "raw__numeric_true": "destructive",
        "raw__quoted_false": "destructive",
        "raw__null_hints": "destructive",  # null is absent: MCP's defaults apply
        "raw__null_annotations": "unknown",
        "raw__twice": "destructive",  # listed read-only once and destructive once
    }
    assert [name for name in planning.array_names if name.startswith("raw__")] == [
        "raw__honest_reader"
    ]
    assert planning.reason_for("raw__quoted_true").reason == (
        "hidden in plan mode: the server's annotations are not plain booleans, so it counts "
        "as destructive"
    )
    assert "lists it twice" in planning.reason_for("raw__twice").reason
    assert reg.get("raw__quoted_true").needs_approval({}, ToolContext())
    assert not reg.get("raw__null_annotations").needs_approval({}, ToolContext())


@pytest.mark.processes
def test_a_hint_no_parser_reads_as_a_boolean_leaves_the_server_without_tools(manager, reg):
    # The SDK refuses the whole listing: nothing of that server is offered at all.
    manager.reconcile([raw_config("--unparseable")], wait=10)

    status = wait_for(
        lambda: manager.statuses()["raw"].state == "disconnected" and manager.statuses()["raw"],
        what="the listing to be refused",
    )

    assert "ValidationError" in status.error
    assert reg.names() == []


@pytest.mark.processes
def test_turning_approval_off_replaces_the_registered_tools_that_asked(manager, reg):
    connect(manager, stdio_config("demo", "--annotated"))
    wipe, look = reg.get("demo__wipe"), reg.get("demo__look")
    assert wipe.needs_approval({}, ToolContext())

    manager.reconcile([stdio_config("demo", "--annotated", approve_destructive=False)], wait=10)
    wait_for(
        lambda: (
            reg.get("demo__wipe") is not None
            and not reg.get("demo__wipe").needs_approval({}, ToolContext())
        ),
        what="the new rule to be registered",
    )

    assert reg.get("demo__look") is look  # a tool whose rules did not change is kept
    assert "plan" in reg.get("demo__wipe").unsafe_in


@pytest.mark.parametrize("which", ["sdk", "raw"])
@pytest.mark.processes
def test_a_list_changed_notification_relists_at_once_not_at_the_interval(reg, tmp_path, which):
    # Relisting every ten minutes: only the notification can bring the new tool in time.
    # The SDK's server speaks 2026-07-28 (a subscriptions/listen stream); the hand-written
    # one the handshake era (a plain notification).
    manager = make_manager(reg, tmp_path, health_interval=600)
    if which == "sdk":
        config, grow, grown_name = stdio_config("demo", "--lively"), {"name": "late"}, "grown_late"
    else:
        config, grow, grown_name = raw_config("--grows"), {}, "grown_0"
    try:
        connect(manager, config)
        frozen = TurnTools(resolve(reg, ctx=ToolContext(env={})))

        assert succeeded(reg, f"{config.name}__grow", grow)

        name = f"{config.name}__{grown_name}"
        grown = wait_for(lambda: reg.get(name), what="the new tool")
        assert succeeded(reg, name)
        assert name in resolve(reg, ctx=ToolContext(env={})).names
        assert name not in frozen.resolved.names
        assert grown.origin == f"mcp:{config.name}"
    finally:
        manager.stop()


@pytest.mark.processes
def test_a_servers_log_messages_are_kept_cut_and_cleaned_at_info_and_above(manager, reg):
    connect(manager, stdio_config("demo", "--lively"))
    noisy = "disk \x1b[31malmost\u202e full " + "x" * 5_000

    for text, level in [(noisy, "warning"), ("chatter", "debug"), ("started", "info")]:
        assert succeeded(reg, "demo__shout", {"text": text, "level": level})

    logs = wait_for(lambda: len(manager.logs("demo")) >= 2 and manager.logs("demo"))
    assert [(line.level, line.logger) for line in logs] == [
        ("warning", "shouter"),
        ("info", "shouter"),
    ]
    assert logs[0].text.startswith("disk [31malmost full x")
    assert len(logs[0].text) == 1_000
    assert logs[1].text == "started"


@pytest.mark.processes
def test_a_servers_instructions_join_the_catalog_only_while_its_tools_are_offered(manager, reg):
    connect(manager, stdio_config("demo", "--instructions", "Use add for sums.\x07"))
    note = "MCP server demo says how to use its tools:\nUse add for sums.\n"

    offered = resolve(reg, ctx=ToolContext(env={}))
    # In plan mode every tool of this server is hidden (none is marked read-only).
    planned = plan(reg)

    assert offered.catalog.endswith(note)
    assert offered.notes == (("mcp:demo", note),)
    assert note not in planned.catalog
    assert planned.notes == ()
    # Counted with the catalog, exactly: the same server without instructions costs less
    # by the note's own tokens.
    manager.reconcile([stdio_config("demo")], wait=10)
    wait_for(lambda: reg.note("mcp:demo") == "", what="the plain server")
    plain = resolve(reg, ctx=ToolContext(env={}))
    assert token_cost(offered).catalog - token_cost(plain).catalog == count_cached(note)


@pytest.mark.processes
def test_a_server_with_resources_gets_two_readers_that_list_and_read_them_exactly(manager, reg):
    connect(manager, stdio_config("demo", "--lively"))

    listing = succeeded(reg, "demo__list_resources")
    text = succeeded(reg, "demo__read_resource", {"uri": "note://greeting"})
    binary = succeeded(reg, "demo__read_resource", {"uri": "blob://pixel"})
    link = succeeded(reg, "demo__linked")
    unknown = run(
        reg.get("demo__read_resource").execute({"uri": "note://nothing"}, ToolContext(env={}))
    )

    assert listing.content.splitlines() == [
        "Resources of MCP server demo (read one with demo__read_resource):",
        "- note://greeting — greeting (text/plain): A friendly note.",
        "- blob://pixel — pixel (image/png)",
    ]
    assert text.content == EXACT_TEXT  # as sent, CR and joiners included
    # An image blob reaches the model as the image it is.
    assert binary.content == "[image 1: image/png, about 69 bytes]"
    assert [(image.media_type, image.data) for image in binary.images] == [("image/png", PIXEL)]
    assert link.content == (
        "[resource greeting, text/plain at note://greeting; read it with demo__read_resource]"
    )
    assert unknown.is_error
    assert "demo__read_resource: the MCP server answered with an error" in unknown.content
    # Read-only by construction: plan mode offers both readers.
    assert {"demo__list_resources", "demo__read_resource"} <= set(plan(reg).names)


@pytest.mark.processes
def test_a_server_declaring_resources_with_none_behind_them_gets_no_readers(manager, reg):
    connect(manager, stdio_config("demo"))

    assert reg.get("demo__list_resources") is None
    assert reg.get("demo__read_resource") is None


def test_structured_content_is_kept_beside_the_text_and_is_the_text_when_there_is_none():
    from mcp_types import CallToolResult, TextContent

    beside = CallToolResult(
        content=[TextContent(type="text", text="It is cold.")], structured_content={"c": -3}
    )
    alone = CallToolResult(content=[], structured_content={"c": -3})

    assert result_text(beside).content == "It is cold."
    assert result_text(beside).structured == {"c": -3}
    assert result_text(alone).content == '{"c": -3}'
    assert result_text(alone).structured == {"c": -3}


def test_structured_content_that_repeats_an_image_is_not_sent_again_as_text():
    """As server-filesystem's read_media_file sends it: the image, and the same image in
    structuredContent."""
    from mcp_types import CallToolResult, ImageContent

    from tests.mcp.server import PIXEL

    image = ImageContent(type="image", data=PIXEL, mime_type="image/png")
    both = CallToolResult(
        content=[image],
        structured_content={"content": [{"type": "image", "data": PIXEL, "mimeType": "image/png"}]},
    )

    result = result_text(both)

    assert result.content == "[image 1: image/png, about 69 bytes]"
    assert PIXEL not in result.content
    assert [image.data for image in result.images] == [PIXEL]


@pytest.mark.processes
def test_a_servers_prompts_are_listed_and_filled_in_as_a_persons_message(manager, reg):
    connect(manager, stdio_config("demo", "--lively"))

    prompts = {prompt.name: prompt for prompt in manager.prompts()}
    review = prompts["review"]
    filled = run(
        manager.get_prompt(
            "demo", "review", {"code": "x = 1\r\n", "focus": "style"}, ctx=ToolContext(env={})
        )
    )
    default = run(
        manager.get_prompt("demo", "review", {"code": "y", "focus": ""}, ctx=ToolContext(env={}))
    )
    missing = run(manager.get_prompt("demo", "review", {"focus": "style"}, ctx=ToolContext(env={})))
    unknown_argument = run(
        manager.get_prompt("demo", "hello", {"name": "x"}, ctx=ToolContext(env={}))
    )
    unknown_prompt = run(manager.get_prompt("demo", "nothing", {}, ctx=ToolContext(env={})))

    assert sorted(prompts) == ["hello", "review"]
    assert (review.title, review.description) == ("Review code", "Ask for a review of some code.")
    assert [(a.name, a.required) for a in review.arguments] == [("code", True), ("focus", False)]
    assert filled.content == "Please review this code for style:\n\nx = 1\r\n"
    assert default.content == "Please review this code for bugs:\n\ny"
    assert (missing.is_error, missing.content) == (True, "review needs code")
    assert unknown_argument.content == "hello takes no argument 'name'"
    assert unknown_prompt.content == "MCP server demo offers no prompt 'nothing' now"
    assert manager.prompts() == [prompts["hello"], review]


@pytest.mark.processes
def test_prompts_and_resources_no_client_can_parse_cost_the_server_nothing_but_them(manager, reg):
    connect(manager, raw_config("--bad-listings"))

    assert succeeded(reg, "raw__honest_reader").content == "honest_reader"
    assert [prompt for prompt in manager.prompts() if prompt.server == "raw"] == []
    assert manager.resources() == []
    assert reg.get("raw__read_resource") is None


@pytest.mark.processes
def test_a_server_that_fails_to_start_keeps_its_last_stderr_lines_with_secrets_redacted(
    manager,
):
    script = (
        "import sys\n"
        "for n in range(40): print(f'line {n}', file=sys.stderr)\n"
        "print('Traceback: KeyError: token sk-live-123456 was refused', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    broken = McpServerConfig(
        name="broken",
        transport="stdio",
        command=sys.executable,
        args=("-c", script),
        env=(("TOKEN", "sk-live-123456"),),
    )

    manager.reconcile([broken], wait=10)
    status = wait_for(
        lambda: manager.statuses()["broken"].stderr and manager.statuses()["broken"],
        what="the failure and what the server wrote",
    )

    assert status.state != "connected"
    assert status.stderr[-1] == "Traceback: KeyError: token *** was refused"
    assert len(status.stderr) == 20
    assert status.stderr[0] == "line 21"


def test_an_image_sent_as_a_blob_resource_reaches_the_model_and_other_blobs_reach_the_person():
    from mcp_types import BlobResourceContents, CallToolResult, EmbeddedResource

    def blob(uri: str, mime: str, data: str) -> EmbeddedResource:
        contents = BlobResourceContents(uri=uri, mime_type=mime, blob=data)
        return EmbeddedResource(type="resource", resource=contents)

    result = result_text(
        CallToolResult(
            content=[
                blob("file:///chart.png", "image/png", PIXEL),
                blob("file:///data.bin", "application/octet-stream", "AAAA"),
                blob("file:///broken.zip", "application/zip", "not base64!"),
            ]
        )
    )

    assert result.content.splitlines() == [
        "[resource file:///chart.png]",
        "[image 1: image/png, about 69 bytes]",
        "[resource file:///data.bin]",
        "[file offered to the person: data.bin, application/octet-stream, 3 bytes]",
        "[resource file:///broken.zip]",
        "[file broken.zip (application/zip, about 8 bytes) not offered: its data is not base64]",
    ]
    assert [image.data for image in result.images] == [PIXEL]
    assert [(file.name, file.data) for file in result.files] == [("data.bin", b"\0\0\0")]


@pytest.mark.processes
def test_a_pdf_and_a_recording_a_server_sends_reach_the_person_as_files_and_the_model_as_lines(
    manager, reg
):
    connect(manager, stdio_config("demo", "--lively"))

    report = succeeded(reg, "demo__report")

    pdf, recording = report.files
    assert (pdf.name, pdf.media_type, pdf.data) == (
        "q3 summary.pdf",
        "application/pdf",
        REPORT_PDF,
    )
    assert (recording.name, recording.media_type, recording.data) == (
        "audio.wav",
        "audio/wav",
        RECORDING_WAV,
    )
    assert report.content.splitlines() == [
        "Here is the report.",
        f"[resource {REPORT_URI}]",
        f"[file offered to the person: q3 summary.pdf, application/pdf, {len(REPORT_PDF)} bytes]",
        f"[file offered to the person: audio.wav, audio/wav, {len(RECORDING_WAV)} bytes]",
    ]
    # The model never reads a file's bytes, in base64 or otherwise.
    assert base64.b64encode(REPORT_PDF).decode() not in report.content
    assert "%PDF" not in report.content
    assert report.images == ()


def test_a_binary_resource_read_with_the_reader_is_offered_to_the_person_not_the_model():
    from mcp_types import BlobResourceContents, ReadResourceResult

    from toolhub.tools.mcp.results import resource_text

    pdf = BlobResourceContents(
        uri=REPORT_URI, mime_type="application/pdf", blob=base64.b64encode(REPORT_PDF).decode()
    )

    result = resource_text(ReadResourceResult(contents=[pdf]))

    assert result.content == (
        f"[file offered to the person: q3 summary.pdf, application/pdf, {len(REPORT_PDF)} bytes]"
    )
    assert [(file.name, file.data) for file in result.files] == [("q3 summary.pdf", REPORT_PDF)]
