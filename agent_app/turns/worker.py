"""The worker's side of a tool run: claim it, run the tool with its heartbeat and cancel
watch, store the ending and tell the turn (agent_app.turns.runs says what stays true)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agent_app.models import ToolRun
from agent_app.turns.loop import on_db_thread
from agent_app.turns.run_row import (
    CANCEL_POLL,
    Status,
    beat_once,
    cancel_asked,
    end_and_tell,
    run_end,
    run_error,
    tell_turn,
)
from agent_app.turns.tails import TailPump
from profiles_app.services import global_disables
from sessions_app.models import ChatSession
from sessions_app.services import session_context
from toolhub.tools import CancelToken, TailUpdate, ToolContext, ToolResult, registry
from toolhub.tools.layers import Hidden, refusal

logger = logging.getLogger(__name__)


def run_in_task(*, run_id: str) -> None:
    """The Celery task's body: run the tool on an event loop of its own thread, so that
    Celery's soft time limit (raised in this, the main thread) can stop it cleanly."""
    from celery.exceptions import SoftTimeLimitExceeded

    stop = CancelToken()
    finished = threading.Event()
    # Set when this task returns: the watch ends even if a deaf tool's thread does not.
    returned = threading.Event()
    latest: list[TailUpdate] = []
    threading.Thread(
        target=_body,
        kwargs={"run_id": run_id, "stop": stop, "latest": latest, "finished": finished},
        daemon=True,
    ).start()
    threading.Thread(
        target=_watch_thread,
        kwargs={
            "run_id": run_id,
            "stop": stop,
            "latest": latest,
            "finished": finished,
            "returned": returned,
        },
        daemon=True,
    ).start()
    # This thread only waits, so Celery's soft limit (raised into it) never lands in the
    # middle of a query. An exception raised into Thread.join can leave the thread looking
    # finished; an Event keeps its state.
    try:
        while not finished.wait(1.0):
            pass
    except SoftTimeLimitExceeded:
        # Ended first, so the tool's own ending (a clean stop looks like a cancel) cannot
        # take its place; then the tool is told to stop and given its cleanup.
        end_and_tell(
            run_id=run_id,
            status=Status.FAILED,
            result=run_error("The tool was stopped at its time limit.", "time limit"),
            only_from=(Status.RUNNING,),
        )
        stop.cancel()
        # A tool deaf to the stop must not run on beside the next task: waiting on lets
        # Celery's hard limit end this process (a redelivery then finds the run ended).
        finished.wait()
    finally:
        returned.set()


def _body(
    *, run_id: str, stop: CancelToken, latest: list[TailUpdate], finished: threading.Event
) -> None:
    """The run, on an event loop of this thread's own."""
    try:
        asyncio.run(run_claim_and_execute(run_id=run_id, stop=stop, latest=latest))
    except Exception as exc:
        # The run must not stay claimed by a body that died: the turn would wait for
        # the loss bound instead of hearing now.
        logger.exception("tool run %s: the worker's run failed", run_id)
        end_and_tell(
            run_id=run_id,
            status=Status.FAILED,
            result=run_error(
                f"The worker could not run the tool: {type(exc).__name__}", "worker error"
            ),
        )
    finally:
        finished.set()


def _watch_thread(
    *,
    run_id: str,
    stop: CancelToken,
    latest: list[TailUpdate],
    finished: threading.Event,
    returned: threading.Event,
) -> None:
    """The run's heartbeat and cancel watch, on a thread of its own: a tool that blocks
    its loop still shows its worker alive (its time limits deal with it)."""
    beat = _Heartbeat(run_id=run_id, latest=latest)
    try:
        while not finished.wait(CANCEL_POLL) and not returned.is_set():
            if beat.tick(cancelled=stop.cancelled):
                stop.cancel()
    finally:
        connection.close()


async def run_claim_and_execute(
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
    pump = TailPump(session_id=run.session_id, turn_id=run.turn, call_id=run.call_id)
    latest = [] if latest is None else latest

    def on_update(update: TailUpdate) -> None:
        latest[:] = [update]
        pump.on_update(update)

    watchers = []
    if stop is None:
        watchers = [asyncio.ensure_future(_watch(run.pk, latest, token))]
    try:
        outcome = await _call_tool(run, on_update, token)
    except Exception as exc:
        logger.exception("tool run %s failed", run.pk)
        outcome = ToolResult.error(f"{run.tool} failed on the worker: {type(exc).__name__}")
    finally:
        for watcher in watchers:
            watcher.cancel()
        await pump.close()
    status, result = _ending(outcome, cancelled=token.cancelled)
    tail = latest[0] if latest else None
    ended = await on_db_thread(
        run_end,
        run_id=run.pk,
        status=status,
        result=result,
        only_from=(Status.RUNNING,),
        tail=tail.tail if tail else "",
        bytes_total=tail.total_chars if tail else 0,
    )
    if ended is not None:
        await tell_turn(ended)


def _ending(outcome: ToolResult, *, cancelled: bool) -> tuple[str, dict[str, Any]]:
    """The run's ending status and its stored result: a stop wins over an error the stop
    caused, never over a result the tool finished."""
    if outcome.status == "cancelled" or (cancelled and outcome.status != "ok"):
        status, stored = Status.CANCELLED, "cancelled"
    elif outcome.status == "ok" and not outcome.is_error:
        status, stored = Status.SUCCEEDED, "ok"
    else:
        status, stored = Status.FAILED, "error"
    result: dict[str, Any] = {"status": stored, "content": outcome.content}
    if stored == "cancelled":
        result["reason"] = "the turn was cancelled"
    return status, result


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


async def _call_tool(run: ToolRun, on_update: Any, token: CancelToken) -> ToolResult:
    tool = registry.get(run.tool)
    if tool is None:
        return ToolResult.error(f"{run.tool} is not a tool this worker knows")
    disabled = await on_db_thread(global_disables)
    if run.tool in disabled:
        # Disabled since the turn queued it: told as the runner tells it (layers.refusal).
        return ToolResult.error(refusal(run.tool, Hidden(run.tool, "L5", disabled[run.tool])).told)
    ctx = await on_db_thread(_context, run=run)
    return await tool.execute(run.arguments, replace(ctx, on_update=on_update, cancel=token))


def _context(*, run: ToolRun) -> ToolContext:
    session = ChatSession.objects.select_related("agent").get(pk=run.session_id)
    ctx = session_context(session=session, attended=False, channel=run.channel)
    return replace(ctx, mode=run.mode or None)


class _Heartbeat:
    """One run's heartbeat and cancel watch. Each ``tick`` reads the cancel flag and, every
    ``TOOLHUB_RUN_HEARTBEAT`` seconds, stores the beat and the latest tail; it says whether
    the tool should stop. A worker ticks it on a thread of its own, the embedded path on a
    database thread: one watch, two places to run it."""

    def __init__(self, *, run_id: Any, latest: list[TailUpdate]) -> None:
        self._run_id = run_id
        self._latest = latest
        self._beat_at = time.monotonic() + settings.TOOLHUB_RUN_HEARTBEAT

    def tick(self, *, cancelled: bool) -> bool:
        stop = False
        # The cache flag never holds up the heartbeat: that goes to the database, and a
        # run whose heartbeat stopped is given up as lost.
        try:
            stop = not cancelled and cancel_asked(run_id=self._run_id)
        except Exception:
            logger.warning("tool run %s: cancel check failed", self._run_id, exc_info=True)
            # A connection the database dropped is not reused by the next tick.
            connection.close_if_unusable_or_obsolete()
        try:
            if time.monotonic() >= self._beat_at:
                self._beat_at = time.monotonic() + settings.TOOLHUB_RUN_HEARTBEAT
                stop = beat_once(run_id=self._run_id, latest=self._latest) or stop
        except Exception:
            logger.warning("tool run %s: heartbeat failed", self._run_id, exc_info=True)
            connection.close_if_unusable_or_obsolete()
        return stop


async def _watch(run_id: Any, latest: list[TailUpdate], token: CancelToken) -> None:
    """The heartbeat and the cancel watch, on the run's own loop (the embedded path)."""
    beat = _Heartbeat(run_id=run_id, latest=latest)
    while not token.cancelled:
        await asyncio.sleep(CANCEL_POLL)
        if await on_db_thread(beat.tick, cancelled=token.cancelled):
            token.cancel()
