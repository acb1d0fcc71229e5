"""What runs under one connection's MCP client: its transport (a stdio process, or
streamable HTTP with the server's headers or its OAuth grant), that transport's read
stream watched for the annotations a listing carried as they came over the wire
(``watched``), what the server says besides its answers (a stdio server's stderr,
``StderrTail``; its log messages, ``log_line``), and the protocol's smallest requests
(``client_info``, ``probe_once``). ``describe`` says in one line why a connection failed.

Invariants: the watched stream passes every message through untouched, and what it notes
only ever makes a tool stricter (``_WatchedListing``); what a server writes or logs
reaches the ops page as untrusted text, cut, with its secrets redacted; an HTTP transport
connects only where the server's reach allows.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any, TextIO

from toolhub.tools.mcp.config import (
    CONFLICTING_HINT,
    MAX_LABEL_CHARS,
    MAX_LOG_CHARS,
    McpLogLine,
    McpServerConfig,
    untrusted_text,
)
from toolhub.tools.mcp.oauth import McpOAuthStore
from toolhub.tools.mcp.oauth_bearer import oauth_transport
from toolhub.tools.netguard import guard

# What a stdio server's stderr keeps for the ops page: its last lines, each cut.
STDERR_LINES = 20
STDERR_LINE_CHARS = 300


def describe(exc: BaseException) -> str:
    """One line for a failed connection; an exception group shows its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return untrusted_text(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, 300)


class Heard:
    """When a connection last heard its server answer a request or report progress on one
    (``time.monotonic()``): a probe that times out meanwhile belongs to a busy server, not
    a hung one. Log lines, requests of its own and lines that are not JSON-RPC do not
    count: a thread of a server whose work is stuck can still write those."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = time.monotonic()


class _WatchedListing:
    """A transport's read stream, passed through untouched, that notes when the server
    answered or reported progress (``heard``) and the ``annotations`` of every tool a
    result lists exactly as they arrived, before the SDK parses (and coerces) them. A note
    is only ever used to doubt a parsed hint, never to trust one: a note from a result
    that was not a listing can make a tool stricter, not looser."""

    def __init__(self, stream: Any, notes: dict[str, Any], heard: Heard) -> None:
        self._stream = stream
        self._notes = notes
        self._heard = heard

    def __getattr__(self, name: str) -> Any:
        # ``last_context`` and whatever else the SDK looks for on its own streams.
        return getattr(self._stream, name)

    async def __aenter__(self) -> _WatchedListing:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._stream.__aexit__(*exc_info)

    def __aiter__(self) -> _WatchedListing:
        return self

    async def __anext__(self) -> Any:
        item = await self._stream.__anext__()
        self._note(item)
        return item

    async def receive(self) -> Any:
        item = await self._stream.receive()
        self._note(item)
        return item

    def _note(self, item: Any) -> None:
        message = getattr(item, "message", None)
        method = getattr(message, "method", "")
        if message is not None and (method is None or method == "notifications/progress"):
            self._heard.at = time.monotonic()
        result = getattr(message, "result", None)
        listed = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(listed, list):
            return
        for entry in listed:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            name, annotations = entry["name"], entry.get("annotations")
            if name in self._notes and self._notes[name] != annotations:
                annotations = CONFLICTING_HINT
            self._notes[name] = annotations


@contextlib.asynccontextmanager
async def watched(
    transport: Any, notes: dict[str, Any], heard: Heard
) -> AsyncIterator[tuple[Any, Any]]:
    """``transport`` with its read stream watched: an answer or progress sets ``heard``, every
    tool a listing carries has its ``annotations`` noted in ``notes`` as they came over
    the wire."""
    async with transport as (read_stream, write_stream):
        yield _WatchedListing(read_stream, notes, heard), write_stream


def stdio_params(config: McpServerConfig) -> Any:
    """How a stdio server's process is started."""
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(
        command=config.command, args=list(config.args), env=dict(config.env) or None
    )


def http_transport(config: McpServerConfig, oauth_store: McpOAuthStore | None) -> Any:
    """A streamable HTTP server's transport: an OAuth server's with its stored grant
    (``oauth_bearer``), any other with its configured headers; either connects only
    where the server's reach allows (``toolhub.tools.netguard``)."""
    import httpcore2
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    if config.auth == "oauth":
        return oauth_transport(config, oauth_store)
    http = guard(create_mcp_http_client(headers=dict(config.headers)), httpcore2, config.reach)
    return streamable_http_client(config.url, http_client=http)


def log_line(config: McpServerConfig, params: Any) -> McpLogLine:
    """A log message the server sent, as the ops page shows it: untrusted text, cut, with
    the server's secrets redacted."""
    data = params.data
    text = data if isinstance(data, str) else json.dumps(data, default=str, ensure_ascii=False)
    return McpLogLine(
        at=time.time(),
        level=untrusted_text(str(params.level), 12),
        logger=untrusted_text(params.logger, MAX_LABEL_CHARS),
        text=config.redact(untrusted_text(text, MAX_LOG_CHARS)),
    )


class StderrTail:
    """A stdio server's stderr: passed through to the manager's log as before, and its
    last ``STDERR_LINES`` lines kept (each cut, secrets redacted), so a server that fails
    to start says why on the ops page and in the API, not only in the process's log.

    The server writes into a pipe; a daemon thread reads it until every writer closed
    it (the server exited and ``close`` dropped this side's copy)."""

    def __init__(self, config: McpServerConfig, through: IO[str] | None) -> None:
        self._config = config
        self._through = through
        self.lines: deque[str] = deque(maxlen=STDERR_LINES)
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        reader = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        self._thread = threading.Thread(
            target=self._read, args=(reader,), name=f"mcp-stderr-{config.name}", daemon=True
        )
        self._thread.start()

    def _read(self, reader: TextIO) -> None:
        with reader:
            for line in reader:
                self.lines.append(
                    self._config.redact(untrusted_text(line.rstrip("\n"), STDERR_LINE_CHARS))
                )
                target = self._through or sys.stderr
                with contextlib.suppress(Exception):
                    target.write(line)
                    target.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.close()

    def pipe(self) -> str:
        """The pipe the server writes its stderr into, as /proc names a process's fd."""
        return f"pipe:[{os.fstat(self.writer.fileno()).st_ino}]"

    def drain(self, timeout: float) -> None:
        """Until everything the exited server wrote is read (at most ``timeout``)."""
        self.close()
        self._thread.join(timeout)


def server_running(tail: StderrTail) -> bool | None:
    """Whether the processes of a stdio server (those writing into its stderr pipe: the
    command and what it started) run, none of them stopped; None where /proc cannot say
    (another system, the pipe already closed)."""
    try:
        pipe = tail.pipe()
        states = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/fd/2") == pipe:
                    stat = Path(f"/proc/{entry.name}/stat").read_text()
                    states.append(stat.rsplit(")", 1)[1].split()[0])
    except (OSError, ValueError):
        return None
    if not states:
        return None
    return not any(state in ("T", "t") for state in states)


def modern_versions() -> tuple[str, ...]:
    """The protocol versions from 2026-07-28 on: no handshake, no ``ping``, and change
    notifications on a ``subscriptions/listen`` stream."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return MODERN_PROTOCOL_VERSIONS


async def probe_once(client: Any) -> None:
    """One liveness round trip: ``ping`` where the protocol has it; 2026-07-28 removed
    it, and there ``server/discover`` (stateless, answered from what the server already
    knows) is the cheapest request a server must answer."""
    version = client.protocol_version
    if version in modern_versions():
        await client.session.send_discover(version)
    else:
        await client.session.send_ping()


def client_info() -> Any:
    from mcp_types import Implementation

    return Implementation(name="toolhub", version="1")
