"""Latency of GET /healthz and GET /accounts/login/ through daphne, embedded default.

Starts daphne on a free loopback port with a scratch SQLite database, warms up, then
issues a bounded number of sequential requests per path and prints p50/p95/max latency
and requests per second. Figures are printed, never asserted.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

APP = "toolhub.asgi:application"
ROOT = Path(__file__).resolve().parent.parent
REQUESTS = 300
PATHS = ("/healthz", "/accounts/login/")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_listening(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("daphne exited before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("daphne did not listen within 30 s")


def main() -> None:
    with tempfile.TemporaryDirectory() as var_dir:
        env = {
            **{k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}},
            "DEBUG": "1",
            "TOOLHUB_VAR_DIR": var_dir,
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=ROOT,
            env=env,
            check=True,
        )
        port = _free_port()
        # Started as bin/run starts it (toolhub.serve: daphne with toolhub's settings).
        process = subprocess.Popen(
            [sys.executable, "-m", "toolhub.serve", "-b", "127.0.0.1", "-p", str(port), APP],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_listening(port, process)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                for path in PATHS:
                    for _ in range(20):
                        client.get(path)
                    timings = []
                    started = time.perf_counter()
                    for _ in range(REQUESTS):
                        t0 = time.perf_counter()
                        response = client.get(path)
                        timings.append((time.perf_counter() - t0) * 1000)
                        response.raise_for_status()
                    total = time.perf_counter() - started
                    timings.sort()
                    p95 = timings[int(len(timings) * 0.95) - 1]
                    print(
                        f"healthz-bench {path:<18} n={REQUESTS} "
                        f"p50={statistics.median(timings):.2f}ms p95={p95:.2f}ms "
                        f"max={timings[-1]:.2f}ms rps={REQUESTS / total:.0f}"
                    )
        finally:
            process.terminate()
            process.wait(timeout=10)


if __name__ == "__main__":
    main()
