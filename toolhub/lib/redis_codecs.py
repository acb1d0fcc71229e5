"""How values cross Redis: JSON for the cache, msgpack for the channel layer, never pickle.

Anything that can write to Redis must not be able to run code in a process that reads it,
so no reader ever unpickles (docs/security.md, "Redis"). Django's Redis cache pickles by
default and Celery can accept pickle; settings.py points the cache at
``JsonCacheSerializer``, restricts Celery to JSON, and gives the channel layer
``SafeMsgPackSerializer``.

Both readers treat what they cannot decode as absent and log it: a poisoned cache key
reads as a miss, a poisoned channel message arrives as ``{"type": "toolhub.discarded"}``,
which every receiver ignores. Callers still check the shape of what they read, since a
value that decodes can be of any JSON type.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import msgpack
from channels_redis.serializers import BaseMessageSerializer, registry

logger = logging.getLogger(__name__)

CHANNEL_FORMAT = "toolhub-msgpack"
DISCARDED = "toolhub.discarded"


class JsonCacheSerializer:
    """The cache's codec (the interface of django.core.cache.backends.redis.RedisSerializer).

    Plain ints stay raw, as Django's own serializer keeps them, so ``incr`` works."""

    def __init__(self, protocol: Any = None) -> None:
        # Django passes the pickle protocol option; JSON has none.
        del protocol

    def dumps(self, obj: Any) -> bytes | int:
        if type(obj) is int:
            return obj
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()

    def loads(self, data: Any) -> Any:
        try:
            return int(data)
        except (TypeError, ValueError):
            pass
        try:
            return json.loads(data)
        except (TypeError, ValueError):
            logger.warning("cache: ignored a value that is not JSON (%d bytes)", len(data))
            return None


class SafeMsgPackSerializer(BaseMessageSerializer):
    """msgpack for channel-layer messages; anything that is not a message is discarded."""

    def as_bytes(self, message: Any, *args: Any, **kwargs: Any) -> bytes:
        packed: bytes = msgpack.packb(message, *args, **kwargs)
        return packed

    def from_bytes(self, message: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            value = msgpack.unpackb(message, *args, **kwargs)
        except Exception:
            value = None
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            logger.warning("channel layer: discarded a message that does not decode")
            return {"type": DISCARDED}
        return value


registry.register_serializer(CHANNEL_FORMAT, SafeMsgPackSerializer)
