"""One MCP server's connection in this process (``Connection``): a supervising task on the
manager's loop that connects, lists, keeps the listing fresh, probes the server, notices
it going away, reconnects with backoff, and answers what the server asks mid-call (a
form, a sampling request) for the call that caused it. The invariants are in this
package's docstring (``toolhub/tools/mcp/__init__.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import IO, TYPE_CHECKING, Any, TextIO

from toolhub.tools.mcp.asks import AskRefused, elicit_form, sampling_ask
from toolhub.tools.mcp.callers import CALLER, CallEnded, Caller, scope_of
from toolhub.tools.mcp.config import (
    CLOSE_SECONDS,
    CONFLICTING_HINT,
    LOG_LINES,
    MAX_LABEL_CHARS,
    MAX_LOG_CHARS,
    McpLogLine,
    McpPrompt,
    McpResource,
    McpServerConfig,
    McpStatus,
    McpUnavailableError,
    instructions_note,
    tool_name,
    untrusted_text,
)
from toolhub.tools.mcp.oauth import (
    oauth_transport,
    sign_in_needed,
    sign_in_reason,
)
from toolhub.tools.mcp.tools import (
    READ_RESOURCE,
    build_tools,
    prompt_entries,
    resource_entries,
    resource_tools,
    same_safety,
)
from toolhub.tools.netguard import guard
from toolhub.tools.registry import Skipped

if TYPE_CHECKING:
    from toolhub.tools.mcp.manager import McpManager

logger = logging.getLogger(__name__)

# What a stdio server's stderr keeps for the ops page: its last lines, each cut.
STDERR_LINES = 20
STDERR_LINE_CHARS = 300


def progress_line(progress: float, total: float | None, message: str | None) -> str:
    counted = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    text = untrusted_text(message, 500)
    return f"{text} ({counted})\n" if text else f"{counted}\n"


def describe(exc: BaseException) -> str:
    """One line for a failed connection; an exception group shows its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return untrusted_text(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, 300)


class _WatchedListing:
    """A transport's read stream, passed through untouched, that notes the ``annotations``
    of every tool a result lists exactly as they arrived, before the SDK parses (and
    coerces) them. Only ever used to doubt a parsed hint, never to trust one: a note from
    a result that was not a listing can make a tool stricter, not looser."""

    def __init__(self, stream: Any, notes: dict[str, Any]) -> None:
        self._stream = stream
        self._notes = notes

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
        result = getattr(getattr(item, "message", None), "result", None)
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
async def _watched(transport: Any, notes: dict[str, Any]) -> AsyncIterator[tuple[Any, Any]]:
    async with transport as (read_stream, write_stream):
        yield _WatchedListing(read_stream, notes), write_stream


# States in which a server's tools stay in the array: a server that was connected keeps
# its tools in place while it reconnects, so a brief blip changes no array and costs no
# prompt-cache miss; only after ``hold`` seconds without it do they leave.
SHOWN = frozenset({"connected", "reconnecting"})
# An OAuth server without a working grant: not retried until a sign-in.
NEEDS_SIGN_IN = "needs_sign_in"


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

    def drain(self, timeout: float) -> None:
        """Until everything the exited server wrote is read (at most ``timeout``)."""
        self.close()
        self._thread.join(timeout)


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
        self.delay = manager.backoff_initial
        # The remote names registered now: a call for any other (dropped from the
        # listing or the allowlist since a turn froze its tools) is refused.
        self.offered: frozenset[str] = frozenset()
        self.closing = False
        self.stopping = asyncio.Event()
        # Remote name -> its annotations as the wire carried them (``_WatchedListing``).
        self.wire_annotations: dict[str, Any] = {}
        # Calls waiting on the server now; ended with the reason when it is lost, so none
        # waits its whole timeout on a server known to be gone.
        self.calls: set[asyncio.Task[Any]] = set()
        # Which chat's call each waiting request is: a form or a sampling request the
        # server sends mid-call goes to that person, never to another (``_caller``).
        self.callers: dict[asyncio.Task[Any], Caller] = {}
        # Calls given up on before the server answered (a timeout, a cancel), with when:
        # the server may still be working for them, and ask for them, for a while.
        self.abandoned: deque[tuple[float, Caller]] = deque(maxlen=64)
        self.dropped: set[asyncio.Task[Any]] = set()
        self.hold: asyncio.TimerHandle | None = None
        # Set by a list_changed notification: relist now, not at the next interval.
        self.changed = asyncio.Event()
        self.logs: deque[McpLogLine] = deque(maxlen=LOG_LINES)
        # The stderr of the last stdio process started (none for streamable HTTP).
        self.stderr: StderrTail | None = None
        self.prompts: tuple[McpPrompt, ...] = ()
        self.resources: tuple[McpResource, ...] = ()
        self.warned: frozenset[str] = frozenset()
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
            try:
                await self._connected_session()
                error = "the connection closed"
            except asyncio.CancelledError:
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
                error = self.status.error  # _went_away said why, better than the ending
            else:
                self._lose(error)
            logger.warning(
                "MCP server %s: %s; retrying in %.1f s", self.config.name, error, self.delay
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.delay)
            self.delay = min(self.delay * 2, self.manager.backoff_max)

    async def _open(self, stack: contextlib.AsyncExitStack) -> Any:
        """A client on a new connection, entered on ``stack``; within the listing's time
        limit, so a command that never speaks MCP does not stay "connecting" forever."""
        from mcp import Client

        async with asyncio.timeout(self.manager.list_timeout):
            transport = _watched(self._transport(), self.wire_annotations)
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
                    message_handler=self._notified,
                    elicitation_callback=self._elicit,
                    # Declared only where the operator allows them (docs/mcp.md).
                    sampling_callback=self._sample if self.config.sampling else None,
                    list_roots_callback=self._roots if self.config.workspace_roots else None,
                )
            )

    async def _roots(self, context: Any) -> Any:
        """The server-wide connection only lists and reads: it has no workspace, so no
        roots. Each chat's calls go through a connection of its own that has one
        (``ScopedConnection``)."""
        from mcp_types import ListRootsResult

        return ListRootsResult(roots=[])

    async def _connected_session(self) -> None:
        self.lost = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            client = await self._open(stack)
            self.changed.clear()
            await self._relist(client)
            self.manager.registry.set_note(
                f"mcp:{self.config.name}", instructions_note(self.config.name, client.instructions)
            )
            self.client = client
            self.delay = self.manager.backoff_initial
            loop = asyncio.get_running_loop()
            helpers = [loop.create_task(self._probe_forever(client))]
            if client.protocol_version in modern_versions():
                helpers.append(loop.create_task(self._listen(client)))
            try:
                while not self.closing:
                    await self._until_due()
                    if self.lost.is_set():
                        return
                    self.changed.clear()
                    if not await self._unless_lost(self._relist(client)):
                        return
            finally:
                for helper in helpers:
                    helper.cancel()

    async def _until_due(self) -> None:
        """Wait for the next relisting: a list_changed notification, the interval, or the
        connection lost, whichever comes first."""
        waits = [asyncio.ensure_future(event.wait()) for event in (self.lost, self.changed)]
        try:
            await asyncio.wait(
                waits, timeout=self.manager.health_interval, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for wait in waits:
                wait.cancel()

    async def _listen(self, client: Any) -> None:
        """2026-07-28 delivers list_changed on a ``subscriptions/listen`` stream; a server
        without one is relisted on the interval only."""
        try:
            async with client.listen(
                tools_list_changed=True, resources_list_changed=True, prompts_list_changed=True
            ) as events:
                async for _event in events:
                    self.changed.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.info("MCP server %s: no change notifications (%s)", self.config.name, exc)

    async def _notified(self, message: Any) -> None:
        # Handshake-era servers send list_changed as a plain notification.
        if getattr(message, "method", None) in LIST_CHANGES:
            self.changed.set()

    async def _logged(self, params: Any) -> None:
        data = params.data
        text = data if isinstance(data, str) else json.dumps(data, default=str, ensure_ascii=False)
        self.logs.append(
            McpLogLine(
                at=time.time(),
                level=untrusted_text(str(params.level), 12),
                logger=untrusted_text(params.logger, MAX_LABEL_CHARS),
                text=self.config.redact(untrusted_text(text, MAX_LOG_CHARS)),
            )
        )

    async def _unless_lost(self, work: Any) -> bool:
        """Run ``work`` unless the connection is lost first (a probe failing while a
        relisting waits on a hung server); False when it was."""
        job = asyncio.ensure_future(work)
        lost = asyncio.ensure_future(self.lost.wait())
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

    async def _probe_forever(self, client: Any) -> None:
        """Ask the server for a cheap answer every ``probe_interval`` seconds: a hung
        server (alive, silent) is lost within seconds, not at some call's timeout."""
        manager = self.manager
        while not self.lost.is_set():
            await asyncio.sleep(manager.probe_interval)
            try:
                async with asyncio.timeout(manager.probe_timeout):
                    await probe_once(client)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                self._went_away(
                    client, f"it did not answer a ping within {manager.probe_timeout:g} s"
                )
            except Exception as exc:
                self._went_away(client, self.config.redact(describe(exc)))

    async def _relist(self, client: Any) -> None:
        self.wire_annotations.clear()
        listing = await self._all_pages(client.list_tools, "tools")
        check = functools.partial(self.manager.check, self.config.name)
        tools, skipped = build_tools(
            self.config,
            listing,
            call=self.manager.call,
            check=check,
            wire=dict(self.wire_annotations),
        )
        if await self._has_resources(client):
            # The server's own tools keep their names; the readers take what is left.
            extra, passed = resource_tools(
                self.config, self.manager, check=check, taken={tool.name for tool in tools}
            )
            tools, skipped = sorted([*tools, *extra], key=lambda tool: tool.name), skipped + passed
        self.prompts = await self._listed_prompts(client)
        registry = self.manager.registry
        for tool in tools:
            existing = registry.get(tool.name)
            # sync_origin would keep a tool whose wire form is unchanged, but its plan-mode
            # and approval rules must not outlive the listing or config that set them.
            ours = existing is not None and existing.origin == tool.origin
            if existing is not None and ours and not same_safety(existing, tool):
                registry.unregister(tool.name)
        skipped += registry.sync_origin(f"mcp:{self.config.name}", tools)
        registered = {tool.name for tool in tools} - {item.name for item in skipped}
        self.offered = frozenset(
            remote.name
            for remote in listing
            if tool_name(self.config.name, remote.name) in registered
        )
        # Said once, not at every relisting: the ops page keeps showing them.
        for item in skipped:
            if item.reason not in self.warned:
                logger.warning("MCP server %s: %s", self.config.name, item.reason)
        self.warned = frozenset(item.reason for item in skipped)
        if self.status.state != "connected":
            logger.info(
                "MCP server %s connected: %d tools", self.config.name, len(tools) - len(skipped)
            )
        self._set("connected", tools=len(tools) - len(skipped), skipped=tuple(skipped))
        if self.hold is not None:
            self.hold.cancel()
            self.hold = None

    async def _all_pages(self, fetch: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
        """Every page of a listing, fresh, within the listing's time limit and page cap."""
        items: list[Any] = []
        cursor = None
        async with asyncio.timeout(self.manager.list_timeout):
            for _ in range(self.manager.max_pages):
                page = await fetch(cursor=cursor, cache_mode="refresh")
                items.extend(getattr(page, field))
                cursor = page.next_cursor
                if not cursor:
                    break
        return items

    async def _listed_prompts(self, client: Any) -> tuple[McpPrompt, ...]:
        """The server's prompts; none when it has none or lists them badly (its tools
        must not depend on its prompts)."""
        if client.server_capabilities.prompts is None:
            return ()
        try:
            listed = await self._all_pages(client.list_prompts, "prompts")
            return prompt_entries(self.config.name, listed)
        except Exception as exc:
            logger.info("MCP server %s: listing prompts failed: %s", self.config.name, exc)
            return ()

    async def _has_resources(self, client: Any) -> bool:
        """Whether the server lists any resource: many servers declare the capability
        with nothing behind it, and two tools that can only say "(none)" cost tokens.
        The first page is kept for the composer's "@"."""
        self.resources = ()
        if client.server_capabilities.resources is None:
            return False
        try:
            async with asyncio.timeout(self.manager.list_timeout):
                page = await client.list_resources(cache_mode="refresh")
        except Exception as exc:
            # Like prompts: a bad resource listing costs the readers, never the tools.
            logger.info("MCP server %s: listing resources failed: %s", self.config.name, exc)
            return False
        allowed = self.config.allowlist
        # An allowlist without the reader keeps the server's resources from people too, and
        # so does a server that takes each person's own credential: this listing is the
        # server's own, and what it names may not be everybody's to see.
        if (allowed is None or READ_RESOURCE in allowed) and not self.config.user_credential:
            self.resources = resource_entries(self.config.name, page.resources or ())
        return bool(page.resources)

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
        config = self.config
        if config.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=config.command, args=list(config.args), env=dict(config.env) or None
            )
            # Through a pipe whose tail this connection keeps; what it reads goes on to
            # the manager's log (None: this process's stderr).
            self.stderr = StderrTail(config, self.manager.errlog)
            return stdio_client(params, errlog=self.stderr.writer)
        import httpcore2
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        if config.auth == "oauth":
            return oauth_transport(config, self.manager.oauth_store)
        http = guard(create_mcp_http_client(headers=dict(config.headers)), httpcore2, config.reach)
        return streamable_http_client(config.url, http_client=http)

    async def call(
        self, remote: str, arguments: dict[str, Any], progress: Any, caller: Caller
    ) -> Any:
        async def send(client: Any) -> Any:
            if remote not in self.offered:
                raise McpUnavailableError(
                    f"MCP server {self.config.name} no longer offers this tool"
                )
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
            raise McpUnavailableError(self.reason)
        task = asyncio.current_task()
        assert task is not None
        self.calls.add(task)
        if caller is not None:
            self.callers[task] = caller
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
            # Ended by _went_away, not by the caller: an answer, not a cancellation.
            task.uncancel()
            raise McpUnavailableError(self.reason) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._went_away(client, "the connection closed")
                raise McpUnavailableError(self.reason) from exc
            raise
        except (OSError, EOFError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            self._went_away(client, self.config.redact(describe(exc)))
            raise McpUnavailableError(self.reason) from exc
        finally:
            self.calls.discard(task)
            self.callers.pop(task, None)
            self.dropped.discard(task)
            if caller is not None:
                if not answered:
                    self.abandoned.append((time.monotonic(), caller))
                caller.end()

    def _caller(self) -> Caller:
        """The call a server's request belongs to. On 2026-07-28 it is the task's own; a
        handshake-era server asks on its own, with nothing on the wire naming the call, so
        it is the one call waiting on this server, and with several it is nobody's:
        guessing could show one person's form to another (``AskRefused``)."""
        caller = CALLER.get()
        if caller is not None:
            return caller
        waiting = list(self.callers.values())
        if not waiting:
            raise AskRefused("no call of a chat is waiting on this server now")
        if len(waiting) > 1:
            raise AskRefused(
                "several calls are waiting on this server, and its request does not say "
                "which one it belongs to"
            )
        # A call given up on lately may be what the server is still working for: unless it
        # was the same chat's, the request could be its, and is nobody's to answer.
        horizon = time.monotonic() - max(self.config.timeout, self.config.timeout_ceiling)
        while self.abandoned and self.abandoned[0][0] < horizon:
            self.abandoned.popleft()
        if any(scope_of(gone) != scope_of(waiting[0]) for _, gone in self.abandoned):
            raise AskRefused(
                "another chat's call on this server ended lately without its answer, and the "
                "request does not say which call it belongs to"
            )
        return waiting[0]

    def _answerer(self, service: str, what: str) -> tuple[Caller, Any]:
        """The call a server's request belongs to, and who answers it there (its chat's
        ``elicitor`` or ``sampler``); ``AskRefused`` when nobody can."""
        caller = self._caller()
        answerer = getattr(caller.ctx.services, service)
        if answerer is None or not caller.ctx.attended:
            raise AskRefused(f"nobody is watching this chat {what}")
        return caller, answerer

    async def _elicit(self, context: Any, params: Any) -> Any:
        from mcp_types import INVALID_REQUEST, ElicitResult, ErrorData

        try:
            caller, elicitor = self._answerer("elicitor", "to answer a form")
            form = elicit_form(self.config.name, params)
            answer = await caller.run(lambda withdrawn: elicitor.elicit(form, withdrawn=withdrawn))
        except CallEnded:
            return ElicitResult(action="cancel")
        except AskRefused as exc:
            return ErrorData(code=INVALID_REQUEST, message=f"toolhub refused: {exc}")
        except Exception:
            return self._ask_failed("form")
        content = dict(answer.content) if answer.action == "accept" and not form.url else None
        return ElicitResult(action=answer.action, content=content)

    async def _sample(self, context: Any, params: Any) -> Any:
        from mcp_types import INVALID_REQUEST, CreateMessageResult, ErrorData, TextContent

        try:
            caller, sampler = self._answerer("sampler", "to approve a sampling request")
            ask = sampling_ask(self.config.name, params)
            sampled = await caller.run(lambda withdrawn: sampler.sample(ask, withdrawn=withdrawn))
        except AskRefused as exc:
            return ErrorData(code=INVALID_REQUEST, message=f"toolhub refused: {exc}")
        except Exception:
            return self._ask_failed("sampling request")
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=sampled.text),
            model=sampled.model,
            stop_reason="maxTokens" if sampled.stopped_at_limit else "endTurn",
        )

    def _ask_failed(self, what: str) -> Any:
        """toolhub's own failure: logged here, and only its own words go to the server
        (an exception's text could carry anything, a database's among them)."""
        from mcp_types import INTERNAL_ERROR, ErrorData

        logger.exception(
            "MCP server %s: its %s could not be put to the person", self.config.name, what
        )
        return ErrorData(
            code=INTERNAL_ERROR, message=f"toolhub could not put this {what} to the person"
        )

    def _went_away(self, client: Any, error: str) -> None:
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


# What a handshake-era server sends when the listings toolhub keeps change.
LIST_CHANGES = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
    }
)


def modern_versions() -> tuple[str, ...]:
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
