"""Real MCP servers for the tests and the benchmark: ``server.py`` run over stdio (as a
child the client starts) or over streamable HTTP (a process on a local port)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from toolhub.tools.mcp import McpServerConfig

SERVER = Path(__file__).resolve().parent / "server.py"
OAUTH_SERVER = Path(__file__).resolve().parent / "oauth_server.py"


def stdio_config(name: str = "demo", *args: str, **fields) -> McpServerConfig:
    return McpServerConfig(
        name=name, transport="stdio", command=sys.executable, args=(str(SERVER), *args), **fields
    )


def http_config(name: str, port: int, **fields) -> McpServerConfig:
    # The tests' servers listen on loopback, which a deployment refuses by default.
    fields.setdefault("allow_private", True)
    return McpServerConfig(
        name=name, transport="streamable_http", url=f"http://127.0.0.1:{port}/mcp", **fields
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def http_server(port: int, *args: str, log: Path | None = None) -> Iterator[subprocess.Popen]:
    """``server.py`` over streamable HTTP on ``port``, up before this yields."""
    command = [sys.executable, str(SERVER), "--transport", "http", "--port", str(port), *args]
    with _serving(command, [port], log=log) as process:
        yield process


@contextmanager
def oauth_http_server(
    as_port: int, mcp_port: int, *args: str, log: Path | None = None
) -> Iterator[subprocess.Popen]:
    """``oauth_server.py``: its authorization server on ``as_port`` and the MCP server it
    protects on ``mcp_port``, both up before this yields."""
    command = [
        *(sys.executable, str(OAUTH_SERVER)),
        *("--as-port", str(as_port), "--mcp-port", str(mcp_port), *args),
    ]
    with _serving(command, [as_port, mcp_port], log=log) as process:
        yield process


@contextmanager
def node_http_server(script: Path, port: int, *args: str) -> Iterator[subprocess.Popen]:
    """A published Node server (``script``) over streamable HTTP on ``port``, as
    server-everything starts: ``node script streamableHttp`` with ``PORT`` set."""
    command = [shutil.which("node") or "node", str(script), *args]
    with _serving(command, [port], log=None, env={**os.environ, "PORT": str(port)}) as process:
        yield process


@contextmanager
def _serving(
    command: list[str], ports: list[int], *, log: Path | None, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen]:
    out = open(log, "a") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(command, stdout=out, stderr=out, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 30
        for port in ports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the MCP test server did not start on {port}") from None
                    time.sleep(0.05)
        yield process
    finally:
        kill(process)
        if log is not None:
            out.close()


def kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def children(pattern: str) -> list[int]:
    """This process's children whose command line holds ``pattern`` (stdio servers the
    client started), read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and pattern in command:
            found.append(int(entry.name))
    return sorted(found)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
