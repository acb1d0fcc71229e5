"""Running one call of a ``Tool``: validate, run under the timeout and cancel token,
convert, cap and cache.

``execute`` never raises for anything a tool or a model does wrong: bad arguments,
exceptions, timeouts and cancellation all come back as a ``ToolResult`` with
``is_error``. Only cancellation of the caller itself propagates (``CancelledError``), after
the running tool has been cancelled too. Results are capped at
``min(max_result_chars, 0.3 x the model's context window in characters)``, keeping head and
tail around a marker, so no single result can flood a context window. A cache or store
that fails degrades to a miss, never to a failed tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from toolhub.tools.context import ToolContext
from toolhub.tools.schema import ArgumentError, canonical_json, validate_arguments
from toolhub.tools.tool import Tool, ToolResult

logger = logging.getLogger(__name__)


async def execute(
    tool: Tool, arguments: Mapping[str, Any] | None = None, ctx: ToolContext | None = None
) -> ToolResult:
    """Validate, run under the timeout and cancel token, convert, cap and cache."""
    capacity = tool.stream_capacity_chars or tool.max_result_chars
    ctx = (ctx or ToolContext()).for_call(stream_capacity=capacity)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return ToolResult.error(f"{tool.name}: arguments must be a JSON object")
    args = dict(arguments)
    try:
        validate_arguments(tool.validator(), args)
    except ArgumentError as exc:
        return ToolResult.error(f"{tool.name}: {exc}")

    budget = tool.budget_for(args)
    if tool.takes_timeout and budget is not None:
        spec = tool.parameters["properties"]["timeout"]
        args["timeout"] = int(budget) if spec.get("type") == "integer" else budget

    cache = ctx.cache if tool.cache else None
    key = tool.cache_key(args, ctx) if cache is not None else None
    if cache is not None and key is not None:
        hit = await _quietly(cache.get, key)
        if isinstance(hit, str):
            return await _cap(tool, ToolResult(content=hit, cached=True), ctx)

    if ctx.cancel.cancelled:
        return ToolResult.cancelled(f"{tool.name}: cancelled before it started")
    outcome = await _run(tool, args, ctx, budget)
    if not isinstance(outcome, ToolResult):
        outcome = ToolResult(content=_to_text(outcome))
    if cache is not None and key is not None and outcome.status == "ok":
        await _quietly(cache.set, key, outcome.content, tool.cache_ttl)
    return await _cap(tool, outcome, ctx)


async def _run(tool: Tool, args: dict[str, Any], ctx: ToolContext, budget: float | None) -> Any:
    call_args = {**args, "ctx": ctx} if tool.wants_ctx else args
    if inspect.iscoroutinefunction(tool.fn):
        work = asyncio.ensure_future(tool.fn(**call_args))
    else:
        # A sync tool runs in a thread; on cancel or timeout the caller moves on, and
        # the tool can stop early by polling ctx.cancel.cancelled.
        work = asyncio.ensure_future(asyncio.to_thread(functools.partial(tool.fn, **call_args)))
    cancelled = asyncio.ensure_future(ctx.cancel.wait())
    try:
        done, late = await _until_done(tool, work, cancelled, ctx, budget)
    except asyncio.CancelledError:
        ctx.cancel.cancel()
        await _stop(work)
        raise
    finally:
        cancelled.cancel()
    # Stop sets the token's flag at once and reaches this loop a step later: a tool that
    # returned in between (perhaps because it saw the flag) was still stopped.
    if work in done and not ctx.cancel.cancelled:
        if work.cancelled():
            return ToolResult.cancelled(f"{tool.name}: cancelled")
        exc = work.exception()
        if exc is not None:
            said = ctx.without_host_paths(str(exc))
            return ToolResult.error(f"{tool.name} failed: {type(exc).__name__}: {said}")
        return work.result()
    await _stop(work)
    if cancelled in done or ctx.cancel.cancelled:
        return ToolResult.cancelled(f"{tool.name}: cancelled")
    ctx.cancel.cancel()
    return ToolResult.error(f"{tool.name}: {late}")


async def _until_done(
    tool: Tool,
    work: asyncio.Future[Any],
    cancelled: asyncio.Future[Any],
    ctx: ToolContext,
    budget: float | None,
) -> tuple[set[asyncio.Future[Any]], str]:
    """Wait for the work or the cancel; when time runs out first, nothing is done and
    the string says how it ran out."""
    waiting = {work, cancelled}
    if budget is None or tool.timeout_ceiling is None or ctx.tail is None:
        done, _ = await asyncio.wait(waiting, timeout=budget, return_when=asyncio.FIRST_COMPLETED)
        return done, "" if budget is None else f"timed out after {budget:g} s"
    ceiling = max(tool.timeout_ceiling, budget)
    stop_at = ctx.started + ceiling
    while True:
        # Progress moves the idle deadline on; the ceiling never moves.
        idle_at = ctx.tail.idle_since + budget
        left = min(idle_at, stop_at) - time.monotonic()
        if left <= 0:
            break
        done, _ = await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        if done:
            return done, ""
    if idle_at <= stop_at:
        return set(), f"timed out after {budget:g} s without progress"
    return set(), f"stopped at its limit of {ceiling:g} s, still reporting progress"


async def _cap(tool: Tool, result: ToolResult, ctx: ToolContext) -> ToolResult:
    text = result.content
    ceiling = tool.effective_ceiling(ctx)
    if len(text) <= ceiling:
        return result
    ref = None
    if tool.persist_full and ctx.store is not None:
        put = functools.partial(ctx.store.put, tool=tool.name, text=text, ctx=ctx)
        stored = await _quietly(put)
        ref = stored if isinstance(stored, str) else None
    marker = _marker(len(text), ref)
    keep = max(ceiling - len(marker), 0)
    head = int(keep * tool.head_ratio)
    tail = keep - head
    marker = _marker(len(text) - keep, ref)
    capped = text[:head] + marker + (text[len(text) - tail :] if tail else "")
    # Only the text is cut: images, files and structured content stay as they came.
    return replace(result, content=capped, truncated=True, full_ref=ref)


def _marker(omitted: int, ref: str | None) -> str:
    where = f"; full output: {ref}" if ref else ""
    return f"\n\n[… {omitted:,} characters omitted{where} …]\n\n"


async def _quietly(call: Callable[..., Any], *args: Any) -> Any:
    """Run a cache or store call off the event loop (they may do network or disk I/O);
    a failure there degrades to a miss, never to a failed tool."""
    try:
        return await asyncio.to_thread(call, *args)
    except Exception:
        logger.warning("tool result cache or store failed", exc_info=True)
        return None


async def _stop(task: asyncio.Future[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return canonical_json(value) if _jsonable(value) else str(value)


def _jsonable(value: Any) -> bool:
    try:
        canonical_json(value)
    except (TypeError, ValueError):
        return False
    return True
