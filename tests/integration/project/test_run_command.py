"""`make run`'s script on a machine with Redis: daphne serves, and a real Celery worker
starts beside it, is started again when it dies, and stops with it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, app_env, free_port
from tests.integration.faults import redis_server

pytestmark = pytest.mark.processes


def _as_from_a_terminal() -> None:
    """In the child, before bin/run starts: Ctrl-C's signal as a shell in a terminal
    leaves it, handled by default and not blocked. A signal ignored or blocked in the test
    process (by whatever ran in it before) would pass to the script, and a script cannot
    trap a signal that was ignored when it started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _signals(pid: int) -> str:
    """The signal masks of ``pid`` as the kernel reports them."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "gone"
    return " ".join(line for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def _wait_healthy(url: str, process: subprocess.Popen, seconds: float = 90) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, "bin/run exited early"
        try:
            return httpx.get(url, timeout=5)
        except httpx.HTTPError:
            time.sleep(0.3)
    raise AssertionError("the product did not answer in time")


def _ping_workers(env: dict[str, str], *, node: str | None = None) -> str:
    """What ``celery inspect ping`` says: after its whole timeout, or, asked of one
    ``node``, as soon as that node answers."""
    ping = [ROOT / ".venv/bin/celery", "-A", "toolhub", "inspect", "ping", "--timeout", "3"]
    result = subprocess.run(
        [*ping, *(["--destination", node] if node else [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.stdout + result.stderr


def _ready_worker(log: Path, starts: int, seconds: float = 60) -> str:
    """The node name of the ``starts``-th worker bin/run started, once it says it is ready:
    a ping before then only waits out its whole timeout, again and again while it starts."""
    deadline = time.monotonic() + seconds
    while len(ready := re.findall(r"(\S+@\S+) ready\.", log.read_text())) < starts:
        assert time.monotonic() < deadline, f"no worker ready:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    return ready[-1]


def _processes(session: int) -> dict[int, tuple[int, list[bytes]]]:
    """The processes of ``session``: pid -> (parent pid, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(stat[3]) == session:
            found[int(entry.name)] = (int(stat[1]), command)
    return found


def _workers(session: int) -> list[int]:
    """Pids of the Celery workers that bin/run started (not their pool processes)."""
    processes = _processes(session)
    return [
        pid
        for pid, (parent, command) in processes.items()
        if b"worker" in command
        and any(part.endswith(b"bin/run") for part in processes.get(parent, (0, []))[1])
    ]


def test_with_redis_the_run_script_serves_and_keeps_a_worker_that_stops_with_it(tmp_path):
    with redis_server() as redis:
        port = free_port()
        env = app_env(tmp_path, REDIS_URL=redis.url(), PORT=str(port))
        env["PATH"] = f"{ROOT / '.venv/bin'}:{env['PATH']}"
        log = tmp_path / "run.log"
        process = subprocess.Popen(
            [str(ROOT / "bin/run")],
            cwd=ROOT,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_as_from_a_terminal,
        )
        try:
            health = _wait_healthy(f"http://127.0.0.1:{port}/healthz", process)
            assert health.status_code == 200
            assert health.json()["checks"]["broker"]["detail"] == "redis"
            assert "pong" in _ping_workers(env, node=_ready_worker(log, 1))

            # A worker that dies (here: killed) is started again, and answers.
            (first,) = _workers(process.pid)
            os.kill(first, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while _workers(process.pid) in ([], [first]):
                assert time.monotonic() < deadline, f"no new worker:\n{log.read_text()[-3000:]}"
                time.sleep(0.2)
            (second,) = _workers(process.pid)
            assert second != first
            assert "pong" in _ping_workers(env, node=_ready_worker(log, 2))
        finally:
            # Ctrl-C in a terminal signals the whole foreground process group.
            os.killpg(process.pid, signal.SIGINT)
            stopped_by_ctrl_c = True
            left = ""
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stopped_by_ctrl_c = False
                # What did not stop, for whoever reads the failure.
                left = "\n".join(
                    f"{pid} (parent {parent}): {b' '.join(command).decode(errors='replace')}"
                    f" [{_signals(pid)}]"
                    for pid, (parent, command) in _processes(process.pid).items()
                )
                left += f"\nthis test process: [{_signals(os.getpid())}]"
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

        output = log.read_text()
        assert stopped_by_ctrl_c, f"still running:\n{left}\n\nlog:\n{output[-3000:]}"
        assert "Sign in at" in output
        assert "the Celery worker died (status 137); starting it again" in output
        assert "No nodes replied" in _ping_workers(env)
        # Nothing of it is left (the pool processes of the killed worker go on their own).
        deadline = time.monotonic() + 15
        while (left := _processes(process.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left == {}
