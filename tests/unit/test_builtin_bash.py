"""bash: output and exit code, live streaming, a clean environment, and no survivors.

What the sandbox forbids (other workspaces, the host's files, services and network, the
limits) is tested in tests/security/test_bash_sandbox.py.
"""

from __future__ import annotations

import asyncio

import pytest

from toolhub.tools import CancelToken, get

pytestmark = [pytest.mark.usefixtures("bubblewrap"), pytest.mark.processes]


@pytest.fixture
def workspace(reachable_tmp):
    root = reachable_tmp / "workspace"
    root.mkdir()
    return root


async def test_bash_returns_output_and_the_exit_code(ctx):
    ok = await get("bash").execute({"command": "echo hello; echo oops >&2"}, ctx)
    failed = await get("bash").execute({"command": "exit 3"}, ctx)

    assert ok.content == "hello\noops\n[exit code 0]"
    assert not ok.is_error
    assert failed.is_error
    assert failed.content.endswith("[exit code 3]")


async def test_bash_runs_in_the_workspace_without_server_secrets(ctx, workspace, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "do-not-leak")
    (workspace / "notes.txt").write_text("mine")

    result = await get("bash").execute(
        {"command": "pwd; echo home=$HOME key=${SECRET_KEY:-none}; cat notes.txt"}, ctx
    )

    assert result.content.splitlines()[:3] == ["/workspace", "home=/workspace key=none", "mine"]


async def test_files_the_command_writes_land_in_the_sessions_workspace(ctx, workspace):
    result = await get("bash").execute({"command": "mkdir -p out && echo made > out/f"}, ctx)

    assert not result.is_error
    assert (workspace / "out" / "f").read_text() == "made\n"


async def test_files_other_tools_wrote_stay_editable_by_the_command(ctx, workspace):
    (workspace / "deep").mkdir()
    (workspace / "deep" / "draft.txt").write_text("old")

    result = await get("bash").execute({"command": "echo new > deep/draft.txt"}, ctx)

    assert not result.is_error, result.content
    assert (workspace / "deep" / "draft.txt").read_text() == "new\n"


async def test_bash_streams_output_while_it_runs(ctx):
    from dataclasses import replace

    updates = []
    streaming = replace(ctx, on_update=updates.append)

    result = await get("bash").execute(
        {"command": "for i in 1 2 3; do echo tick $i; sleep 0.05; done"}, streaming
    )

    assert "".join(update.chunk for update in updates) == "tick 1\ntick 2\ntick 3\n"
    assert len(updates) >= 2
    assert updates[-1].tail == "tick 1\ntick 2\ntick 3\n"
    assert result.content.startswith("tick 1")


async def _still_ticking(tick) -> bool:
    """Whether something still rewrites ``tick`` (a process the command left behind)."""
    before = tick.read_text()
    await asyncio.sleep(0.5)
    return tick.read_text() != before


TICKER = "(while true; do date +%s%N > tick; sleep 0.05; done) &"


async def test_a_timeout_kills_everything_the_command_started_even_setsid(ctx, workspace):
    escapee = f"setsid sh -c '{TICKER.replace('tick', 'tock')} sleep 60' &"
    result = await get("bash").execute(
        {"command": f"{TICKER} {escapee} sleep 60", "timeout": 1}, ctx
    )

    assert result.is_error
    assert "timed out after 1 s" in result.content
    assert not await _still_ticking(workspace / "tick")
    assert not await _still_ticking(workspace / "tock")


async def test_cancel_kills_the_running_command(ctx, workspace):
    from dataclasses import replace

    token = CancelToken()
    running = asyncio.create_task(
        get("bash").execute({"command": f"{TICKER} sleep 60"}, replace(ctx, cancel=token))
    )
    while not (workspace / "tick").exists():
        await asyncio.sleep(0.02)
    token.cancel()
    result = await running

    assert result.status == "cancelled"
    assert not await _still_ticking(workspace / "tick")


async def test_the_command_cannot_read_the_servers_environment(ctx, monkeypatch):
    monkeypatch.setenv("SECRET_PROBE", "do-not-leak")

    result = await get("bash").execute(
        {
            "command": "cat /proc/$PPID/environ /proc/1/environ 2>/dev/null | tr '\\0' ' '; "
            "ls /proc | grep -cE '^[0-9]+$'"
        },
        ctx,
    )

    assert "do-not-leak" not in result.content


async def test_a_flood_of_output_keeps_its_start_and_end_within_the_cap(ctx):
    result = await get("bash").execute(
        {"command": "echo START; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo END"}, ctx
    )

    assert result.content.startswith("START")
    assert "END\n[exit code 0]" in result.content
    assert "characters omitted" in result.content
    assert len(result.content) <= get("bash").max_result_chars


def test_the_model_cannot_ask_for_a_timeout_beyond_the_maximum():
    assert get("bash").clamp_timeout(10**6) == 3600
    assert get("bash").clamp_timeout(0) == 1
