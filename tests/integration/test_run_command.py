"""`make run`'s script on a machine with Redis: daphne serves, and a real Celery worker
starts beside it and stops with it."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx

from tests.conftest import ROOT, app_env, free_port


def _wait_healthy(url: str, process: subprocess.Popen, seconds: float = 90) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, "bin/run exited early"
        try:
            return httpx.get(url, timeout=5)
        except httpx.HTTPError:
            time.sleep(0.3)
    raise AssertionError("the product did not answer in time")


def _ping_workers(env: dict[str, str]) -> str:
    result = subprocess.run(
        [str(ROOT / ".venv/bin/celery"), "-A", "toolhub", "inspect", "ping", "--timeout", "3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.stdout + result.stderr


def test_with_redis_the_run_script_serves_and_runs_a_worker_that_stops_with_it(tmp_path, redis_url):
    # A Redis database of its own, so no other test's queue is touched.
    isolated = redis_url.rsplit("/", 1)[0] + "/7"
    port = free_port()
    env = app_env(tmp_path, REDIS_URL=isolated, PORT=str(port))
    env["PATH"] = f"{ROOT / '.venv/bin'}:{env['PATH']}"
    process = subprocess.Popen(
        [str(ROOT / "bin/run")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        health = _wait_healthy(f"http://127.0.0.1:{port}/healthz", process)
        assert health.status_code == 200
        assert health.json()["checks"]["broker"]["detail"] == "redis"
        deadline = time.monotonic() + 60
        replies = _ping_workers(env)
        while "pong" not in replies and time.monotonic() < deadline:
            replies = _ping_workers(env)
        assert "pong" in replies
    finally:
        # Ctrl-C in a terminal signals the whole foreground process group.
        os.killpg(process.pid, signal.SIGINT)
        stopped_by_ctrl_c = True
        try:
            output, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            stopped_by_ctrl_c = False
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()

    assert stopped_by_ctrl_c
    assert "Sign in at" in output
    assert "No nodes replied" in _ping_workers(env)
