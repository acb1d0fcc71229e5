"""channels-redis with a group send of two round trips to Redis instead of four.

A turn sends its events to its chat's group two or three times (``notify_events``), so the
group send is on every turn's path. channels-redis does it in four round trips: drop the
group's expired members, list the rest, drop each member's expired messages, then add the
message to each member under a Lua script sent in full each time. Here the first two go
in one pipeline and the last two in one script, run by its hash (``EVALSHA``; Redis keeps
the script after the first call, and redis-py loads it again after a restart of Redis).

What a send does is channels-redis's own, step for step: the same keys, the same expiry
of members and messages, the same per-member message (``__asgi_channel__`` naming the
process's channels), the same capacity check, and a member over capacity drops the
message and is logged the same way. Only the number of round trips changes
(tests/integration/project/test_channel_layer.py compares the two, key by key).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from channels_redis.core import RedisChannelLayer

logger = logging.getLogger("channels_redis.core")

# KEYS: the members' message keys. ARGV: one message per key, then one capacity per key,
# then the time now, the messages' expiry in seconds, and the oldest score still kept.
_SEND = """
local over_capacity = 0
local count = #KEYS
local now = ARGV[2 * count + 1]
local expiry = ARGV[2 * count + 2]
local oldest = ARGV[2 * count + 3]
for i = 1, count do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, oldest)
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[count + i]) then
        redis.call('ZADD', KEYS[i], now, ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        over_capacity = over_capacity + 1
    end
end
return over_capacity
"""


class ToolhubChannelLayer(RedisChannelLayer):  # type: ignore[misc]
    """``RedisChannelLayer`` whose ``group_send`` takes two round trips (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # redis-py's Script: the text and its hash. Each call names the connection it runs
        # on: channels-redis keeps a pool per event loop.
        self._send: Any = None

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        key = self._group_key(group)
        connection = self.connection(self.consistent_hash(group))
        listing = connection.pipeline(transaction=False)
        listing.zremrangebyscore(key, min=0, max=int(time.time()) - self.group_expiry)
        listing.zrange(key, 0, -1)
        _, members = await listing.execute()
        channel_names = [member.decode("utf8") for member in members]
        keys_by_connection, messages, capacities = self._map_channel_keys_to_connection(
            channel_names, message
        )
        for index, keys in keys_by_connection.items():
            now = time.time()
            args = [
                *(messages[key] for key in keys),
                *(capacities[key] for key in keys),
                now,
                self.expiry,
                int(now) - int(self.expiry),
            ]
            on = self.connection(index)
            if self._send is None:
                self._send = on.register_script(_SEND)
            over = await self._send(keys=keys, args=args, client=on)
            if over > 0:
                logger.info(
                    "%s of %s channels over capacity in group %s", over, len(channel_names), group
                )
