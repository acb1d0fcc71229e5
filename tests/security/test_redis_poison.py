"""Nothing read from Redis is unpickled: a crafted pickle written where the product reads
(the cache, the channel layer, the Celery queues) runs nothing, is logged, and is ignored.

Each pickle, if loaded, would create a marker file; the tests check that it never exists
and that the part that read it goes on working."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import secrets
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import redis
from channels.db import database_sync_to_async
from django.core.cache import cache

# Loaded before any test runs: its Django set-up configures logging again, which would
# take pytest's log capture away from a test that first opened a socket.
import toolhub.asgi  # noqa: F401
from tests.conftest import app_env, celery_worker, need
from tests.fakes import Reply
from tests.integration.chat import events, open_socket, send, until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True), pytest.mark.processes]


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def poison(tmp_path):
    """The bytes of a pickle that creates ``marker`` when loaded, and the marker."""
    marker = tmp_path / "pickle-ran"
    return pickle.dumps(_Payload(marker)), marker


@pytest.fixture
def raw_redis(settings):
    if not settings.REDIS_URL:
        need("Redis", "set REDIS_URL: these attacks write to the product's Redis")
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield client
    client.close()


TURN = "5f0c4c52-8d40-4f5e-9d4a-1b7c8e2f6a10"


def _cache_keys(session_id, run_id) -> list[str]:
    """Every cache key the product reads: a call's tail, a run's cancel flag, the health
    probe's, and where the veto list used to be cached."""
    from agent_app.turns.tails import _tails_key

    return [
        _tails_key(session_id, TURN),
        f"toolhub:run-cancel:{run_id}",
        "toolhub:global-disables",
        f"healthz:{uuid.uuid4().hex}",
    ]


def test_a_pickle_in_any_cache_key_reads_as_nothing_and_is_logged(raw_redis, poison, caplog, owner):
    payload, marker = poison
    keys = _cache_keys(uuid.uuid4(), uuid.uuid4())
    for key in keys:
        raw_redis.set(cache.make_key(key), payload)

    with caplog.at_level(logging.WARNING, logger="toolhub.lib.redis_codecs"):
        values = [cache.get(key) for key in keys]

    assert values == [None] * len(keys)
    assert not marker.exists()
    assert caplog.text.count("ignored a value that is not JSON") == len(keys)


def test_poisoned_tails_are_not_sent_and_the_next_tail_is_stored_cleanly(raw_redis, poison, caplog):
    from agent_app.turns.tails import _tails_key, running_tails

    payload, marker = poison
    session_id = uuid.uuid4()
    key = cache.make_key(_tails_key(session_id, TURN))
    frame = {"type": "tail", "turn": TURN, "call_id": "c1", "tail": "ok", "bytes_total": 2,
             "elapsed_ms": 5}  # fmt: skip

    raw_redis.set(key, payload)
    after_pickle = running_tails(session_id=session_id, turn_id=TURN)
    raw_redis.set(key, json.dumps({"c0": {"type": "event", "data": "<script>"}, "c1": frame}))
    with caplog.at_level(logging.WARNING):
        after_forgery = running_tails(session_id=session_id, turn_id=TURN)

    assert after_pickle == []
    assert after_forgery == [frame]
    assert "ignored cached tails that are not tail frames" in caplog.text
    assert not marker.exists()


def test_a_pickle_where_the_veto_list_used_to_be_cached_reenables_nothing(raw_redis, staff):
    from profiles_app.services import global_disables, tool_disable_globally

    tool_disable_globally(user=staff, tool="web_fetch", reason="leaks")
    raw_redis.set(cache.make_key("toolhub:global-disables"), pickle.dumps({}))

    assert "web_fetch" in global_disables()


async def test_a_pickle_in_a_sockets_channel_is_discarded_and_the_socket_keeps_working(
    raw_redis, poison, caplog, owner, model
):
    from channels.layers import get_channel_layer

    from agent_app.delivery import session_group
    from sessions_app.services import session_create

    payload, marker = poison
    session = await database_sync_to_async(session_create)(user=owner)
    socket = await open_socket(session.pk, owner)
    layer = get_channel_layer()
    group_key = f"{layer.prefix}:group:{session_group(session.pk)}"
    # The socket joins its group just after the handshake is accepted.
    for _ in range(100):
        members = raw_redis.zrange(group_key, 0, -1)
        if members:
            break
        await asyncio.sleep(0.05)
    (channel,) = [name.decode() for name in members]
    inbox = layer.prefix + layer.non_local_name(channel)

    with caplog.at_level(logging.WARNING, logger="toolhub.lib.redis_codecs"):
        raw_redis.zadd(inbox, {secrets.token_bytes(12) + payload: time.time()})
        model.replies.append(Reply(text="still here"))
        await send(socket, {"type": "chat", "text": "hello"})
        frames = await until(socket)

    assert events(frames, "assistant_message")[0]["data"]["text"] == "still here"
    assert "discarded a message that does not decode" in caplog.text
    assert not marker.exists()
    await socket.disconnect()


@pytest.fixture
def worker_log(settings):
    """A real Celery worker on this process's broker (no database work: it only has to
    receive); yields its log file."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        need("Redis", "REDIS_URL is not set, so there is no broker for a worker")
    var_dir = Path(tempfile.mkdtemp(prefix="toolhub-poison-"))
    env = app_env(var_dir, REDIS_URL=settings.CELERY_BROKER_URL, TOOLHUB_SEMANTIC_SEARCH="0")
    log = var_dir / "worker.log"
    try:
        with celery_worker(env, log=log):
            yield log
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)


def test_a_pickled_task_is_refused_by_a_real_worker_that_then_still_answers(worker_log, poison):
    from kombu import Connection, Queue

    from toolhub.celery import app

    payload, marker = poison
    with Connection(app.conf.broker_url) as connection:
        producer = connection.Producer()
        producer.publish(
            payload,
            routing_key="tools",
            content_type="application/x-python-serialize",
            content_encoding="binary",
            headers={"task": "toolhub.tool_run", "id": str(uuid.uuid4()), "lang": "py"},
            declare=[Queue("tools")],
        )
    deadline = time.monotonic() + 30
    while "untrusted content" not in worker_log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)

    assert "Refusing to deserialize untrusted content" in worker_log.read_text()
    # Answered as soon as the worker replies, not after the whole timeout.
    assert app.control.ping(timeout=5, limit=1)
    assert not marker.exists()
