"""A worker tool run's row and its moves: the statuses, the endings (each a conditional
UPDATE from a live status, so the first ending wins), the cancel flags, the heartbeat and
the limits both the turn's side and the worker's side read (agent_app.turns.runs)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from django.core.cache import cache
from django.utils import timezone

from agent_app.models import ToolRun
from agent_app.turns.control import control_send
from toolhub.lib.outage import REDIS_ERRORS
from toolhub.lib.storable import storable, storable_text
from toolhub.tools import TailUpdate, ToolResult

logger = logging.getLogger(__name__)


Status = ToolRun.Status
LIVE = (Status.QUEUED, Status.RUNNING)
ENDED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.LOST)
# Celery's soft limit comes this long after the tool's own timeout, the hard limit this
# long after the soft one.
SOFT_MARGIN = 2.0
HARD_GRACE = 10.0
# How long a cancelled run may take to stop before the turn stops waiting for it, and how
# often a running one looks for the cancel flag.
CANCEL_GRACE = 10.0
CANCEL_POLL = 0.25
# Runs without a timeout still end at the worker's limits.
DEFAULT_LIMIT = 3600.0
# How long past a run's hard limit the turn gives it up itself.
LOST_SLACK = 5.0
# A cache that is out of reach is said in the log at most this often per process.
CACHE_WARN_EVERY = 30.0
_cache_warned = 0.0


def _cancel_key(run_id: Any) -> str:
    return f"toolhub:run-cancel:{run_id}"


def cancel_flag_set(*, run_id: Any) -> ToolRun | None:
    # Also on a run that has ended: its worker may still be going (a lost run's worker
    # was only slow), and stops when it sees the flag. The row first: it is the flag a
    # worker still reads while the cache is out of reach.
    ToolRun.objects.filter(pk=run_id).update(cancel_requested=True)
    try:
        cache.set(_cancel_key(run_id), True, timeout=3600)
    except REDIS_ERRORS as exc:
        _cache_unreachable(exc)
    return ToolRun.objects.filter(pk=run_id, status__in=LIVE).first()


def cancel_asked(*, run_id: Any) -> bool:
    """The quick cancel flag; False while the cache is out of reach (the heartbeat reads
    the row's flag anyway)."""
    try:
        return cache.get(_cancel_key(run_id)) is True
    except REDIS_ERRORS as exc:
        _cache_unreachable(exc)
        return False


def _cache_unreachable(exc: BaseException) -> None:
    global _cache_warned
    now = time.monotonic()
    if now - _cache_warned >= CACHE_WARN_EVERY:
        _cache_warned = now
        logger.warning(
            "the cache is out of reach (%s): cancel flags go through the database until it is back",
            type(exc).__name__,
        )


def run_lost(
    *, run_id: Any, content: str, reason: str, only_from: tuple[str, ...] = LIVE
) -> ToolRun | None:
    """Give the run up as lost; a worker that was only slow is told to stop it."""
    ended = run_end(
        run_id=run_id, status=Status.LOST, result=run_error(content, reason), only_from=only_from
    )
    if ended is not None:
        cancel_flag_set(run_id=run_id)
    return ended


def run_error(content: str, reason: str) -> dict[str, str]:
    return {"status": "error", "content": content, "reason": reason}


def past_hard_limit(run: ToolRun, now: Any, slack: float = 0.0) -> bool:
    limit = (run.timeout or DEFAULT_LIMIT) + SOFT_MARGIN + HARD_GRACE + slack
    elapsed: float = (now - run.started).total_seconds()
    return elapsed >= limit


def run_end(
    *,
    run_id: Any,
    status: str,
    result: dict[str, Any],
    only_from: tuple[str, ...] = LIVE,
    tail: str | None = None,
    bytes_total: int | None = None,
) -> ToolRun | None:
    """End the run if it is still in one of ``only_from``; the first ending wins."""
    changes: dict[str, Any] = {
        "status": status,
        "result": storable(result),
        "finished": timezone.now(),
    }
    if tail is not None:
        changes.update(tail=storable_text(tail), bytes_total=bytes_total or 0)
    if not ToolRun.objects.filter(pk=run_id, status__in=only_from).update(**changes):
        return None
    return ToolRun.objects.get(pk=run_id)


def run_cancelled(
    *, run_id: Any, content: str, only_from: tuple[str, ...] = LIVE
) -> ToolRun | None:
    return run_end(
        run_id=run_id,
        status=Status.CANCELLED,
        result={"status": "cancelled", "content": content, "reason": "the turn was cancelled"},
        only_from=only_from,
    )


def as_result(run: ToolRun) -> ToolResult:
    result = run.result or {}
    content = str(result.get("content", ""))
    status = result.get("status", "error")
    if status == "ok":
        return ToolResult(content=content)
    if status == "cancelled":
        # What the command printed before it stopped stays in the result (the last tail a
        # heartbeat stored), so a reload still shows it.
        if run.tail:
            content = f"{run.tail.rstrip()}\n[stopped: {content}]"
        return ToolResult.cancelled(content)
    return ToolResult(content=content, is_error=True, status="error")


def end_and_tell(
    *, run_id: Any, status: str, result: dict[str, Any], only_from: tuple[str, ...] = LIVE
) -> None:
    ended = run_end(run_id=run_id, status=status, result=result, only_from=only_from)
    if ended is not None:
        asyncio.run(tell_turn(ended))


def beat_once(*, run_id: Any, latest: list[TailUpdate]) -> bool:
    """Prove the run is alive and store its latest tail; says whether the tool should
    stop: cancel was asked (the row's flag, in case the cache lost its own), or the run
    has already ended (reaped as lost, or stopped at its time limit)."""
    changes: dict[str, Any] = {"heartbeat": timezone.now()}
    update = latest[0] if latest else None
    if update is not None:
        changes.update(tail=storable_text(update.tail), bytes_total=update.total_chars)
    if not ToolRun.objects.filter(pk=run_id, status=Status.RUNNING).update(**changes):
        return True
    return ToolRun.objects.filter(pk=run_id, cancel_requested=True).exists()


async def tell_turn(run: ToolRun) -> None:
    if run.reply_channel:
        with contextlib.suppress(Exception):
            await control_send(
                run.reply_channel,
                run.turn,
                {"type": "run.done", "run": str(run.pk), "call_id": run.call_id},
            )
