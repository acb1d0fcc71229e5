"""The Celery broker's transport: kombu's Redis transport, made to survive a Redis restart.

When Redis goes away under a worker, Celery 5.7 collects the broken connection and then
closes it once more (``Consumer.on_connection_error_after_connected``). The collect drops
the transport's link to its connection (``transport.client = None``) even when closing a
channel failed on the dead socket, so the later close reaches a channel that is still
open: it restores the unacknowledged messages of a running ``acks_late`` task, builds a
new connection pool from ``transport.client.hostname`` and raises ``AttributeError``.
Celery ignores only connection errors there, so the worker stopped with "Unrecoverable
error" (docs/outages.md, "The worker").

Here a channel whose connection is gone says so with a connection error, which every
caller on those paths already expects: the close is ignored, the consumer reconnects, and
the late acknowledgement of the running task is logged as failed. That is harmless: a
worker claims a run with a conditional UPDATE, so a redelivered message does nothing.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

GONE = "the broker connection of this channel was closed (Redis went away)"


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        transport = self.connection
        if transport is None or transport.client is None:
            raise RedisConnectionError(GONE)
        # kombu ships py.typed but leaves this method unannotated.
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]
        return params


class Transport(kombu_redis.Transport):
    Channel = Channel

    @property
    def supports_batch_publish(self) -> bool:
        # Read on a transport whose connection was closed, too: no batches then.
        if self.client is None:
            return False
        supported: bool = super().supports_batch_publish
        return supported
