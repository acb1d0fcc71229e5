"""Whether a connected MCP server is alive (``probe_forever``): a cheap request every few
seconds (``McpManager.probe_timing``: a second over stdio, 3 s over HTTP), and what a
missed answer means.

Invariants:
- A probe unanswered while the server answered another request or reported progress on
  one (``transport.Heard``) belongs to a busy server: it is probed again at once, so a
  server that stops for good is found within one interval and two probe timeouts.
- With calls waiting on it, a stdio server whose processes run may be silent as long as a
  call of it may (its idle ``timeout``): many servers take one request at a time, or block
  on a call's work, and answer no ping meanwhile. A stopped process (SIGSTOP, a debugger)
  is never at work.
- Anything else unanswered is a hung server: the connection is lost with the reason, and
  every call waiting on it ends with that reason.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from toolhub.tools.mcp.transport import describe, probe_once, server_running

if TYPE_CHECKING:
    from toolhub.tools.mcp.connection import Connection


async def probe_forever(connection: Connection, client: Any, lost: asyncio.Event) -> None:
    """Probe ``connection``'s server on ``client`` until ``lost``; a hung one is lost
    within seconds, not at some call's timeout."""
    interval, limit = connection.manager.probe_timing(connection.config)
    wait = interval
    while not lost.is_set():
        await asyncio.sleep(wait)
        wait = interval
        sent = time.monotonic()
        try:
            async with asyncio.timeout(limit):
                await probe_once(client)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            if connection.heard.at > sent:
                wait = 0
                continue
            if await _at_work(connection):
                continue
            connection.went_away(
                client, f"it stopped answering: no reply to a ping within {limit:g} s"
            )
        except Exception as exc:
            connection.went_away(client, connection.config.redact(describe(exc)))


async def _at_work(connection: Connection) -> bool:
    """Whether a server that missed a probe is at a call's work: calls wait on it, it has
    been silent no longer than a call of it may be, and its processes run (stdio only:
    /proc says; an HTTP server answers probes beside its calls)."""
    silent = time.monotonic() - connection.heard.at
    if not connection.calls or silent >= connection.config.timeout:
        return False
    if connection.stderr is None:
        return False
    return await asyncio.to_thread(server_running, connection.stderr) is True
