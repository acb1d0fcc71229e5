"""Connections to MCP servers: one event loop in one daemon thread, a connection per
server that registers its tools, watches the listing, reconnects with backoff, and a
manager that reconciles the configured servers."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from typing import IO, Any, TextIO, cast

from toolhub.tools.context import CancelToken, ToolContext
from toolhub.tools.mcp.asks import AskRefused, elicit_form, sampling_ask
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
    McpOAuthStore,
    oauth_transport,
    sign_in_needed,
    sign_in_reason,
)
from toolhub.tools.mcp.tools import (
    LIST_RESOURCES,
    READ_RESOURCE,
    build_tools,
    prompt_entries,
    prompt_problem,
    prompt_text,
    resource_entries,
    resource_listing,
    resource_text,
    resource_tools,
    result_text,
    same_safety,
)
from toolhub.tools.registry import Skipped, ToolRegistry
from toolhub.tools.registry import registry as default_registry
from toolhub.tools.tool import ToolResult, ToolUnavailable

logger = logging.getLogger(__name__)


def _progress_line(progress: float, total: float | None, message: str | None) -> str:
    counted = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    text = untrusted_text(message, 500)
    return f"{text} ({counted})\n" if text else f"{counted}\n"


def _describe(exc: BaseException) -> str:
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


class _Connection:
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
        self.callers: dict[asyncio.Task[Any], _Caller] = {}
        # Calls given up on before the server answered (a timeout, a cancel), with when:
        # the server may still be working for them, and ask for them, for a while.
        self.abandoned: deque[tuple[float, _Caller]] = deque(maxlen=64)
        self.dropped: set[asyncio.Task[Any]] = set()
        self.hold: asyncio.TimerHandle | None = None
        # Set by a list_changed notification: relist now, not at the next interval.
        self.changed = asyncio.Event()
        self.logs: deque[McpLogLine] = deque(maxlen=LOG_LINES)
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
                error = self.config.redact(_describe(exc))
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
            return await stack.enter_async_context(
                Client(
                    transport,
                    mode="auto",
                    client_info=_client_info(),
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
        (``_ChatConnection``)."""
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
            if client.protocol_version in _modern():
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
        if getattr(message, "method", None) in _CHANGES:
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
                    await _probe(client)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                self._went_away(
                    client, f"it did not answer a ping within {manager.probe_timeout:g} s"
                )
            except Exception as exc:
                self._went_away(client, self.config.redact(_describe(exc)))

    async def _relist(self, client: Any) -> None:
        listing: list[Any] = []
        cursor = None
        self.wire_annotations.clear()
        async with asyncio.timeout(self.manager.list_timeout):
            for _ in range(self.manager.max_pages):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                listing.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
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

    async def _listed_prompts(self, client: Any) -> tuple[McpPrompt, ...]:
        """The server's prompts; none when it has none or lists them badly (its tools
        must not depend on its prompts)."""
        if client.server_capabilities.prompts is None:
            return ()
        listed: list[Any] = []
        cursor = None
        try:
            async with asyncio.timeout(self.manager.list_timeout):
                for _ in range(self.manager.max_pages):
                    page = await client.list_prompts(cursor=cursor, cache_mode="refresh")
                    listed.extend(page.prompts)
                    cursor = page.next_cursor
                    if not cursor:
                        break
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
            # None (no log given): the server inherits this process's stderr, as anyio
            # passes it to the subprocess unchanged; the SDK's annotation says TextIO.
            return stdio_client(params, errlog=cast("TextIO", self.manager.errlog))
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        if config.auth == "oauth":
            return oauth_transport(config, self.manager.oauth_store)
        http = create_mcp_http_client(headers=dict(config.headers))
        return streamable_http_client(config.url, http_client=http)

    async def call(
        self, remote: str, arguments: dict[str, Any], progress: Any, caller: _Caller
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
        self, send: Callable[[Any], Awaitable[Any]], caller: _Caller | None = None
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
            _CALLER.set(caller)
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
            self._went_away(client, self.config.redact(_describe(exc)))
            raise McpUnavailableError(self.reason) from exc
        finally:
            self.calls.discard(task)
            self.callers.pop(task, None)
            self.dropped.discard(task)
            if caller is not None:
                if not answered:
                    self.abandoned.append((time.monotonic(), caller))
                caller.end()

    def _caller(self) -> _Caller:
        """The call a server's request belongs to. On 2026-07-28 it is the task's own; a
        handshake-era server asks on its own, with nothing on the wire naming the call, so
        it is the one call waiting on this server, and with several it is nobody's:
        guessing could show one person's form to another (``AskRefused``)."""
        caller = _CALLER.get()
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
        if any(_scope(gone) != _scope(waiting[0]) for _, gone in self.abandoned):
            raise AskRefused(
                "another chat's call on this server ended lately without its answer, and the "
                "request does not say which call it belongs to"
            )
        return waiting[0]

    async def _elicit(self, context: Any, params: Any) -> Any:
        from mcp_types import INVALID_REQUEST, ElicitResult, ErrorData

        try:
            caller = self._caller()
            elicitor = caller.ctx.services.elicitor
            if elicitor is None or not caller.ctx.attended:
                raise AskRefused("nobody is watching this chat to answer a form")
            form = elicit_form(self.config.name, params)
            answer = await caller.run(lambda withdrawn: elicitor.elicit(form, withdrawn=withdrawn))
        except _CallEnded:
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
            caller = self._caller()
            sampler = caller.ctx.services.sampler
            if sampler is None or not caller.ctx.attended:
                raise AskRefused("nobody is watching this chat to approve a sampling request")
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


# How long a chat's new connection to a handshake-era server waits for the server to ask
# for its roots before the first call goes (a server that never asks costs this once per
# connection), and then for it to take them in.
ROOTS_GRACE_SECONDS = 1.0
ROOTS_SETTLE_SECONDS = 0.2


class _ChatConnection(_Connection):
    """A connection of one scope's own: a chat's, to a server with workspace roots (its
    only root is the chat's workspace, so a server that keeps what it is told, as
    filesystem keeps its allowed folders, never works in one chat's folder for another),
    a person's, to a server that takes each person's own credential (so nobody's call goes
    with another's), or both. The scope's first call opens it, ``chat_idle`` seconds
    without a call close it. It registers nothing (the server-wide connection keeps the
    listing, and what that offers decides what may be called) and is not reconnected: a
    lost one ends, and the scope's next call opens another."""

    def __init__(
        self,
        manager: McpManager,
        primary: _Connection,
        *,
        scope: str,
        config: McpServerConfig,
        workspace: Path | None,
    ) -> None:
        self.primary = primary
        self.scope = scope
        self.workspace = workspace
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.idle: asyncio.TimerHandle | None = None
        self.used = time.monotonic()
        self.rooted = asyncio.Event()
        super().__init__(manager, config)
        if not config.user_credential:
            # What the server logs on a chat's connection shows with the server's own; on
            # a person's own it may be about them, and stays with it.
            self.logs = primary.logs

    async def _supervise(self) -> None:
        error = "the connection closed"
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await self._open(stack)
                if self.workspace is not None and client.protocol_version not in _modern():
                    await self._until_rooted()
                self.client = client
                self._set("connected")
                self.ready.set_result(None)
                # From now on it closes once nothing uses it (never while it opens).
                self._idle_later()
                probe = asyncio.get_running_loop().create_task(self._probe_forever(client))
                try:
                    await self.lost.wait()
                finally:
                    probe.cancel()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the SDK raises exception groups too
            error = self.config.redact(_describe(exc))
        finally:
            self.client = None
            if not self.ready.done():
                self.ready.set_exception(
                    McpUnavailableError(
                        f"MCP server {self.config.name} could not open a connection for "
                        f"this call: {error}"
                    )
                )
            if self.status.state == "connected":
                self._set("disconnected", error=error)
            self.manager._forget_chat(self)

    async def _until_rooted(self) -> None:
        """A handshake-era server asks for its roots on its own once connected (filesystem
        does), then takes them in as it likes; a call sent before it has would be refused.
        Nothing on the wire says when it has, so: until it asked, and a moment more."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.rooted.wait(), ROOTS_GRACE_SECONDS)
            await asyncio.sleep(ROOTS_SETTLE_SECONDS)

    async def _roots(self, context: Any) -> Any:
        from mcp_types import ListRootsResult, Root

        self.rooted.set()
        assert self.workspace is not None  # asked only where workspace roots are on
        root = Root.model_validate({"uri": self.workspace.as_uri(), "name": "workspace"})
        return ListRootsResult(roots=[root])

    def _lose(self, error: str) -> None:
        self._set("disconnected", error=error)

    def _set(self, state: str, *, error: str = "", **_: Any) -> None:
        # A chat's connection is no layer-4 gate: nothing to tell the registry.
        self.status = McpStatus(self.config.name, state, error=error)

    async def call(
        self, remote: str, arguments: dict[str, Any], progress: Any, caller: _Caller
    ) -> Any:
        self.offered = self.primary.offered
        return await super().call(remote, arguments, progress, caller)

    async def request(
        self, send: Callable[[Any], Awaitable[Any]], caller: _Caller | None = None
    ) -> Any:
        # Every request keeps it open (a call, a resource read, a prompt), not only calls.
        self.used = time.monotonic()
        try:
            return await super().request(send, caller)
        finally:
            self.used = time.monotonic()
            self._idle_later()

    def _idle_later(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.idle = asyncio.get_running_loop().call_later(self.manager.chat_idle, self._if_idle)

    def _if_idle(self) -> None:
        self.idle = None
        if self.closing:
            return
        if self.calls:
            self._idle_later()  # still in use: the clock starts again when it is not
            return
        self.manager._forget_chat(self)
        asyncio.get_running_loop().create_task(self.close())

    async def close(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        await super().close()


def _scope(caller: _Caller) -> tuple[str | None, str | None]:
    """Whose a call is: the person and the chat."""
    return caller.ctx.user_id, caller.ctx.session_id


class _CallEnded(AskRefused):
    """What was asked for a call that has ended (the person stopped the turn, or the
    server answered the call without waiting): a form is then dismissed."""


@dataclasses.dataclass(slots=True, eq=False)
class _Caller:
    """A chat's call on a server: its context (who, which chat, who can answer) and the
    loop it runs on, where what the server asks of the person is asked."""

    ctx: ToolContext
    loop: asyncio.AbstractEventLoop
    # One token per question asked for this call now: cancelled when the call ends.
    asking: set[CancelToken] = dataclasses.field(default_factory=set)
    ended: bool = False

    async def run(self, asking: Callable[[CancelToken], Coroutine[Any, Any, Any]]) -> Any:
        """``asking(withdrawn)`` on the caller's loop; while it waits on a person the call
        is not idle. The call ending withdraws it: a handshake-era server may answer its
        call without waiting for its own question, which must not then wait on the person
        (and hold up the turn) with nothing to answer. Withdrawing never cancels the
        caller's task mid-way (it may be storing events): it tells it, and it ends."""
        withdrawn = CancelToken()
        if self.ended:
            raise _CallEnded("the call it belongs to has ended")
        self.asking.add(withdrawn)
        try:
            with self.ctx.waiting_for_person():
                future = asyncio.run_coroutine_threadsafe(asking(withdrawn), self.loop)
                try:
                    answer = await asyncio.wrap_future(future)
                except asyncio.CancelledError:
                    # The server withdrew its request: told the same way.
                    withdrawn.cancel()
                    raise
        finally:
            self.asking.discard(withdrawn)
        if withdrawn.cancelled:
            raise _CallEnded("the call it belongs to has ended")
        return answer

    def end(self) -> None:
        """The call is over: whatever is still asked for it is withdrawn."""
        self.ended = True
        for withdrawn in list(self.asking):
            withdrawn.cancel()


_CALLER: contextvars.ContextVar[_Caller | None] = contextvars.ContextVar(
    "toolhub_mcp_caller", default=None
)


# What a handshake-era server sends when the listings toolhub keeps change.
_CHANGES = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
    }
)


async def _personal(config: McpServerConfig, ctx: ToolContext) -> McpServerConfig:
    """``config`` with the calling person's own credential in it; refused, saying what to
    do, when they have none (never the server's own in its place)."""
    store = ctx.services.mcp_credentials
    if ctx.user_id is None or store is None:
        raise McpUnavailableError(
            f"MCP server {config.name} takes each person's own credential, and this call is "
            "nobody's"
        )
    value = await store.get(server=config.name, user_id=ctx.user_id)
    if not value:
        raise McpUnavailableError(
            f"MCP server {config.name} takes your own credential, and you have not added "
            "one: add it in Settings, under MCP credentials"
        )
    try:
        return config.with_credential(value)
    except ValueError:
        raise McpUnavailableError(
            f"your credential for MCP server {config.name} cannot be sent as it is (spaces "
            "or control characters around it): set it again in Settings"
        ) from None


def _modern() -> tuple[str, ...]:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return MODERN_PROTOCOL_VERSIONS


async def _probe(client: Any) -> None:
    """One liveness round trip: ``ping`` where the protocol has it; 2026-07-28 removed
    it, and there ``server/discover`` (stateless, answered from what the server already
    knows) is the cheapest request a server must answer."""
    version = client.protocol_version
    if version in _modern():
        await client.session.send_discover(version)
    else:
        await client.session.send_ping()


def _client_info() -> Any:
    from mcp_types import Implementation

    return Implementation(name="toolhub", version="1")


class McpManager:
    """Every configured server of this process, on one loop in one daemon thread."""

    def __init__(
        self,
        registry: ToolRegistry | None = None,
        *,
        health_interval: float = 10.0,
        probe_interval: float = 3.0,
        probe_timeout: float = 5.0,
        hold: float = 30.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        list_timeout: float = 30.0,
        max_pages: int = 100,
        chat_idle: float = 300.0,
        max_chats: int = 20,
        errlog: IO[str] | None = None,
        oauth_store: McpOAuthStore | None = None,
    ) -> None:
        self.registry = default_registry if registry is None else registry
        # Where OAuth servers' grants live; without one, such a server needs sign-in.
        self.oauth_store = oauth_store
        self.health_interval = health_interval
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self.hold = hold
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.list_timeout = list_timeout
        self.max_pages = max_pages
        # Servers with workspace roots: a chat's connection closes after this long without
        # a call, and a server has at most this many open at once.
        self.chat_idle = chat_idle
        self.max_chats = max_chats
        self.errlog = errlog
        self._connections: dict[str, _Connection] = {}
        self._chats: dict[tuple[str, str], _ChatConnection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._reconciling: asyncio.Lock  # made on the manager's loop, which it belongs to

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            ready = threading.Event()

            def run() -> None:
                loop = asyncio.new_event_loop()
                asyncio.set_event_loop(loop)
                self._reconciling = asyncio.Lock()
                self._loop = loop
                ready.set()
                loop.run_forever()

            self._thread = threading.Thread(target=run, name="toolhub-mcp", daemon=True)
            self._thread.start()
            ready.wait()

    def reconcile(self, configs: Iterable[McpServerConfig], *, wait: float | None = None) -> None:
        """Connect what is new or changed, disconnect (and unregister) what is gone; an
        unchanged server is left alone. Returns at once unless ``wait`` is given."""
        self.start()
        assert self._loop is not None
        wanted = {config.name: config for config in configs}
        future = asyncio.run_coroutine_threadsafe(self._reconcile(wanted), self._loop)
        if wait is not None:
            future.result(wait)

    async def _reconcile(self, wanted: dict[str, McpServerConfig]) -> None:
        # One at a time: a reconcile read from an older table must not interleave with a
        # newer one while a server closes (which can take seconds).
        async with self._reconciling:
            gone = [
                name
                for name, connection in sorted(self._connections.items())
                if wanted.get(name) != connection.config
            ]
            closing: list[_Connection] = [self._connections.pop(name) for name in gone]
            closing += [self._chats.pop(key) for key in sorted(self._chats) if key[0] in gone]
            await asyncio.gather(*(connection.close() for connection in closing))
            for name in gone:
                if name not in wanted:
                    self.registry.sync_origin(f"mcp:{name}", [])
                    self.registry.set_note(f"mcp:{name}", "")
            for name in sorted(wanted):
                if name not in self._connections:
                    self._connections[name] = _Connection(self, wanted[name])

    def statuses(self) -> dict[str, McpStatus]:
        # dict() copies in one step: the manager's loop may change the dict meanwhile.
        connections = dict(self._connections)
        return {name: connections[name].status for name in sorted(connections)}

    def chats(self, server: str) -> int:
        """How many chats have a connection of their own to ``server`` now (any thread)."""
        return sum(1 for name, _ in list(self._chats) if name == server)

    def logs(self, server: str) -> list[McpLogLine]:
        """The log messages ``server`` sent this process, oldest first (any thread)."""
        connection = self._connections.get(server)
        # copy() runs in C, whole, so the loop's appends never interleave with it.
        return list(connection.logs.copy()) if connection is not None else []

    def check(self, server: str) -> bool:
        """Layer 4 for every tool of ``server`` (any thread). It looks the connection up by
        name: a tool kept across a reconnect answers for the connection of now."""
        connection = self._connections.get(server)
        if connection is None:
            raise ToolUnavailable(f"MCP server {server} disconnected")
        if connection.status.state not in SHOWN:
            raise ToolUnavailable(connection.reason)
        return True

    async def call(
        self, server: str, remote: str, arguments: dict[str, Any], *, ctx: ToolContext
    ) -> ToolResult:
        """Call ``server``'s tool from any loop; progress streams to ``ctx.update``."""
        loop = asyncio.get_running_loop()

        async def progress(done: float, total: float | None, message: str | None) -> None:
            if ctx.cancel.cancelled:
                return
            # A late notification after the caller's loop closed is dropped.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(ctx.update, _progress_line(done, total, message))

        label = tool_name(server, remote)
        caller = _Caller(ctx=ctx, loop=loop)

        async def send(connection: _Connection) -> Any:
            target = await self._connection_for(connection, ctx)
            return await target.call(remote, arguments, progress, caller)

        answer = await self._on_loop(server, label, send)
        if isinstance(answer, ToolResult):
            return answer
        return result_text(answer, reader=tool_name(server, READ_RESOURCE))

    async def _connection_for(self, primary: _Connection, ctx: ToolContext) -> _Connection:
        """The connection a call of ``ctx`` goes through: the server's own, or a connection
        of the call's own scope (opened now if need be): the person's, with their own
        credential, for a server that takes one; the chat's, whose only root is its
        workspace, for a server with workspace roots; both for a server with both."""
        config = primary.config
        if not config.workspace_roots and not config.user_credential:
            return primary
        if primary.status.state != "connected":
            raise McpUnavailableError(primary.reason)
        scope, workspace = [], None
        if config.user_credential:
            config = await _personal(config, ctx)
            scope.append(f"person {ctx.user_id}")
            self._still_current(primary)
        if config.workspace_roots:
            if ctx.session_id is None or ctx.workspace is None:
                raise McpUnavailableError(
                    f"MCP server {config.name} works in a chat's workspace, and this call has none"
                )
            workspace = ctx.workspace
            scope.append(f"chat {ctx.session_id}")
        key = (config.name, " ".join(scope))
        own = self._chats.get(key)
        if own is not None and (own.config != config or own.primary is not primary):
            # A changed credential, or a server reconnected since: the old connection
            # carries what no call may go with any more.
            self._forget_chat(own)
            asyncio.get_running_loop().create_task(own.close())
            own = None
        if own is None or own.closing or own.lost.is_set():
            self._make_room(config.name)
            if workspace is not None:
                # The folder a root names must be there for the server to accept it.
                workspace.mkdir(parents=True, exist_ok=True)
            own = _ChatConnection(self, primary, scope=key[1], config=config, workspace=workspace)
            self._chats[key] = own
        # Shielded: one caller giving up must not end the opening the others wait for.
        await asyncio.shield(own.ready)
        if self._connections.get(config.name) is not primary or primary.closing:
            # Reconciled while it opened (the server changed or went): not for this call.
            self._forget_chat(own)
            await own.close()
            self._still_current(primary)
        return own

    def _still_current(self, primary: _Connection) -> None:
        """After a wait: the server must still be configured as it was when the call
        began, or the call goes nowhere (a disabled or re-pointed server gets nothing)."""
        if self._connections.get(primary.config.name) is not primary or primary.closing:
            raise McpUnavailableError(
                f"MCP server {primary.config.name} was changed or removed as this call "
                "began; try again"
            )

    def _make_room(self, server: str) -> None:
        """Close the longest-idle chat connection of ``server`` when it has its maximum;
        with every one busy the call is refused, never queued behind another chat."""
        mine = [
            chat
            for key, chat in self._chats.items()
            if key[0] == server and not chat.closing and not chat.lost.is_set()
        ]
        if len(mine) < self.max_chats:
            return
        # One still opening has a caller waiting on it: busy too.
        idle = [chat for chat in mine if not chat.calls and chat.ready.done()]
        if not idle:
            raise McpUnavailableError(
                f"MCP server {server} is busy with {len(mine)} other chats; try again shortly"
            )
        oldest = min(idle, key=lambda chat: chat.used)
        self._forget_chat(oldest)
        asyncio.get_running_loop().create_task(oldest.close())

    def _forget_chat(self, chat: _ChatConnection) -> None:
        key = (chat.config.name, chat.scope)
        if self._chats.get(key) is chat:
            del self._chats[key]

    async def list_resources(
        self, server: str, cursor: str | None, *, ctx: ToolContext
    ) -> ToolResult:
        """One page of ``server``'s resources, as text for the model."""

        async def send(client: Any) -> Any:
            return await client.list_resources(cursor=cursor, cache_mode="refresh")

        answer = await self._scoped(server, tool_name(server, LIST_RESOURCES), ctx, send)
        if isinstance(answer, ToolResult):
            return answer
        return resource_listing(server, answer)

    async def read_resource(self, server: str, uri: str, *, ctx: ToolContext) -> ToolResult:
        """The contents of ``server``'s resource ``uri``, as text for the model."""

        async def send(client: Any) -> Any:
            return await client.read_resource(uri, cache_mode="refresh")

        answer = await self._scoped(server, tool_name(server, READ_RESOURCE), ctx, send)
        if isinstance(answer, ToolResult):
            return answer
        return resource_text(answer)

    async def _scoped(
        self, server: str, label: str, ctx: ToolContext, send: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        """``send(client)`` on the connection ``ctx``'s call goes through (a person's or a
        chat's own where the server has them, as for its tools), from any loop."""
        caller = _Caller(ctx=ctx, loop=asyncio.get_running_loop())

        async def on_loop(connection: _Connection) -> Any:
            target = await self._connection_for(connection, ctx)
            return await target.request(send, caller)

        return await self._on_loop(server, label, on_loop)

    def prompts(self) -> list[McpPrompt]:
        """Every connected server's prompts, by server then name (any thread)."""
        connections = dict(self._connections)
        return [
            prompt
            for name in sorted(connections)
            if connections[name].status.state == "connected"
            for prompt in connections[name].prompts
        ]

    def resources(self) -> list[McpResource]:
        """Every connected server's listed resources (the first page of each), by server
        then as listed (any thread)."""
        connections = dict(self._connections)
        return [
            resource
            for name in sorted(connections)
            if connections[name].status.state == "connected"
            for resource in connections[name].resources
        ]

    async def get_prompt(
        self, server: str, name: str, arguments: dict[str, str], *, ctx: ToolContext
    ) -> ToolResult:
        """``server``'s prompt ``name`` filled in, as the text of a person's message; an
        error result says why not (an unknown prompt, a missing argument, the server)."""
        prompt = next((p for p in self.prompts() if (p.server, p.name) == (server, name)), None)
        if prompt is None:
            return ToolResult.error(f"MCP server {server} offers no prompt {name[:128]!r} now")
        problem = prompt_problem(prompt, arguments)
        if problem:
            return ToolResult.error(problem)
        given = {key: value for key, value in arguments.items() if value}

        async def send(client: Any) -> Any:
            return await client.get_prompt(name, given)

        answer = await self._scoped(server, f"/{server}:{name}", ctx, send)
        if isinstance(answer, ToolResult):
            return answer
        text = prompt_text(answer)
        return (
            ToolResult(content=text)
            if text
            else ToolResult.error(f"/{server}:{name} came back empty")
        )

    async def _on_loop(
        self, server: str, label: str, make: Callable[[_Connection], Coroutine[Any, Any, Any]]
    ) -> Any:
        """Run ``make(connection)`` on the manager's loop from any other; what fails
        comes back as an error ``ToolResult`` that says why."""
        from mcp.shared.exceptions import MCPError

        connection = self._connections.get(server)
        if connection is None or self._loop is None:
            return ToolResult.error(f"MCP server {server} is not connected in this process")
        future = asyncio.run_coroutine_threadsafe(make(connection), self._loop)
        try:
            return await asyncio.wrap_future(future)
        except McpUnavailableError as exc:
            return ToolResult.error(f"{label}: {exc}")
        except MCPError as exc:
            return ToolResult.error(
                f"{label}: the MCP server answered with an error: {_describe(exc)}"
            )
        except TimeoutError:
            return ToolResult.error(f"{label}: the MCP server did not answer in time")

    def stop(self, timeout: float = 5.0) -> None:
        """Close every connection (stdio servers are stopped) and end the thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None:
                return
            future = asyncio.run_coroutine_threadsafe(self._reconcile({}), loop)
            with contextlib.suppress(Exception):
                future.result(timeout + CLOSE_SECONDS)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            self._loop, self._thread = None, None
            self._connections = {}
