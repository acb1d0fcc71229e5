"""One MCP server's connection in this process (``Connection``): a supervising task on the
manager's loop that connects, keeps the listing fresh (``listing``), probes the server,
notices it going away, reconnects with backoff, and sends the calls and requests made on
it. A lost connection's own ending (for a stdio server: stdin closed, SIGTERM, SIGKILL,
seconds for a hung process) runs apart from the supervisor, so the next connection never
waits for the last one to die. What the server asks mid-call is answered for the call
that caused it (``answering``, ``callers``); what runs under the client is in ``transport``. The
invariants are in this package's docstring (``toolhub/tools/mcp/__init__.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from toolhub.tools.mcp.answering import Answering
from toolhub.tools.mcp.callers import CALLER, Caller, WaitingCalls
from toolhub.tools.mcp.config import (
    CLOSE_SECONDS,
    LOG_LINES,
    McpLogLine,
    McpNotSent,
    McpServerConfig,
    McpStatus,
    McpUnavailableError,
    instructions_note,
)
from toolhub.tools.mcp.listing import ServerListing
from toolhub.tools.mcp.liveness import probe_forever
from toolhub.tools.mcp.oauth import sign_in_needed, sign_in_reason
from toolhub.tools.mcp.transport import (
    Heard,
    StderrTail,
    client_info,
    describe,
    http_transport,
    log_line,
    modern_versions,
    stdio_params,
    watched,
)
from toolhub.tools.registry import Skipped

if TYPE_CHECKING:
    from toolhub.tools.mcp.manager import McpManager

logger = logging.getLogger(__name__)

# States in which a server's tools stay in the array: a server that was connected keeps
# its tools in place while it reconnects, so a brief blip changes no array and costs no
# prompt-cache miss; only after ``hold`` seconds without it do they leave.
SHOWN = frozenset({"connected", "reconnecting"})
# An OAuth server without a working grant: not retried until a sign-in.
NEEDS_SIGN_IN = "needs_sign_in"


class Connection:
    """One server: a supervising task on the manager's loop that connects, lists, keeps
    the listing fresh, probes the server, notices it going away, and reconnects with
    backoff."""

    def __init__(self, manager: McpManager, config: McpServerConfig) -> None:
        self.manager = manager
        self.config = config
        self.client: Any = None
        self.status = McpStatus(config.name, "connecting")
        self.lost = asyncio.Event()
        # When the server last answered or reported progress: a probe it did not answer
        # meanwhile belongs to a busy server, not a hung one (``liveness``).
        self.heard = Heard()
        # Lost connections still stopping their server (``_session_or_lost``).
        self.ending: set[asyncio.Task[Any]] = set()
        self.delay = manager.backoff_initial
        # The remote names registered now: a call for any other (dropped from the
        # listing or the allowlist since a turn froze its tools) is refused.
        self.offered: frozenset[str] = frozenset()
        self.closing = False
        self.stopping = asyncio.Event()
        self.listing = ServerListing(manager, config)
        # Calls waiting on the server now; ended with the reason when it is lost, so none
        # waits its whole timeout on a server known to be gone.
        self.calls: set[asyncio.Task[Any]] = set()
        # Which chat's call each waiting request is, and which were given up on lately:
        # a form or a sampling request the server sends mid-call goes to that person.
        self.waiting = WaitingCalls(config)
        self.answering = Answering(config, self.waiting)
        self.dropped: set[asyncio.Task[Any]] = set()
        self.hold: asyncio.TimerHandle | None = None
        self.logs: deque[McpLogLine] = deque(maxlen=LOG_LINES)
        # The stderr of the last stdio process started (none for streamable HTTP).
        self.stderr: StderrTail | None = None
        self.task = asyncio.get_running_loop().create_task(self._supervise())

    @property
    def reason(self) -> str:
        """Why a call cannot be made now (the text the model and the card show)."""
        name = self.config.name
        if self.status.state == "reconnecting":
            error = self.status.error
            return f"MCP server {name} lost its connection ({error}) and is reconnecting"
        if self.status.state == NEEDS_SIGN_IN:
            return sign_in_reason(name)
        return f"MCP server {name} disconnected"

    async def _supervise(self) -> None:
        while not self.closing:
            self.lost = lost = asyncio.Event()
            session = asyncio.get_running_loop().create_task(self._connected_session(lost))
            try:
                await self._session_or_lost(session, lost)
                error = "the connection closed"
            except asyncio.CancelledError:
                session.cancel()
                self._ending(session)
                raise
            except BaseException as exc:  # the SDK raises exception groups too
                if sign_in_needed(exc) is not None:
                    await self._until_signed_in()
                    return
                error = self.config.redact(describe(exc))
                if self.stderr is not None:
                    # Its last words explain the failure: read them all before it is told.
                    await asyncio.to_thread(self.stderr.drain, 1.0)
            self.client = None
            if self.closing:
                return
            if self.lost.is_set() and self.status.state == "reconnecting":
                error = self.status.error  # went_away said why, better than the ending
            else:
                self._lose(error)
            logger.warning(
                "MCP server %s: %s; retrying in %.1f s", self.config.name, error, self.delay
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.delay)
            self.delay = min(self.delay * 2, self.manager.backoff_max)

    async def _session_or_lost(self, session: asyncio.Task[None], lost: asyncio.Event) -> None:
        """Until ``session`` ends, or is lost. A lost one's ending (the SDK stopping a stdio
        server: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL) goes on apart, in ``ending``: a
        hung server is replaced as soon as it is found out, not seconds later."""
        watch = asyncio.ensure_future(lost.wait())
        try:
            await asyncio.wait({session, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        if session.done():
            session.result()
            return
        if self.closing and self.client is None:
            # Closed while it still opened (a server slow to start, or never answering):
            # nothing to wait for, and its process is stopped as the opening unwinds.
            session.cancel()
        self._ending(session)

    def _ending(self, session: asyncio.Task[None]) -> None:
        self.ending.add(session)
        session.add_done_callback(self._ended)

    def _ended(self, session: asyncio.Task[None]) -> None:
        self.ending.discard(session)
        # Its failure was already told (the connection was lost): read, never re-raised.
        failure = None if session.cancelled() else session.exception()
        if failure is not None:
            name = self.config.name
            logger.debug("MCP server %s: a lost connection ended with %s", name, describe(failure))

    async def _open(self, stack: contextlib.AsyncExitStack) -> Any:
        """A client on a new connection, entered on ``stack``; within the listing's time
        limit, so a command that never speaks MCP does not stay "connecting" forever."""
        from mcp import Client

        async with asyncio.timeout(self.manager.list_timeout):
            transport = watched(self._transport(), self.listing.wire, self.heard)
            if self.stderr is not None:
                # Registered first, so it runs last: after the process it was given to.
                stack.callback(self.stderr.close)
            return await stack.enter_async_context(
                Client(
                    transport,
                    mode="auto",
                    client_info=client_info(),
                    logging_callback=self._logged,
                    # 2026-07-28 sends log messages only to requests that opt in.
                    log_level="info",
                    message_handler=self.listing.notified,
                    elicitation_callback=self.answering.elicit,
                    # Declared only where the operator allows them (docs/mcp.md).
                    sampling_callback=self.answering.sample if self.config.sampling else None,
                    list_roots_callback=self._roots if self.config.workspace_roots else None,
                )
            )

    async def _roots(self, context: Any) -> Any:
        """The server-wide connection only lists and reads: it has no workspace, so no
        roots. Each chat's calls go through a connection of its own that has one
        (``ScopedConnection``)."""
        from mcp_types import ListRootsResult

        return ListRootsResult(roots=[])

    async def _connected_session(self, lost: asyncio.Event) -> None:
        """One connection, from opening to ``lost``: ``lost`` is this connection's own
        event, so one still ending never reads the next one's."""
        async with contextlib.AsyncExitStack() as stack:
            client = await self._open(stack)
            self.listing.changed.clear()
            await self._relist(client)
            self.manager.registry.set_note(
                f"mcp:{self.config.name}", instructions_note(self.config.name, client.instructions)
            )
            self.client = client
            self.delay = self.manager.backoff_initial
            loop = asyncio.get_running_loop()
            helpers = [loop.create_task(probe_forever(self, client, lost))]
            if client.protocol_version in modern_versions():
                helpers.append(loop.create_task(self.listing.listen(client)))
            try:
                while not self.closing:
                    await self.listing.until_due(lost, self.manager.health_interval)
                    if lost.is_set():
                        return
                    self.listing.changed.clear()
                    if not await self._unless_lost(self._relist(client), lost):
                        return
            finally:
                for helper in helpers:
                    helper.cancel()

    async def _logged(self, params: Any) -> None:
        self.logs.append(log_line(self.config, params))

    async def _unless_lost(self, work: Any, event: asyncio.Event) -> bool:
        """Run ``work`` unless the connection is lost first (``event``: a probe failing
        while a relisting waits on a hung server); False when it was."""
        job = asyncio.ensure_future(work)
        lost = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({job, lost}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # This wait itself was ended (the transport failed under it): the job goes
            # too, and its own ending is read, never reported as unretrieved.
            job.cancel()
            job.add_done_callback(lambda done: done.cancelled() or done.exception())
            raise
        finally:
            lost.cancel()
        if not job.done():
            job.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job
            return False
        job.result()
        return True

    async def _relist(self, client: Any) -> None:
        listed = await self.listing.refresh(client)
        self.offered = listed.offered
        if self.status.state != "connected":
            logger.info("MCP server %s connected: %d tools", self.config.name, listed.tools)
        self._set("connected", tools=listed.tools, skipped=listed.skipped)
        if self.hold is not None:
            self.hold.cancel()
            self.hold = None

    async def _until_signed_in(self) -> None:
        """No retries without a grant: its tools are unavailable with the reason until a
        sign-in changes the configuration (``oauth_generation``) and a reconcile replaces
        this connection."""
        self.client = None
        self.offered = frozenset()
        if self.hold is not None:
            self.hold.cancel()
            self.hold = None
        if self.status.state != NEEDS_SIGN_IN:
            logger.warning("%s", sign_in_reason(self.config.name))
        self._set(NEEDS_SIGN_IN, error=sign_in_reason(self.config.name))
        await self.stopping.wait()

    def _lose(self, error: str) -> None:
        """The connection is gone: a server that was connected holds its tools in place
        for ``hold`` seconds while it reconnects; one that never was is disconnected."""
        if self.status.state not in SHOWN:
            self._set("disconnected", error=error)
            return
        self._set("reconnecting", error=error)
        if self.hold is None:
            self.hold = asyncio.get_running_loop().call_later(self.manager.hold, self._let_go)

    def _let_go(self) -> None:
        self.hold = None
        if self.status.state == "reconnecting":
            self.offered = frozenset()
            self._set("disconnected", error=self.status.error)

    def _set(
        self,
        state: str,
        *,
        error: str = "",
        tools: int | None = None,
        skipped: tuple[Skipped, ...] | None = None,
    ) -> None:
        previous = self.status
        self.status = McpStatus(
            self.config.name,
            state,
            error=error,
            tools=previous.tools if tools is None else tools,
            skipped=previous.skipped if skipped is None else skipped,
            since=previous.since if previous.state == state else time.time(),
            # What the server wrote last: why it failed, when it did.
            stderr=tuple(self.stderr.lines) if self.stderr is not None and error else (),
        )
        if (previous.state in SHOWN) != (state in SHOWN):
            # The layer-4 gate changed: memoized resolutions key on the registry too.
            self.manager.registry.touch()

    def _transport(self) -> Any:
        if self.config.transport != "stdio":
            return http_transport(self.config, self.manager.oauth_store)
        from mcp.client.stdio import stdio_client

        params = stdio_params(self.config)
        # Through a pipe whose tail this connection keeps; what it reads goes on to
        # the manager's log (None: this process's stderr).
        self.stderr = StderrTail(self.config, self.manager.errlog)
        return stdio_client(params, errlog=self.stderr.writer)

    async def call(
        self, remote: str, arguments: dict[str, Any], progress: Any, caller: Caller
    ) -> Any:
        async def send(client: Any) -> Any:
            if remote not in self.offered:
                raise McpNotSent(f"MCP server {self.config.name} no longer offers this tool")
            return await client.call_tool(
                remote,
                arguments,
                # A backstop only: Tool.execute enforces the timeouts and cancels us.
                read_timeout_seconds=max(self.config.timeout, self.config.timeout_ceiling) + 5,
                progress_callback=progress,
            )

        return await self.request(send, caller)

    async def request(
        self, send: Callable[[Any], Awaitable[Any]], caller: Caller | None = None
    ) -> Any:
        """``send(client)`` on the connection of now: refused at once unless connected,
        ended with the reason if the server is lost meanwhile, and a transport failure
        marks the server lost for every other call too. ``caller`` is the chat's call it
        serves, which a form or sampling request the server sends meanwhile goes to."""
        import anyio
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        client = self.client
        if client is None or self.status.state != "connected":
            raise McpNotSent(self.reason)
        task = asyncio.current_task()
        assert task is not None
        self.calls.add(task)
        if caller is not None:
            self.waiting.add(task, caller)
            # 2026-07-28 answers a call with the questions it needs answered, and the SDK
            # asks them from within this task: the question knows its call for certain.
            CALLER.set(caller)
        answered = False
        try:
            result = await send(client)
            answered = True
            return result
        except asyncio.CancelledError:
            if task not in self.dropped:
                raise
            # Ended by went_away, not by the caller: an answer, not a cancellation.
            task.uncancel()
            raise McpUnavailableError(self.reason) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self.went_away(client, "the connection closed")
                raise McpUnavailableError(self.reason) from exc
            raise
        except (OSError, EOFError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            self.went_away(client, self.config.redact(describe(exc)))
            raise McpUnavailableError(self.reason) from exc
        finally:
            self.calls.discard(task)
            self.dropped.discard(task)
            if caller is not None:
                self.waiting.done(task, caller, answered=answered)

    def went_away(self, client: Any, error: str) -> None:
        # Said at once, not at the next health check, and every call still waiting on the
        # server ends now with the reason; a late failure of an earlier connection's call
        # says nothing about this one.
        if self.client is not client or self.lost.is_set():
            return
        self._lose(error)
        self.lost.set()
        for waiting in self.calls:
            self.dropped.add(waiting)
            waiting.cancel()

    async def close(self) -> None:
        """Stop cooperatively, so the SDK's own shutdown (stdin closed, then SIGTERM, then
        SIGKILL) runs to its end; cancel only a supervisor that does not finish."""
        self.closing = True
        self.stopping.set()
        self.lost.set()
        if self.hold is not None:
            self.hold.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), CLOSE_SECONDS)
        except TimeoutError:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
        except Exception:
            logger.debug("MCP server %s ended with an error while closing", self.config.name)
        # Every server process this connection started is stopped before it is closed.
        ending = set(self.ending)
        if ending:
            _, late = await asyncio.wait(ending, timeout=CLOSE_SECONDS)
            for session in late:
                session.cancel()
            # Cancelled, the SDK still stops the process (shielded, bounded): waited for.
            await asyncio.gather(*late, return_exceptions=True)
