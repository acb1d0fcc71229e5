"""MCP servers as a tool source: connect through the official ``mcp`` SDK, register each
server's tools, call them, and live through the server going away.

Invariants:
- **Names.** A server's tool ``t`` is the tool ``<server>__<t>``. Server names are
  ``[a-z0-9][a-z0-9-]*`` (no underscore), so the first ``__`` always splits a name back
  into its server and tool. A tool name outside ``[A-Za-z0-9_-]``, or too long for the
  64-character limit providers share, is cleaned and suffixed with 8 hex digits of the
  sha256 of the original, so two different names never meet.
- **Order and fingerprint.** The registry lays out tools of source ``mcp`` after all
  others, sorted by name (registry.py), and ``sync_origin`` keeps unchanged tools as they
  are: a reconnect, or a server listing its tools in another order, leaves the array and
  its fingerprint byte-identical. A changed listing reaches turns at their next
  resolution; a running turn keeps the array it froze.
- **Going away.** A server that disconnects keeps its tools registered but unavailable at
  layer 4 ("MCP server X disconnected"), calls to them fail with that message, and the
  connection retries with exponential backoff. Only removing or disabling the server
  unregisters its tools.
- **Annotations.** A tool's MCP annotations decide plan mode and approval, read as the
  spec defines them (``readOnlyHint`` defaults to false, ``destructiveHint`` to true and
  counts only when the tool is not read-only). Only a tool the server marks read-only is
  offered in plan mode; every other one is ``unsafe_in=("plan",)``, with the reason.
  A destructive one asks the person first unless its server's ``approve_destructive`` is
  off. A tool without annotations is unknown: hidden in plan mode, run without asking,
  as before annotations were read. A hint is believed only as a JSON boolean exactly as
  it came over the wire: the SDK parses ``"true"`` or ``1`` into ``True``, so the
  transport's read stream is watched (``_WatchedListing``) and a hint the SDK changed,
  or any other odd one, makes the tool destructive, never read-only.
- **Untrusted text.** Names, titles and descriptions from a server are cut to a fixed
  length with control characters removed before they are registered, so nothing a server
  says reaches a prompt or a page unbounded. Input schemas pass through unchanged (they
  must be valid JSON Schema and below a size cap); arguments are validated against them
  by ``Tool.execute`` before anything is sent.
- **One loop.** Every connection lives on one event loop in one daemon thread: the SDK's
  clients are anyio task groups that must be entered and left by the same task. Callers
  on any loop or thread reach it through ``run_coroutine_threadsafe``; cancelling the
  caller cancels the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, TextIO, cast

from toolhub.tools.context import ToolContext
from toolhub.tools.registry import Skipped, ToolRegistry
from toolhub.tools.registry import registry as default_registry
from toolhub.tools.schema import canonical_json, check_schema
from toolhub.tools.tool import NAME_PATTERN, Tool, ToolResult, ToolUnavailable

logger = logging.getLogger(__name__)

TRANSPORTS = ("stdio", "streamable_http")
SERVER_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,23}$")
SEPARATOR = "__"
MAX_NAME = 64
MAX_DESCRIPTION_CHARS = 1_024
MAX_LABEL_CHARS = 80
MAX_SCHEMA_CHARS = 32_768
MAX_RESULT_TEXT = 1_000_000
# Long enough for the SDK's stdio shutdown: 2 s for the server to exit after stdin
# closes, 2 s after SIGTERM, then SIGKILL.
CLOSE_SECONDS = 8.0
# A server may ask for a tool to stay resident (or be deferred) through the tool's _meta.
DEFER_META_KEY = "toolhub/defer"
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]+")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,200}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")
PLAN = "plan"
# The hints that decide plan mode and approval: the SDK's field name, the wire's.
HINTS = (("read_only_hint", "readOnlyHint"), ("destructive_hint", "destructiveHint"))


def clean_text(text: str | None, limit: int) -> str:
    """Untrusted text, made safe to show and to prompt with: control and bidi characters
    removed (newlines and tabs kept), cut to ``limit`` characters with an ellipsis."""
    cleaned = CONTROL_CHARS.sub("", text or "").strip()
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1].rstrip() + "…"
    return cleaned


def tool_name(server: str, remote: str) -> str:
    """The registry name of ``server``'s tool ``remote`` (the scheme in the docstring)."""
    name = f"{server}{SEPARATOR}{remote}"
    if NAME_PATTERN.fullmatch(name):
        return name
    digest = hashlib.sha256(remote.encode()).hexdigest()[:8]
    room = MAX_NAME - len(server) - len(SEPARATOR) - 1 - len(digest)
    stem = _NOT_NAME.sub("_", remote).strip("_")[:room] or "tool"
    return f"{server}{SEPARATOR}{stem}-{digest}"


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One server as configured by staff. Frozen and comparable: a changed config
    reconnects, an equal one is left alone."""

    name: str
    transport: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    defer: bool = True
    timeout: float = 60.0
    allowlist: tuple[str, ...] | None = None
    # Ask the person before a tool this server marks destructive runs.
    approve_destructive: bool = True

    def __post_init__(self) -> None:
        if not SERVER_NAME.fullmatch(self.name):
            raise ValueError(
                f"MCP server name {self.name!r} must be lowercase letters, digits and "
                "hyphens, at most 24 characters"
            )
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}")
        if self.transport == "stdio" and not self.command:
            raise ValueError("a stdio server needs a command")
        if self.transport == "streamable_http" and not self.url:
            raise ValueError("a streamable HTTP server needs a URL")
        if self.timeout <= 0:
            raise ValueError("timeout must be positive")
        for key, value in self.headers:
            if not HEADER_NAME.fullmatch(key):
                raise ValueError(f"header name {key[:60]!r} is not a valid HTTP header name")
            if value != value.strip() or CONTROL_CHARS.search(value):
                # Checked here, not by the HTTP client, whose error would quote the value.
                raise ValueError(
                    f"the value of header {key} has surrounding spaces or control characters"
                )
        for key, _value in self.env:
            if not ENV_NAME.fullmatch(key):
                raise ValueError(f"environment name {key[:60]!r} is not a valid variable name")

    def redact(self, text: str) -> str:
        """``text`` with every secret value of this server replaced (errors, logs)."""
        for _key, value in (*self.env, *self.headers):
            if len(value) >= 4:
                text = text.replace(value, "***")
        return text


@dataclass(frozen=True, slots=True)
class McpStatus:
    """What a page shows about one server in this process."""

    name: str
    state: str  # connecting | connected | disconnected
    error: str = ""
    tools: int = 0
    skipped: tuple[Skipped, ...] = ()
    since: float = field(default_factory=time.time)


class McpUnavailableError(Exception):
    pass


# No wire form was seen for a tool (a listing built in code, not read off a stream).
NOT_SEEN: Any = object()
# Two entries of one name whose annotations differ: which one the SDK kept is not known.
_CONFLICTING: Any = object()


@dataclass(frozen=True, slots=True)
class Effect:
    """What a tool's annotations say it does to the world, and why that is believed.

    ``kind`` is ``read-only``, ``additive`` (changes things, never destroys),
    ``destructive`` or ``unknown`` (the server said nothing). ``reason`` completes
    "hidden in plan mode: …" for every kind but ``read-only``."""

    kind: str
    reason: str = ""

    @property
    def read_only(self) -> bool:
        return self.kind == "read-only"

    @property
    def destructive(self) -> bool:
        return self.kind == "destructive"


READ_ONLY = Effect("read-only")
UNANNOTATED = Effect("unknown", "the server does not mark it read-only (it has no annotations)")
ADDITIVE = Effect("additive", "the server does not mark it read-only (it changes things)")
DESTRUCTIVE = Effect("destructive", "the server marks it destructive")
DESTRUCTIVE_BY_DEFAULT = Effect(
    "destructive",
    "the server does not mark it read-only, and by MCP's defaults that makes it destructive",
)
MALFORMED = Effect(
    "destructive", "the server's annotations are not plain booleans, so it counts as destructive"
)
CONFLICTING = Effect(
    "destructive",
    "the server lists it twice with different annotations, so it counts as destructive",
)


def tool_effect(annotations: Any, wire: Any = NOT_SEEN) -> Effect:
    """The effect of a tool from its parsed annotations (an ``mcp_types.ToolAnnotations``
    or ``None``) and, when the listing was read off the wire, the ``annotations`` value
    exactly as it arrived (``None`` when absent). Any doubt lands on destructive: a hint
    that is not a boolean, or that the SDK's parsing changed, never makes a tool
    read-only."""
    if wire is _CONFLICTING:
        return CONFLICTING
    if annotations is None:
        if wire is NOT_SEEN or wire is None:
            return UNANNOTATED
        return MALFORMED
    parsed = [getattr(annotations, attribute, None) for attribute, _key in HINTS]
    if any(value is not None and not isinstance(value, bool) for value in parsed):
        return MALFORMED
    if wire is not NOT_SEEN:
        if not isinstance(wire, Mapping):
            return MALFORMED
        # ``is``: the JSON values true, false and null are the only ones believed as such.
        if any(
            wire.get(key) is not value
            for (_attribute, key), value in zip(HINTS, parsed, strict=True)
        ):
            return MALFORMED
    read_only, destructive = parsed
    if read_only is True:
        return READ_ONLY
    if destructive is False:
        return ADDITIVE
    return DESTRUCTIVE if destructive is True else DESTRUCTIVE_BY_DEFAULT


@dataclass(frozen=True, eq=False)
class McpTool(Tool):
    """A server's tool: a ``Tool`` that also carries what its annotations said."""

    effect: Effect = UNANNOTATED

    @property
    def unsafe_reason(self) -> str:
        """Why plan mode hides it (read by layer 3 after "hidden in plan mode: ")."""
        return self.effect.reason


def build_tools(
    config: McpServerConfig,
    listing: Iterable[Any],
    *,
    call: Callable[..., Any],
    check: Callable[[], bool],
    wire: Mapping[str, Any] | None = None,
) -> tuple[list[Tool], list[Skipped]]:
    """``Tool``s for a server's listing (``mcp_types.Tool`` items), sorted by name, after
    the allowlist; tools that cannot be offered safely are skipped with a reason. ``wire``
    maps a remote name to its ``annotations`` as they came over the wire (``None`` when
    absent); without it the parsed annotations are all there is to go by."""
    origin = f"mcp:{config.name}"
    allowed = frozenset(config.allowlist) if config.allowlist is not None else None
    tools: dict[str, Tool] = {}
    skipped: list[Skipped] = []
    # The schema breaks ties: a server listing one name twice keeps the same one always.
    for remote in sorted(listing, key=lambda item: (item.name, _sort_key(item.input_schema))):
        if allowed is not None and remote.name not in allowed:
            continue
        name = tool_name(config.name, remote.name)
        shown = clean_text(remote.name, MAX_LABEL_CHARS)
        reason = _schema_problem(remote.input_schema)
        if reason is None and name in tools:
            reason = f"its name {name} is already used by another of this server's tools"
        if reason is not None:
            skipped.append(Skipped(name, f"MCP tool {shown}: {reason}", origin))
            continue
        annotations = getattr(remote, "annotations", None)
        title = remote.title or (annotations.title if annotations is not None else None)
        meta = remote.meta or {}
        defer = meta.get(DEFER_META_KEY)
        effect = tool_effect(annotations, NOT_SEEN if wire is None else wire.get(remote.name, None))
        tools[name] = McpTool(
            name=name,
            description=clean_text(remote.description, MAX_DESCRIPTION_CHARS),
            parameters=dict(remote.input_schema),
            fn=_remote_call(call, config.name, remote.name),
            label=clean_text(title or remote.name, MAX_LABEL_CHARS),
            origin=origin,
            timeout=config.timeout,
            check_fn=check,
            defer=defer if isinstance(defer, bool) else config.defer,
            source="mcp",
            unsafe_in=() if effect.read_only else (PLAN,),
            requires_approval=effect.destructive and config.approve_destructive,
            effect=effect,
        )
    return list(tools.values()), skipped


def _same_safety(old: Tool, new: Tool) -> bool:
    """Whether ``old`` (registered) and ``new`` agree on plan mode and approval: the
    registry keeps a tool whose wire form is unchanged, and these are not in it."""
    return (
        old.unsafe_in == new.unsafe_in
        and old.requires_approval == new.requires_approval
        and getattr(old, "effect", None) == getattr(new, "effect", None)
    )


def _sort_key(schema: Any) -> str:
    # Only orders a listing: it must not fail on what _schema_problem refuses next.
    return json.dumps(schema, sort_keys=True, default=repr)


def _schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        # Providers refuse any other tool schema, and one bad tool would fail every turn.
        return 'its input schema is not of type "object"'
    try:
        text = canonical_json(schema)
    except ValueError:
        # The SDK parses NaN and Infinity; no provider accepts them in a request body.
        return "its input schema holds NaN or Infinity, which JSON cannot carry"
    if len(text) > MAX_SCHEMA_CHARS:
        return f"its input schema is {len(text):,} characters (the limit is {MAX_SCHEMA_CHARS:,})"
    try:
        check_schema(schema)
    except Exception as exc:
        return f"its input schema is not valid JSON Schema: {str(exc).splitlines()[0][:200]}"
    if "ctx" in (schema.get("properties") or {}):
        return "it has an argument named ctx, which toolhub reserves"
    return None


def _remote_call(call: Callable[..., Any], server: str, remote: str) -> Callable[..., Any]:
    async def call_mcp_tool(ctx: ToolContext, **arguments: Any) -> ToolResult:
        result: ToolResult = await call(server, remote, arguments, ctx=ctx)
        return result

    call_mcp_tool.__qualname__ = f"mcp:{server}:{remote}"
    return call_mcp_tool


def result_text(result: Any) -> ToolResult:
    """An MCP ``CallToolResult`` as a ``ToolResult``: text kept, images, audio and
    resources summarized in a line each, structured content as JSON when nothing else."""
    parts: list[str] = []
    for item in result.content or ():
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind in ("image", "audio"):
            size = len(item.data) * 3 // 4
            parts.append(f"[{kind}: {item.mime_type}, about {size:,} bytes]")
        elif kind == "resource":
            resource = item.resource
            text = getattr(resource, "text", None)
            mime = getattr(resource, "mime_type", None) or "unknown type"
            if isinstance(text, str):
                parts.append(f"[resource {resource.uri} ({mime})]\n{text}")
            else:
                parts.append(f"[resource {resource.uri}: {mime}, binary]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {item.uri} {clean_text(item.name, MAX_LABEL_CHARS)}]")
        else:
            parts.append(f"[{clean_text(kind, 40) or 'unknown'} content]")
    if not parts and result.structured_content is not None:
        # Text for the model, not part of a schema: NaN is shown as such, not refused.
        parts.append(json.dumps(result.structured_content, sort_keys=True, ensure_ascii=False))
    text = CONTROL_CHARS.sub("", "\n".join(parts))[:MAX_RESULT_TEXT]
    if result.is_error:
        return ToolResult(
            content=text or "the MCP server reported an error", is_error=True, status="error"
        )
    return ToolResult(content=text)


def _progress_line(progress: float, total: float | None, message: str | None) -> str:
    counted = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    text = clean_text(message, 500)
    return f"{text} ({counted})\n" if text else f"{counted}\n"


def _describe(exc: BaseException) -> str:
    """One line for a failed connection; an exception group shows its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return clean_text(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, 300)


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
                annotations = _CONFLICTING
            self._notes[name] = annotations


@contextlib.asynccontextmanager
async def _watched(transport: Any, notes: dict[str, Any]) -> AsyncIterator[tuple[Any, Any]]:
    async with transport as (read_stream, write_stream):
        yield _WatchedListing(read_stream, notes), write_stream


class _Connection:
    """One server: a supervising task on the manager's loop that connects, lists, keeps
    the listing fresh, notices the server going away, and reconnects with backoff."""

    def __init__(self, manager: McpManager, config: McpServerConfig) -> None:
        self.manager = manager
        self.config = config
        self.client: Any = None
        self.status = McpStatus(config.name, "connecting")
        self.lost = asyncio.Event()
        self.delay = manager.backoff_initial
        self.reason = f"MCP server {config.name} disconnected"
        # The remote names registered now: a call for any other (dropped from the
        # listing or the allowlist since a turn froze its tools) is refused.
        self.offered: frozenset[str] = frozenset()
        self.closing = False
        self.stopping = asyncio.Event()
        # Remote name -> its annotations as the wire carried them (``_WatchedListing``).
        self.wire_annotations: dict[str, Any] = {}
        self.task = asyncio.get_running_loop().create_task(self._supervise())

    async def _supervise(self) -> None:
        while not self.closing:
            try:
                await self._connected_session()
                error = "the connection closed"
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # the SDK raises exception groups too
                error = self.config.redact(_describe(exc))
            self.client = None
            self.offered = frozenset()
            if self.closing:
                return
            self._set("disconnected", error=error)
            logger.warning(
                "MCP server %s: %s; retrying in %.1f s", self.config.name, error, self.delay
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.delay)
            self.delay = min(self.delay * 2, self.manager.backoff_max)

    async def _connected_session(self) -> None:
        from mcp import Client

        self.lost = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            # A command that never speaks MCP must not leave the server "connecting"
            # forever: the handshake has the listing's time limit.
            async with asyncio.timeout(self.manager.list_timeout):
                transport = _watched(self._transport(), self.wire_annotations)
                client = await stack.enter_async_context(
                    Client(transport, mode="auto", client_info=_client_info())
                )
            await self._relist(client)
            self.client = client
            self.delay = self.manager.backoff_initial
            while not self.closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.lost.wait(), self.manager.health_interval)
                if self.lost.is_set():
                    return
                # The relisting is also the health check: the protocol (2026-07-28) has
                # no ping, and a listing notices both a dead server and a changed one.
                await self._relist(client)

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
        registry = self.manager.registry
        for tool in tools:
            existing = registry.get(tool.name)
            # sync_origin would keep a tool whose wire form is unchanged, but its plan-mode
            # and approval rules must not outlive the listing or config that set them.
            ours = existing is not None and existing.origin == tool.origin
            if existing is not None and ours and not _same_safety(existing, tool):
                registry.unregister(tool.name)
        skipped += registry.sync_origin(f"mcp:{self.config.name}", tools)
        registered = {tool.name for tool in tools} - {item.name for item in skipped}
        self.offered = frozenset(
            remote.name
            for remote in listing
            if tool_name(self.config.name, remote.name) in registered
        )
        for item in skipped:
            logger.warning("MCP server %s: %s", self.config.name, item.reason)
        if self.status.state != "connected":
            logger.info(
                "MCP server %s connected: %d tools", self.config.name, len(tools) - len(skipped)
            )
        self._set("connected", tools=len(tools) - len(skipped), skipped=tuple(skipped))

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
        if previous.state != state:
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

        http = create_mcp_http_client(headers=dict(config.headers))
        return streamable_http_client(config.url, http_client=http)

    async def call(self, remote: str, arguments: dict[str, Any], progress: Any) -> Any:
        import anyio
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        client = self.client
        if client is None or self.status.state != "connected":
            raise McpUnavailableError(self.reason)
        if remote not in self.offered:
            raise McpUnavailableError(f"MCP server {self.config.name} no longer offers this tool")
        try:
            return await client.call_tool(
                remote,
                arguments,
                # A backstop only: Tool.execute enforces the timeout and cancels us.
                read_timeout_seconds=self.config.timeout + 5,
                progress_callback=progress,
            )
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._went_away(client, "the connection closed")
                raise McpUnavailableError(self.reason) from exc
            raise
        except (OSError, EOFError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            self._went_away(client, self.config.redact(_describe(exc)))
            raise McpUnavailableError(self.reason) from exc

    def _went_away(self, client: Any, error: str) -> None:
        # Said at once (the next resolution hides the tools), not at the next health check;
        # a late failure of an earlier connection's call says nothing about this one.
        if self.client is not client:
            return
        self._set("disconnected", error=error)
        self.lost.set()

    async def close(self) -> None:
        """Stop cooperatively, so the SDK's own shutdown (stdin closed, then SIGTERM, then
        SIGKILL) runs to its end; cancel only a supervisor that does not finish."""
        self.closing = True
        self.stopping.set()
        self.lost.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), CLOSE_SECONDS)
        except TimeoutError:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
        except Exception:
            logger.debug("MCP server %s ended with an error while closing", self.config.name)


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
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        list_timeout: float = 30.0,
        max_pages: int = 100,
        errlog: IO[str] | None = None,
    ) -> None:
        self.registry = default_registry if registry is None else registry
        self.health_interval = health_interval
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.list_timeout = list_timeout
        self.max_pages = max_pages
        self.errlog = errlog
        self._connections: dict[str, _Connection] = {}
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
            closing = [self._connections.pop(name) for name in gone]
            await asyncio.gather(*(connection.close() for connection in closing))
            for name in gone:
                if name not in wanted:
                    self.registry.sync_origin(f"mcp:{name}", [])
            for name in sorted(wanted):
                if name not in self._connections:
                    self._connections[name] = _Connection(self, wanted[name])

    def statuses(self) -> dict[str, McpStatus]:
        # dict() copies in one step: the manager's loop may change the dict meanwhile.
        connections = dict(self._connections)
        return {name: connections[name].status for name in sorted(connections)}

    def check(self, server: str) -> bool:
        """Layer 4 for every tool of ``server`` (any thread). It looks the connection up by
        name: a tool kept across a reconnect answers for the connection of now."""
        connection = self._connections.get(server)
        if connection is None or connection.status.state != "connected":
            raise ToolUnavailable(f"MCP server {server} disconnected")
        return True

    async def call(
        self, server: str, remote: str, arguments: dict[str, Any], *, ctx: ToolContext
    ) -> ToolResult:
        """Call ``server``'s tool from any loop; progress streams to ``ctx.update``."""
        from mcp.shared.exceptions import MCPError

        connection = self._connections.get(server)
        if connection is None or self._loop is None:
            return ToolResult.error(f"MCP server {server} is not connected in this process")
        caller = asyncio.get_running_loop()

        async def progress(done: float, total: float | None, message: str | None) -> None:
            if ctx.cancel.cancelled:
                return
            # A late notification after the caller's loop closed is dropped.
            with contextlib.suppress(RuntimeError):
                caller.call_soon_threadsafe(ctx.update, _progress_line(done, total, message))

        future = asyncio.run_coroutine_threadsafe(
            connection.call(remote, arguments, progress), self._loop
        )
        label = tool_name(server, remote)
        try:
            result = await asyncio.wrap_future(future)
        except McpUnavailableError as exc:
            return ToolResult.error(f"{label}: {exc}")
        except MCPError as exc:
            return ToolResult.error(
                f"{label}: the MCP server answered with an error: {_describe(exc)}"
            )
        except TimeoutError:
            return ToolResult.error(f"{label}: the MCP server did not answer in time")
        return result_text(result)

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
