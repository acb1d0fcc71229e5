"""Tools that run on workers: the ``ToolRun`` record, the worker's side, the turn's wait.

A ``runs_on="worker"`` call becomes a ``ToolRun`` row, then a Celery task on the ``tools``
queue (or, in the embedded default with no broker, a task on this process's loop: the
same record, streaming and cancel). What stays true:

- **At most once.** The worker claims the run with a conditional UPDATE (queued →
  running); a redelivered task, or one for a run already cancelled or lost, finds nothing
  to claim and does nothing. Every ending is a conditional UPDATE from a live status, so
  the first ending wins and a late worker cannot overwrite a ``lost`` or ``cancelled``.
- **Vetoed before it is queued, and again before it runs.** The turn checks disables
  before creating the run; the worker checks the tool is registered and not disabled
  globally now.
- **Live, bounded output.** The tool's ``on_update`` feeds a ``TailPump`` (at most ten
  ``tail`` frames a second, always the last, the current tail kept for a socket that
  resumes); the heartbeat stores the latest tail on the row. Only the latest tail is
  held, whatever the tool prints.
- **No turn waits forever.** The worker tells the turn it is done through the turn's
  control channel; the turn also reads the row every few seconds, and a run whose
  heartbeat stopped (a killed worker) or that no worker took in time is marked ``lost``.
- **The row is the truth, not the queue.** A run still queued ``TOOLHUB_RUN_RESEND_AFTER``
  seconds after it was sent is sent again, at doubling intervals: a message that Redis
  lost (a restart without persistence) or that could not be published while Redis was
  down reaches a worker once Redis is back. At most once makes the extra copies harmless:
  the first claims, the others find nothing to claim (docs/outages.md).
- **Redis is not needed to finish.** The heartbeat, the ending and cancel all go through
  the row; the cache flag and the control message only make them quicker.
- **Cancel reaches the tool.** The turn sets ``cancel_requested`` on the row and a flag in
  the shared cache that the worker reads four times a second (the row is read on each
  heartbeat too); the tool's cancel token fires and it cleans up. A queued run is
  cancelled on the spot and its task revoked.
- **Time limits.** The tool's own timeout stops it cooperatively (it gets the cancel and
  cleans up); Celery's soft limit, a little later, stops a tool that did not, and the hard
  limit kills the task (the heartbeat stops, and the run ends ``lost``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from agent_app.models import ToolRun
from agent_app.turns.control import control_send
from agent_app.turns.loop import on_db_thread
from agent_app.turns.tails import TailPump
from profiles_app.services import global_disables
from sessions_app.models import ChatSession
from sessions_app.services import session_context
from toolhub.lib.outage import REDIS_ERRORS
from toolhub.lib.storable import storable, storable_text
from toolhub.tools import CancelToken, TailUpdate, Tool, ToolContext, ToolResult, registry

logger = logging.getLogger(__name__)

Status = ToolRun.Status
LIVE = (Status.QUEUED, Status.RUNNING)
ENDED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.LOST)
# Celery's soft limit comes this long after the tool's own timeout, the hard limit this
# long after the soft one; a soft-stopped tool gets CLEANUP_GRACE to finish.
SOFT_MARGIN = 2.0
HARD_GRACE = 10.0
CLEANUP_GRACE = 5.0
# How long a cancelled run may take to stop before the turn stops waiting for it, and how
# often a running one looks for the cancel flag.
CANCEL_GRACE = 10.0
CANCEL_POLL = 0.25
# Runs without a timeout still end at the worker's limits.
DEFAULT_LIMIT = 3600.0
# How long past a run's hard limit the turn gives it up itself.
LOST_SLACK = 5.0
# Re-sends of a run no worker took back off to at most this far apart.
RESEND_MAX = 120.0
# A cache that is out of reach is said in the log at most this often per process.
CACHE_WARN_EVERY = 30.0
_cache_warned = 0.0
_embedded: set[asyncio.Task[None]] = set()


# --- the turn's side ----------------------------------------------------------------


async def run_on_worker(
    *,
    tool: Tool,
    session_id: Any,
    turn: str,
    call_id: str,
    arguments: dict[str, Any],
    ctx: ToolContext,
    reply_channel: str,
    done: asyncio.Event,
    cancel: CancelToken,
) -> ToolResult:
    """Run ``tool`` on a worker and wait for its ending.

    ``done`` is set by the turn when the worker says the run ended (a ``run.done`` control
    message); the row is the truth either way.
    """
    run = await on_db_thread(
        run_create,
        session_id=session_id,
        turn=turn,
        call_id=call_id,
        tool=tool.name,
        arguments=arguments,
        channel=ctx.channel,
        mode=ctx.mode or "",
        timeout=tool.budget_for(arguments),
        reply_channel=reply_channel,
    )
    await run_enqueue(run=run)
    ended = await _wait(run_id=run.pk, done=done, cancel=cancel)
    return _as_result(ended)


def run_create(
    *,
    session_id: Any,
    turn: str,
    call_id: str,
    tool: str,
    arguments: dict[str, Any],
    channel: str,
    mode: str,
    timeout: float | None,
    reply_channel: str,
) -> ToolRun:
    return ToolRun.objects.create(
        session_id=session_id,
        turn=turn,
        call_id=call_id,
        tool=tool,
        arguments=storable(arguments),
        channel=channel,
        mode=mode,
        timeout=timeout,
        reply_channel=reply_channel,
    )


async def run_enqueue(*, run: ToolRun) -> None:
    """Hand the run to a worker: a Celery task on the ``tools`` queue, with time limits
    from the tool's timeout; with no broker (embedded), a task on this loop. A send the
    broker does not take (Redis is down) leaves the run queued: ``_wait`` sends it again."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        task = asyncio.get_running_loop().create_task(run_execute(run_id=run.pk))
        _embedded.add(task)
        task.add_done_callback(_embedded.discard)
        return
    await on_db_thread(_apply_async, run=run)


def _apply_async(*, run: ToolRun) -> bool:
    """Send the run's task; False when the broker is out of reach (logged)."""
    from agent_app.tasks import tool_run

    soft = (run.timeout or DEFAULT_LIMIT) + SOFT_MARGIN
    try:
        # No Celery result: the row holds it. Asking for one would subscribe to the
        # result backend first, which with Redis down blocks the send for 20 s and then
        # leaves this process's result consumer broken for good.
        sent = tool_run.apply_async(
            args=[str(run.pk)],
            soft_time_limit=soft,
            time_limit=soft + HARD_GRACE,
            ignore_result=True,
        )
    except REDIS_ERRORS as exc:
        logger.warning(
            "tool run %s: the broker did not take it (%s); it stays queued and is sent again",
            run.pk,
            type(exc).__name__,
        )
        return False
    # The first send's id is kept: a re-sent copy finds the run claimed or cancelled.
    ToolRun.objects.filter(pk=run.pk, task_id="").update(task_id=sent.id)
    return True


async def _wait(*, run_id: Any, done: asyncio.Event, cancel: CancelToken) -> ToolRun:
    """Wait for the run to end: woken by the worker's message, by the person's cancel, or
    every poll interval (the row is read then, and a stale run reaped)."""
    loop = asyncio.get_running_loop()
    poll = max(0.2, min(5.0, settings.TOOLHUB_RUN_LOST_AFTER / 3))
    cancel_by = None
    resend = _Resend(loop.time())
    queued = True
    while True:
        waits = [asyncio.ensure_future(done.wait())]
        if cancel_by is None:
            waits.append(asyncio.ensure_future(cancel.wait()))
        timeout = resend.wait(poll, loop.time()) if queued else poll
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        done.clear()
        if cancel.cancelled and cancel_by is None:
            await run_cancel(run_id=run_id)
            cancel_by = loop.time() + CANCEL_GRACE
        run = await on_db_thread(run_check, run_id=run_id)
        if run.status in ENDED:
            return run
        queued = run.status == Status.QUEUED
        if queued and cancel_by is None and resend.due(loop.time()):
            # Still queued: the message may be gone with Redis, or never got there.
            await on_db_thread(_apply_async, run=run)
            resend.sent(loop.time())
        if run.started and _past_hard_limit(run, timezone.now(), slack=LOST_SLACK):
            # Whatever the pool (some enforce no limits), the turn does not wait past the
            # tool's hard limit.
            ended = await on_db_thread(
                _run_lost,
                run_id=run_id,
                content=f"{run.tool} overran its time limit and was given up.",
                reason="time limit",
            )
            if ended is not None:
                return ended
        if cancel_by is not None and asyncio.get_running_loop().time() > cancel_by:
            # The worker did not stop in time: the turn goes on; the run ends here.
            ended = await on_db_thread(
                _run_cancelled, run_id=run_id, content="Cancelled; the worker did not stop yet."
            )
            if ended is not None:
                return ended


class _Resend:
    """When a queued run is sent again: ``TOOLHUB_RUN_RESEND_AFTER`` seconds after the last
    send, then twice as long each time, up to ``RESEND_MAX`` (0 turns re-sending off, as
    does the embedded default, where no queue can lose the run)."""

    def __init__(self, now: float) -> None:
        self.every = settings.TOOLHUB_RUN_RESEND_AFTER
        self.off = self.every <= 0 or settings.CELERY_TASK_ALWAYS_EAGER
        self.at = now + self.every

    def due(self, now: float) -> bool:
        return not self.off and now >= self.at

    def sent(self, now: float) -> None:
        self.every = min(self.every * 2, max(RESEND_MAX, settings.TOOLHUB_RUN_RESEND_AFTER))
        self.at = now + self.every

    def wait(self, poll: float, now: float) -> float:
        """How long the wait may sleep: the poll interval, or less when a re-send is due."""
        return poll if self.off else max(0.2, min(poll, self.at - now))


async def run_cancel(*, run_id: Any) -> None:
    """Ask the run to stop: a queued run is cancelled at once (its task revoked); a
    running one sees the flag within ``CANCEL_POLL`` seconds."""
    run = await on_db_thread(_cancel_flag, run_id=run_id)
    if run is None or run.status != Status.QUEUED:
        return
    ended = await on_db_thread(
        _run_cancelled,
        run_id=run_id,
        content="Cancelled before a worker started it.",
        only_from=(Status.QUEUED,),
    )
    if ended is not None and run.task_id and not settings.CELERY_TASK_ALWAYS_EAGER:
        await on_db_thread(_revoke, task_id=run.task_id)


def _cancel_key(run_id: Any) -> str:
    return f"toolhub:run-cancel:{run_id}"


def _cancel_flag(*, run_id: Any) -> ToolRun | None:
    # Also on a run that has ended: its worker may still be going (a lost run's worker
    # was only slow), and stops when it sees the flag. The row first: it is the flag a
    # worker still reads while the cache is out of reach.
    ToolRun.objects.filter(pk=run_id).update(cancel_requested=True)
    try:
        cache.set(_cancel_key(run_id), True, timeout=3600)
    except REDIS_ERRORS as exc:
        _cache_unreachable(exc)
    return ToolRun.objects.filter(pk=run_id, status__in=LIVE).first()


def _cancel_asked(*, run_id: Any) -> bool:
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


def _revoke(*, task_id: str) -> None:
    from toolhub.celery import app

    try:
        app.control.revoke(task_id)
    except REDIS_ERRORS as exc:
        # The run is cancelled in its row already: a worker that gets the task finds
        # nothing to claim.
        logger.warning(
            "task %s: not revoked, the broker is out of reach (%s)", task_id, type(exc).__name__
        )


def run_check(*, run_id: Any) -> ToolRun:
    """The run as stored, after reaping every stale run (this one, and any whose turn is
    gone and no longer waits for it)."""
    runs_reap()
    return ToolRun.objects.get(pk=run_id)


def runs_cancel_for_turn(*, session_id: Any, turn: str) -> None:
    """Stop every live run of a turn that ended without them: a queued one ends cancelled
    here (no worker will start it), a running one is asked to stop."""
    for run_id in ToolRun.objects.filter(
        session_id=session_id, turn=turn, status__in=LIVE
    ).values_list("pk", flat=True):
        _cancel_flag(run_id=run_id)
        _run_cancelled(
            run_id=run_id,
            content="Cancelled before a worker started it: its turn ended.",
            only_from=(Status.QUEUED,),
        )


def runs_reap() -> int:
    """Mark ``lost`` every running run whose heartbeat is older than the bound, and every
    queued run no worker took in time. Returns how many were reaped."""
    now = timezone.now()
    quiet = now - timedelta(seconds=settings.TOOLHUB_RUN_LOST_AFTER)
    unclaimed = now - timedelta(seconds=settings.TOOLHUB_RUN_QUEUE_TIMEOUT)
    stale = ToolRun.objects.filter(
        Q(status=Status.RUNNING, heartbeat__lt=quiet)
        | Q(status=Status.QUEUED, created__lt=unclaimed)
    )
    reaped = 0
    for run in stale.only("pk", "status", "tool", "started", "timeout"):
        if run.status == Status.QUEUED:
            content = f"No worker took {run.tool} in time (is a worker serving the tools queue?)."
            reason = "no worker available"
        elif run.started and _past_hard_limit(run, now):
            content = f"{run.tool} was killed at its time limit."
            reason = "time limit"
        else:
            content = f"The worker running {run.tool} was lost; the tool did not finish."
            reason = "worker lost"
        ended = _run_lost(run_id=run.pk, content=content, reason=reason, only_from=(run.status,))
        reaped += ended is not None
    return reaped


def _run_lost(
    *, run_id: Any, content: str, reason: str, only_from: tuple[str, ...] = LIVE
) -> ToolRun | None:
    """Give the run up as lost; a worker that was only slow is told to stop it."""
    ended = _run_end(
        run_id=run_id, status=Status.LOST, result=_error(content, reason), only_from=only_from
    )
    if ended is not None:
        _cancel_flag(run_id=run_id)
    return ended


def _error(content: str, reason: str) -> dict[str, str]:
    return {"status": "error", "content": content, "reason": reason}


def _past_hard_limit(run: ToolRun, now: Any, slack: float = 0.0) -> bool:
    limit = (run.timeout or DEFAULT_LIMIT) + SOFT_MARGIN + HARD_GRACE + slack
    return (now - run.started).total_seconds() >= limit


def _run_end(
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


def _run_cancelled(
    *, run_id: Any, content: str, only_from: tuple[str, ...] = LIVE
) -> ToolRun | None:
    return _run_end(
        run_id=run_id,
        status=Status.CANCELLED,
        result={"status": "cancelled", "content": content, "reason": "the turn was cancelled"},
        only_from=only_from,
    )


def _as_result(run: ToolRun) -> ToolResult:
    result = run.result or {}
    content = str(result.get("content", ""))
    status = result.get("status", "error")
    if status == "ok":
        return ToolResult(content=content)
    if status == "cancelled":
        return ToolResult.cancelled(content)
    return ToolResult(content=content, is_error=True, status="error")


# --- the worker's side ------------------------------------------------------------------


def run_in_worker(*, run_id: str) -> None:
    """The Celery task's body: run the tool on an event loop of its own thread, so that
    Celery's soft time limit (raised in this, the main thread) can stop it cleanly."""
    from celery.exceptions import SoftTimeLimitExceeded

    stop = CancelToken()
    finished = threading.Event()
    # Set when this task returns: the watch ends even if a deaf tool's thread does not.
    returned = threading.Event()
    latest: list[TailUpdate] = []

    def body() -> None:
        try:
            asyncio.run(run_execute(run_id=run_id, stop=stop, latest=latest))
        except Exception as exc:
            # The run must not stay claimed by a body that died: the turn would wait for
            # the loss bound instead of hearing now.
            logger.exception("tool run %s: the worker's run failed", run_id)
            _end_and_tell(
                run_id=run_id,
                status=Status.FAILED,
                result=_error(
                    f"The worker could not run the tool: {type(exc).__name__}", "worker error"
                ),
            )
        finally:
            finished.set()

    def watch() -> None:
        # The heartbeat and the cancel watch have a thread of their own: a tool that
        # blocks its loop still shows its worker alive (its time limits deal with it).
        beat_at = time.monotonic() + settings.TOOLHUB_RUN_HEARTBEAT
        try:
            while not finished.wait(CANCEL_POLL) and not returned.is_set():
                # The cache flag never holds up the heartbeat: that goes to the database,
                # and a run whose heartbeat stopped is given up as lost.
                try:
                    if not stop.cancelled and _cancel_asked(run_id=run_id):
                        stop.cancel()
                except Exception:
                    logger.warning("tool run %s: cancel check failed", run_id, exc_info=True)
                try:
                    if time.monotonic() >= beat_at:
                        beat_at = time.monotonic() + settings.TOOLHUB_RUN_HEARTBEAT
                        if _beat_once(run_id=run_id, latest=latest):
                            stop.cancel()
                except Exception:
                    logger.warning("tool run %s: heartbeat failed", run_id, exc_info=True)
        finally:
            connection.close()

    threading.Thread(target=body, daemon=True).start()
    threading.Thread(target=watch, daemon=True).start()
    # This thread only waits, so Celery's soft limit (raised into it) never lands in the
    # middle of a query. An exception raised into Thread.join can leave the thread looking
    # finished; an Event keeps its state.
    try:
        while not finished.wait(1.0):
            pass
    except SoftTimeLimitExceeded:
        # Ended first, so the tool's own ending (a clean stop looks like a cancel) cannot
        # take its place; then the tool is told to stop and given its cleanup.
        _end_and_tell(
            run_id=run_id,
            status=Status.FAILED,
            result=_error("The tool was stopped at its time limit.", "time limit"),
            only_from=(Status.RUNNING,),
        )
        stop.cancel()
        # A tool deaf to the stop must not run on beside the next task: waiting on lets
        # Celery's hard limit end this process (a redelivery then finds the run ended).
        finished.wait()
    finally:
        returned.set()


def _end_and_tell(
    *, run_id: Any, status: str, result: dict[str, Any], only_from: tuple[str, ...] = LIVE
) -> None:
    ended = _run_end(run_id=run_id, status=status, result=result, only_from=only_from)
    if ended is not None:
        asyncio.run(_tell_turn(ended))


async def run_execute(
    *, run_id: Any, stop: CancelToken | None = None, latest: list[TailUpdate] | None = None
) -> None:
    """Claim the run and execute its tool here, streaming its tail; store the ending and
    tell the turn. Given ``stop``, the caller keeps the heartbeat and the cancel watch
    (with ``latest`` holding the current tail for it); otherwise this loop does."""
    run = await on_db_thread(_claim, run_id=run_id)
    if run is None:
        return
    token = stop.child() if stop is not None else CancelToken()
    if run.cancel_requested:
        token.cancel()
    pump = TailPump(run.session_id, run.call_id)
    latest = [] if latest is None else latest

    def on_update(update: TailUpdate) -> None:
        latest[:] = [update]
        pump.on_update(update)

    watchers = []
    if stop is None:
        watchers = [asyncio.ensure_future(_watch(run.pk, latest, token))]
    try:
        outcome = await _execute(run, on_update, token)
    except Exception as exc:
        logger.exception("tool run %s failed", run.pk)
        outcome = ToolResult.error(f"{run.tool} failed on the worker: {type(exc).__name__}")
    finally:
        for watcher in watchers:
            watcher.cancel()
        await pump.close()
    if outcome.status == "cancelled" or (token.cancelled and outcome.status != "ok"):
        status, stored = Status.CANCELLED, "cancelled"
    elif outcome.status == "ok" and not outcome.is_error:
        status, stored = Status.SUCCEEDED, "ok"
    else:
        status, stored = Status.FAILED, "error"
    result = {"status": stored, "content": outcome.content}
    if stored == "cancelled":
        result["reason"] = "the turn was cancelled"
    tail = latest[0] if latest else None
    ended = await on_db_thread(
        _run_end,
        run_id=run.pk,
        status=status,
        result=result,
        only_from=(Status.RUNNING,),
        tail=tail.tail if tail else "",
        bytes_total=tail.total_chars if tail else 0,
    )
    if ended is not None:
        await _tell_turn(ended)


def _claim(*, run_id: Any) -> ToolRun | None:
    now = timezone.now()
    # A run asked to stop before it started (its turn ended) is never started, whichever
    # copy of its message arrives.
    claimed = ToolRun.objects.filter(
        pk=run_id, status=Status.QUEUED, cancel_requested=False
    ).update(
        status=Status.RUNNING,
        started=now,
        heartbeat=now,
        worker=f"{socket.gethostname()}:{os.getpid()}",
    )
    return ToolRun.objects.get(pk=run_id) if claimed else None


async def _execute(run: ToolRun, on_update: Any, token: CancelToken) -> ToolResult:
    tool = registry.get(run.tool)
    if tool is None:
        return ToolResult.error(f"{run.tool} is not a tool this worker knows")
    disabled = await on_db_thread(global_disables)
    if run.tool in disabled:
        return ToolResult.error(f"{run.tool} is not allowed: {disabled[run.tool]}")
    ctx = await on_db_thread(_context, run=run)
    return await tool.execute(run.arguments, replace(ctx, on_update=on_update, cancel=token))


def _context(*, run: ToolRun) -> ToolContext:
    session = ChatSession.objects.select_related("agent").get(pk=run.session_id)
    ctx = session_context(session=session, attended=False, channel=run.channel)
    return replace(ctx, mode=run.mode or None)


async def _watch(run_id: Any, latest: list[TailUpdate], token: CancelToken) -> None:
    """The heartbeat and the cancel watch, on the run's own loop (the embedded path)."""
    beat_at = time.monotonic() + settings.TOOLHUB_RUN_HEARTBEAT
    while not token.cancelled:
        await asyncio.sleep(CANCEL_POLL)
        try:
            if await on_db_thread(_cancel_asked, run_id=run_id):
                token.cancel()
            if time.monotonic() >= beat_at:
                beat_at = time.monotonic() + settings.TOOLHUB_RUN_HEARTBEAT
                if await on_db_thread(_beat_once, run_id=run_id, latest=latest):
                    token.cancel()
        except Exception:
            logger.warning("tool run %s: heartbeat or cancel check failed", run_id, exc_info=True)


def _beat_once(*, run_id: Any, latest: list[TailUpdate]) -> bool:
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


async def _tell_turn(run: ToolRun) -> None:
    if run.reply_channel:
        with contextlib.suppress(Exception):
            await control_send(
                run.reply_channel,
                run.turn,
                {"type": "run.done", "run": str(run.pk), "call_id": run.call_id},
            )
