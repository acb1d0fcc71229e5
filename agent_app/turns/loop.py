"""Where turns run, and their database threads.

A turn is a task on the ASGI server's event loop (recorded by the ASGI application), so it
outlives the socket that started it; sync callers (REST views) hand it to that loop, and
outside a server (WSGI, commands) a background loop thread of this process runs it.
Database work of turns runs on its own threads, so turns never queue behind requests on
the server's single sync thread; each thread keeps its own connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from django.db import InterfaceError, OperationalError, connections

if TYPE_CHECKING:
    from agent_app.turns.runner import TurnRunner

_server_loop: asyncio.AbstractEventLoop | None = None
_background: asyncio.AbstractEventLoop | None = None
_background_lock = threading.Lock()
_tasks: set[asyncio.Task[None]] = set()
# Ids of the turns running in this process, whatever their loop: the reaper never takes
# one of them for dead (a loop that stalled past its lease is slow, not gone).
_live: set[str] = set()
# Database work of running turns: its own threads, so turns never queue behind requests
# on the server's single sync thread (each thread keeps its own connection).
DB_THREADS = 8
_db_pool = concurrent.futures.ThreadPoolExecutor(DB_THREADS, thread_name_prefix="turn-db")


def remember_server_loop() -> None:
    """Called by the ASGI application: turns started from sync views run on this loop."""
    global _server_loop
    if _server_loop is None or _server_loop.is_closed():
        _server_loop = asyncio.get_running_loop()


def loop_for_sync_callers() -> asyncio.AbstractEventLoop:
    global _background
    if _server_loop is not None and _server_loop.is_running():
        return _server_loop
    with _background_lock:
        if _background is None or _background.is_closed():
            _background = asyncio.new_event_loop()
            threading.Thread(target=_background.run_forever, name="turn-loop", daemon=True).start()
        return _background


def on_turn_loop[T](fn: Callable[..., Coroutine[Any, Any, T]], /, **kwargs: Any) -> T:
    """Run the turn service ``fn`` from sync code (a REST view) on the loop turns run
    on, and wait for its answer: a turn it starts outlives the request."""
    future = asyncio.run_coroutine_threadsafe(fn(**kwargs), loop_for_sync_callers())
    return future.result(timeout=60)


async def on_db_thread[T](fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Run ``fn`` on a database thread. Threads keep their connection (no connect per
    call); one that broke (the server restarted) is dropped and the next call reconnects."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        _db_pool, functools.partial(_dropping_broken_connections, fn, kwargs)
    )


def _dropping_broken_connections(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    try:
        return fn(**kwargs)
    except (InterfaceError, OperationalError):
        connections.close_all()
        raise


def close_db_connections() -> None:
    """Close the database connection of every turn thread (tests drop their database)."""
    global _db_pool
    pool, _db_pool = (
        _db_pool,
        concurrent.futures.ThreadPoolExecutor(DB_THREADS, thread_name_prefix="turn-db"),
    )
    # The barrier holds each task until all have started, so each runs on its own thread.
    barrier = threading.Barrier(DB_THREADS)

    def close() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=5)
        connections.close_all()

    for _ in range(DB_THREADS):
        pool.submit(close)
    pool.shutdown(wait=True)


def spawn(runner: TurnRunner) -> None:
    task = asyncio.get_running_loop().create_task(runner.run(), name=f"turn {runner.turn_id}")
    _tasks.add(task)
    _live.add(runner.turn_id)
    task.add_done_callback(_tasks.discard)
    task.add_done_callback(lambda _: _live.discard(runner.turn_id))


def live_turns() -> frozenset[str]:
    return frozenset(_live)


async def wait_for_turns(timeout: float = 30.0) -> None:
    """Wait until the turns running on this loop end (tests, graceful shutdown)."""
    pending = [task for task in _tasks if task.get_loop() is asyncio.get_running_loop()]
    if pending:
        await asyncio.wait(pending, timeout=timeout)
