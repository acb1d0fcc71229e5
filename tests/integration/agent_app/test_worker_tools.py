"""Worker tools end to end: turns in this process (the session socket, the runner, the
fake Messages API), a real Celery worker process on the Redis broker, one PostgreSQL.

What a person would notice: the result reaches the chat, output streams while the tool
runs (coalesced, with a last frame), Stop stops it (its processes too), a tool that
overruns is stopped with its cleanup, a killed worker gives an error instead of a hung
turn and takes its bash command's sandbox with it, a disabled tool never reaches a
worker, and nothing runs twice.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path

import pytest
from channels.db import database_sync_to_async

from tests.conftest import celery_worker, namespace_survivors
from tests.fakes import Reply
from tests.integration.chat import events, open_socket, send, until
from tests.integration.worker_env import worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services, pytest.mark.processes]


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker):
    """A real Celery worker (one prefork child) serving the tools queue, on the test
    database and this process's Redis; yields its log file."""
    var_dir, env = worker_env()
    log = var_dir / "worker.log"
    try:
        with celery_worker(env, log=log):
            yield log
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)


@pytest.fixture
def tools(registry_state, settings):
    """The worker's tools in this process's registry too, and a quick loss bound."""
    from tests.integration import worker_tools

    for tool in worker_tools.TOOLS:
        if tool.name not in registry_state:
            registry_state.register(tool)
    settings.TOOLHUB_RUN_LOST_AFTER = 3.0
    return worker_tools


@database_sync_to_async
def new_session(user, **kwargs):
    from sessions_app.services import session_create

    return session_create(user=user, **kwargs)


@database_sync_to_async
def runs(session):
    from agent_app.models import ToolRun

    return list(ToolRun.objects.filter(session=session).order_by("created"))


def _result(frames) -> dict:
    return events(frames, "tool_result")[0]["data"]


def _tails(frames) -> list[dict]:
    return [frame for frame in frames if frame["type"] == "tail"]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


async def _start(owner, model, calls, *, until_tail):
    """Start a turn that makes ``calls``; returns its socket and session once a tail frame
    holds ``until_tail``."""
    model.replies.extend([Reply(tool_calls=calls), Reply(text="done")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go"})
    while True:
        frame = await socket.receive_json_from(timeout=30)
        if frame["type"] == "tail" and until_tail in frame["tail"]:
            return socket, session


async def _turn(owner, model, calls, *, timeout=60):
    """One turn that makes ``calls`` then answers "done"; returns its frames and session."""
    model.replies.extend([Reply(tool_calls=calls), Reply(text="done")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go"})
    frames = await until(socket, timeout=timeout)
    await socket.disconnect()
    return frames, session


async def test_a_worker_tool_runs_on_a_worker_and_its_result_reaches_the_turn(
    owner, model, tools, worker, tmp_path
):
    tally = tmp_path / "tally"
    frames, session = await _turn(owner, model, [("toolu_1", "tally", {"path": str(tally)})])

    assert (_result(frames)["status"], _result(frames)["content"]) == ("ok", "tallied")
    assert model.requests[1].body["messages"][-1]["content"][0]["content"] == "tallied"
    assert tally.read_text() == "ran\n"
    (run,) = await runs(session)
    assert run.status == "succeeded"
    assert run.worker
    assert not run.worker.endswith(f":{os.getpid()}")


async def test_a_redelivered_task_never_runs_a_finished_tool_again(
    owner, model, tools, worker, tmp_path
):
    from agent_app.tasks import tool_run

    tally = tmp_path / "tally"
    _, session = await _turn(owner, model, [("toolu_1", "tally", {"path": str(tally)})])
    (run,) = await runs(session)

    for _ in range(2):
        sent = await asyncio.to_thread(tool_run.apply_async, args=[str(run.pk)])
        await asyncio.to_thread(sent.get, timeout=30)

    assert tally.read_text() == "ran\n"


async def test_the_tail_streams_in_order_coalesced_and_ends_with_a_last_frame(
    owner, model, tools, worker
):
    frames, session = await _turn(owner, model, [("toolu_1", "chatter", {"lines": 10_000})])

    tails = _tails(frames)
    assert tails, "no tail frame arrived"
    assert {frame["call_id"] for frame in tails} == {"toolu_1"}
    totals = [frame["bytes_total"] for frame in tails]
    assert totals == sorted(totals)
    assert tails[-1]["tail"].splitlines()[-1].startswith("line 9999 ")
    # At most ten a second (one more for the first, and the last).
    assert len(tails) <= tails[-1]["elapsed_ms"] / 100 + 2
    (run,) = await runs(session)
    assert run.bytes_total == tails[-1]["bytes_total"]
    assert run.tail.splitlines()[-1].startswith("line 9999 ")


async def test_fifty_megabytes_of_output_keep_the_workers_memory_bounded(
    owner, model, tools, worker
):
    _, session = await _turn(owner, model, [("toolu_w", "flood", {"megabytes": 1})])
    (warm,) = await runs(session)
    pid = int(warm.worker.rsplit(":", 1)[1])
    before = _rss_kib(pid)

    frames, session = await _turn(
        owner, model, [("toolu_f", "flood", {"megabytes": 50})], timeout=120
    )

    (run,) = await runs(session)
    assert run.worker == warm.worker
    assert _result(frames)["content"] == "printed 50 MB"
    assert run.bytes_total == 50 * 1024 * 1024
    assert len(run.tail) <= 4_000
    assert _rss_kib(pid) - before < 20 * 1024


async def test_stop_mid_run_ends_the_commands_processes_and_the_run_is_cancelled(
    owner, model, tools, worker, bubblewrap
):
    marker = f"sleep {4000 + os.getpid() % 1000}"
    command = f"echo started; {marker}; echo never"
    model.replies.extend(
        [Reply(tool_calls=[("toolu_b", "bash", {"command": command})]), Reply(text="done")]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "run it"})
    await until(socket, ("approval_request",))
    await send(socket, {"type": "approve", "call_id": "toolu_b", "allow": True})
    while True:
        frame = await socket.receive_json_from(timeout=30)
        if frame["type"] == "tail" and "started" in frame["tail"]:
            break
    assert _running(marker)

    await send(socket, {"type": "cancel"})
    frames = await until(socket, timeout=30)

    assert _result(frames)["status"] == "cancelled"
    # What it printed before the Stop is kept in the result, so a reload still shows it.
    assert _result(frames)["content"].startswith("started\n[stopped: ")
    assert events(frames, "turn_finished")[0]["data"]["reason"] == "cancelled"
    (run,) = await runs(session)
    assert run.status == "cancelled"
    await asyncio.sleep(0.5)
    assert not _running(marker)
    await socket.disconnect()


def _running(command: str) -> bool:
    """Whether any process on this machine runs ``command`` (read from /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if command in line:
            return True
    return False


async def test_a_tool_that_overruns_its_timeout_gets_its_cleanup_and_an_error(
    owner, model, tools, worker, tmp_path
):
    marker = tmp_path / "cleanup"
    frames, session = await _turn(owner, model, [("toolu_n", "napper", {"marker": str(marker)})])

    result = _result(frames)
    assert result["status"] == "error"
    assert "timed out after 1 s" in result["content"]
    assert marker.read_text() == "cleaned up"
    (run,) = await runs(session)
    assert run.status == "failed"


async def test_a_tool_deaf_to_its_timeout_is_stopped_at_the_soft_time_limit(
    owner, model, tools, worker
):
    frames, session = await _turn(owner, model, [("toolu_k", "blocker", {"seconds": 15})])

    result = _result(frames)
    assert result["status"] == "error"
    assert "time limit" in result["content"]
    (run,) = await runs(session)
    assert run.status == "failed"
    assert run.result["reason"] == "time limit"


async def test_a_worker_killed_mid_run_gives_the_turn_an_error_not_a_hang(
    owner, model, tools, worker
):
    from agent_app.models import ToolRun

    socket, session = await _start(
        owner, model, [("toolu_s", "sleeper", {"seconds": 60})], until_tail="second 1"
    )
    run = await database_sync_to_async(ToolRun.objects.get)(session=session)
    os.kill(int(run.worker.rsplit(":", 1)[1]), signal.SIGKILL)

    frames = await until(socket, timeout=30)

    result = _result(frames)
    assert result["status"] == "error"
    assert "worker" in result["content"]
    assert "lost" in result["content"]
    assert events(frames, "turn_finished")[0]["data"]["reason"] == "end_turn"
    (run,) = await runs(session)
    assert run.status == "lost"
    await socket.disconnect()


async def test_a_command_whose_worker_is_killed_dies_with_it_and_stops_ticking(
    owner, model, tools, worker, bubblewrap
):
    from agent_app.models import ToolRun

    command = (
        "readlink /proc/self/ns/pid; "
        "(while true; do date +%s%N > tick; sleep 0.05; done) & "
        "setsid sh -c 'while true; do date +%s%N > tock; sleep 0.05; done' & sleep 600"
    )
    model.replies.extend(
        [Reply(tool_calls=[("toolu_t", "bash", {"command": command})]), Reply(text="done")]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "tick"})
    await until(socket, ("approval_request",))
    await send(socket, {"type": "approve", "call_id": "toolu_t", "allow": True})
    while True:
        frame = await socket.receive_json_from(timeout=30)
        if frame["type"] == "tail" and "pid:[" in frame["tail"]:
            namespace = frame["tail"].splitlines()[0]
            break
    workspace = worker.parent / "workspaces" / str(session.pk)
    while not ((workspace / "tick").exists() and (workspace / "tock").exists()):
        await asyncio.sleep(0.05)
    assert await _ticking(workspace / "tick")

    run = await database_sync_to_async(ToolRun.objects.get)(session=session)
    os.kill(int(run.worker.rsplit(":", 1)[1]), signal.SIGKILL)
    frames = await until(socket, timeout=30)

    assert _result(frames)["status"] == "error"
    assert "lost" in _result(frames)["content"]
    assert not await _ticking(workspace / "tick")
    assert not await _ticking(workspace / "tock")
    assert await namespace_survivors(namespace) == []
    await socket.disconnect()


async def _ticking(tick: Path) -> bool:
    """Whether something still rewrites ``tick`` (a process of the command)."""
    before = await asyncio.to_thread(tick.read_text)
    await asyncio.sleep(0.5)
    return await asyncio.to_thread(tick.read_text) != before


async def test_a_globally_disabled_worker_tool_is_refused_before_anything_is_queued(
    owner, staff, model, tools, tmp_path
):
    from profiles_app.services import tool_disable_globally

    disable = database_sync_to_async(tool_disable_globally)
    # Disabled before the turn: the tool is not in the turn's contract at all.
    await disable(user=staff, tool="tally", reason="noisy")
    tally = tmp_path / "tally"
    frames, session = await _turn(owner, model, [("toolu_1", "tally", {"path": str(tally)})])
    result = _result(frames)
    assert (result["status"], result["content"]) == (
        "vetoed",
        "tally is turned off by an operator: noisy",
    )
    assert result["reason"] == "turned off by an operator (ops): noisy"
    assert await runs(session) == []
    assert not tally.exists()

    # Disabled while the call waits for approval: vetoed when it would be queued.
    model.replies.extend(
        [Reply(tool_calls=[("toolu_b", "bash", {"command": "echo hi"})]), Reply(text="ok")]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "run it"})
    await until(socket, ("approval_request",))
    await disable(user=staff, tool="bash", reason="not today")
    await send(socket, {"type": "approve", "call_id": "toolu_b", "allow": True})
    result = _result(await until(socket))
    assert (result["status"], result["content"]) == (
        "vetoed",
        "bash is turned off by an operator: not today",
    )
    assert result["reason"] == "turned off by an operator (ops): not today"
    assert await runs(session) == []
    await socket.disconnect()


async def test_without_a_broker_worker_tools_run_in_process_stream_and_stop(
    owner, model, tools, settings, tmp_path
):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    marker = tmp_path / "cleanup"
    socket, session = await _start(
        owner,
        model,
        [("toolu_s", "sleeper", {"seconds": 30, "marker": str(marker)})],
        until_tail="second 1",
    )

    await send(socket, {"type": "cancel"})
    frames = await until(socket, timeout=30)

    assert _result(frames)["status"] == "cancelled"
    assert marker.read_text() == "cleaned up"
    (run,) = await runs(session)
    assert (run.status, run.worker.endswith(f":{os.getpid()}")) == ("cancelled", True)
    assert "second 1" in run.tail
    await socket.disconnect()


async def test_a_socket_that_resumes_while_a_worker_tool_runs_gets_its_current_tail(
    owner, model, tools, worker
):
    talker, session = await _start(
        owner, model, [("toolu_s", "sleeper", {"seconds": 30})], until_tail="second 1"
    )

    late = await open_socket(session.pk, owner)
    await send(late, {"type": "resume", "after_seq": 0})
    replay = await until(late, ("usage",))
    tail = await late.receive_json_from(timeout=10)
    await send(talker, {"type": "cancel"})
    await until(late, timeout=30)

    assert "tool_call" in [event["kind"] for event in events(replay)]
    assert (tail["type"], tail["call_id"]) == ("tail", "toolu_s")
    assert tail["tail"].startswith("second 0\nsecond 1\n")
    await talker.disconnect()
    await late.disconnect()


def _live_run(owner, turn, *, session=None, call_id="toolu_x", **fields):
    from agent_app.models import ToolRun
    from sessions_app.services import session_create

    return ToolRun.objects.create(
        session=session or session_create(user=owner),
        turn=turn,
        call_id=call_id,
        tool="sleeper",
        **fields,
    )


def test_a_run_given_up_as_lost_is_told_to_stop(owner, tools):
    from datetime import timedelta

    from django.utils import timezone

    from agent_app.turns.run_row import cancel_asked
    from agent_app.turns.runs import runs_reap

    quiet = timezone.now() - timedelta(seconds=60)
    run = _live_run(owner, "turn-1", status="running", started=quiet, heartbeat=quiet)

    assert runs_reap() == 1

    run.refresh_from_db()
    assert (run.status, run.result["reason"]) == ("lost", "worker lost")
    # A worker that was only slow sees this on its next look and stops the tool.
    assert run.cancel_requested
    assert cancel_asked(run_id=run.pk)


def test_the_runs_of_a_turn_whose_server_died_are_stopped_and_a_late_copy_starts_none(owner, tools):
    from agent_app.turns.claim import _close_abandoned
    from agent_app.turns.run_row import cancel_asked
    from agent_app.turns.worker import _claim

    queued = _live_run(owner, "dead-turn", status="queued")
    running = _live_run(
        owner, "dead-turn", session=queued.session, status="running", call_id="toolu_2"
    )

    _close_abandoned(session_id=queued.session_id, turn_id="dead-turn")

    queued.refresh_from_db()
    running.refresh_from_db()
    # The queued one will never start, whichever copy of its message a worker gets.
    assert queued.status == "cancelled"
    assert _claim(run_id=queued.pk) is None
    # The running one is told to stop.
    assert running.cancel_requested
    assert cancel_asked(run_id=running.pk)


async def test_bash_output_with_nul_bytes_reaches_the_chat_and_the_run_with_markers(
    owner, model, tools, worker, bubblewrap
):
    from toolhub.lib.storable import NUL_MARK

    model.replies.extend(
        [
            Reply(tool_calls=[("toolu_z", "bash", {"command": r"printf 'a\0b\0'"})]),
            Reply(text="done"),
        ]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "print nuls"})
    await until(socket, ("approval_request",))
    await send(socket, {"type": "approve", "call_id": "toolu_z", "allow": True})
    frames = await until(socket, timeout=60)
    await socket.disconnect()

    assert (_result(frames)["status"], _result(frames)["content"]) == (
        "ok",
        f"a{NUL_MARK}b{NUL_MARK}\n[exit code 0]",
    )
    (run,) = await runs(session)
    assert run.status == "succeeded"
    assert NUL_MARK in run.result["content"]
