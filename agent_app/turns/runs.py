"""Tools that run on workers: the turn's side (create, send, wait, cancel, reap). The
worker's side is ``worker``, the row's moves ``run_row``; what stays true holds for all
three.

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
import logging
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from agent_app.models import ToolRun
from agent_app.turns.loop import on_db_thread
from agent_app.turns.run_row import (
    CANCEL_GRACE,
    DEFAULT_LIMIT,
    ENDED,
    HARD_GRACE,
    LIVE,
    LOST_SLACK,
    SOFT_MARGIN,
    Status,
    as_result,
    cancel_flag_set,
    past_hard_limit,
    run_cancelled,
    run_lost,
)
from agent_app.turns.worker import run_claim_and_execute
from toolhub.lib.outage import REDIS_ERRORS
from toolhub.lib.storable import storable
from toolhub.tools import CancelToken, Tool, ToolContext, ToolResult

logger = logging.getLogger(__name__)


# Re-sends of a run no worker took back off to at most this far apart.
RESEND_MAX = 120.0


_embedded: set[asyncio.Task[None]] = set()


async def run_and_wait(
    *,
    tool: Tool,
    session_id: UUID,
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
        timeout=tool.limit_for(arguments),
        reply_channel=reply_channel,
    )
    await run_enqueue(run=run)
    ended = await _wait(run_id=run.pk, done=done, cancel=cancel)
    return as_result(ended)


def run_create(
    *,
    session_id: UUID,
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
        task = asyncio.get_running_loop().create_task(run_claim_and_execute(run_id=run.pk))
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
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(done.wait())]
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
        if run.started and past_hard_limit(run, timezone.now(), slack=LOST_SLACK):
            # Whatever the pool (some enforce no limits), the turn does not wait past the
            # tool's hard limit.
            ended = await on_db_thread(
                run_lost,
                run_id=run_id,
                content=f"{run.tool} overran its time limit and was given up.",
                reason="time limit",
            )
            if ended is not None:
                return ended
        if cancel_by is not None and asyncio.get_running_loop().time() > cancel_by:
            # The worker did not stop in time: the turn goes on; the run ends here.
            ended = await on_db_thread(
                run_cancelled, run_id=run_id, content="Cancelled; the worker did not stop yet."
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
    run = await on_db_thread(cancel_flag_set, run_id=run_id)
    if run is None or run.status != Status.QUEUED:
        return
    ended = await on_db_thread(
        run_cancelled,
        run_id=run_id,
        content="Cancelled before a worker started it.",
        only_from=(Status.QUEUED,),
    )
    if ended is not None and run.task_id and not settings.CELERY_TASK_ALWAYS_EAGER:
        await on_db_thread(_revoke, task_id=run.task_id)


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


def runs_cancel_for_turn(*, session_id: UUID, turn: str) -> None:
    """Stop every live run of a turn that ended without them: a queued one ends cancelled
    here (no worker will start it), a running one is asked to stop."""
    for run_id in ToolRun.objects.filter(
        session_id=session_id, turn=turn, status__in=LIVE
    ).values_list("pk", flat=True):
        cancel_flag_set(run_id=run_id)
        run_cancelled(
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
        elif run.started and past_hard_limit(run, now):
            content = f"{run.tool} was killed at its time limit."
            reason = "time limit"
        else:
            content = f"The worker running {run.tool} was lost; the tool did not finish."
            reason = "worker lost"
        ended = run_lost(run_id=run.pk, content=content, reason=reason, only_from=(run.status,))
        reaped += ended is not None
    return reaped
