"""Reachability of every part the product depends on: database, cache, channel layer, broker.

Checks run concurrently, each under its own deadline, so one part that hangs cannot hide the
state of the others or hold a load balancer's probe past its timeout. The report names each
part; a failure says the exception's class, never its message, because `/healthz` is public
and messages carry hostnames and credentials. The full error goes to the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from toolhub.celery import app as celery_app

logger = logging.getLogger(__name__)

CHECK_TIMEOUT_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class PartStatus:
    name: str
    ok: bool
    ms: float
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"ok": self.ok, "ms": round(self.ms, 1)}
        if self.detail:
            data["detail"] = self.detail
        return data


def _check_database() -> str:
    # On a thread of its own (see health_report), whose connection goes back when done.
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return connection.vendor
    finally:
        connection.close()


async def _check_cache() -> str:
    key = f"healthz:{uuid.uuid4().hex}"
    await cache.aset(key, "1", timeout=10)
    value = await cache.aget(key)
    await cache.adelete(key)
    if value != "1":
        raise RuntimeError("cache did not return the value just written")
    return str(settings.CACHES["default"]["BACKEND"]).rsplit(".", 1)[-1]


async def _check_channel_layer() -> str:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer configured")
    channel = await layer.new_channel()
    await layer.send(channel, {"type": "healthz.ping"})
    message = await layer.receive(channel)
    if message.get("type") != "healthz.ping":
        raise RuntimeError("channel layer returned another message")
    # The library's layer it is (toolhub's own only changes how it sends to a group).
    return next(
        kind.__name__ for kind in type(layer).__mro__ if not kind.__module__.startswith("toolhub.")
    )


def _check_broker() -> str:
    if celery_app.conf.task_always_eager:
        return "in-process (REDIS_URL unset)"
    with celery_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
        name: str = conn.transport.driver_name
        return name


async def _run(name: str, check: Callable[[], Awaitable[str]]) -> PartStatus:
    started = time.perf_counter()
    try:
        detail = await asyncio.wait_for(check(), timeout=CHECK_TIMEOUT_SECONDS)
    except Exception as exc:
        logger.warning("health check %s failed", name, exc_info=True)
        error = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
        return PartStatus(name, False, (time.perf_counter() - started) * 1000, error)
    return PartStatus(name, True, (time.perf_counter() - started) * 1000, detail)


async def health_report() -> dict[str, object]:
    """Check every part concurrently; ``status`` is ``ok`` only when all of them are."""
    parts = await asyncio.gather(
        # Not on the shared sync thread: a pool waiting for an unreachable database
        # would hold it, and the checks queued behind it (the cache's) would time out too.
        _run("database", sync_to_async(_check_database, thread_sensitive=False)),
        _run("cache", _check_cache),
        _run("channel_layer", _check_channel_layer),
        _run("broker", sync_to_async(_check_broker, thread_sensitive=False)),
    )
    failing = [part.name for part in parts if not part.ok]
    return {
        "status": "unavailable" if failing else "ok",
        "failing": failing,
        "checks": {part.name: part.as_dict() for part in parts},
    }
