"""toolhub's channel layer sends to a group as channels-redis does, in fewer round trips.

Against the real Redis: every member hears a group send once, a member past the group's
expiry hears nothing, a member at capacity loses the message (the others do not), stale
messages make room, the keys left in Redis are channels-redis's own, key by key, and a
Redis that forgot the script still delivers.
"""

from __future__ import annotations

import logging
import time

import pytest
import redis.asyncio as aioredis
from channels_redis.core import RedisChannelLayer

from toolhub.lib.channel_layer import ToolhubChannelLayer
from toolhub.settings_env import redis_channel_layer


def _layer(kind, redis_url, prefix, **config):
    settings = redis_channel_layer(redis_url)["CONFIG"]
    return kind(**{**settings, "prefix": prefix, **config})


@pytest.fixture
async def redis(redis_url):
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


async def _members(layer):
    """Two channels of this process and one plain channel, all in group ``chat``."""
    local_a = await layer.new_channel()
    local_b = await layer.new_channel()
    plain = "plain-member"
    for channel in (local_a, local_b, plain):
        await layer.group_add("chat", channel)
    return local_a, local_b, plain


async def test_every_member_of_a_group_hears_a_group_send_once(redis, redis_url):
    layer = _layer(ToolhubChannelLayer, redis_url, "t1")
    local_a, local_b, plain = await _members(layer)

    await layer.group_send("chat", {"type": "session.events", "frames": [{"seq": 1}]})

    for channel in (local_a, local_b, plain):
        message = await layer.receive(channel)
        assert message == {"type": "session.events", "frames": [{"seq": 1}]}
    # One message went to this process's key for both of its channels, and nothing more
    # is queued for anyone.
    assert await redis.zcard("t1" + layer.non_local_name(local_a)) == 0
    assert await redis.zcard("t1plain-member") == 0
    await layer.flush()


async def test_a_member_past_the_groups_expiry_is_dropped_and_hears_nothing(redis, redis_url):
    layer = _layer(ToolhubChannelLayer, redis_url, "t2")
    _, _, plain = await _members(layer)
    # The plain member joined longer ago than the group keeps members.
    await redis.zadd("t2:group:chat", {plain: int(time.time()) - layer.group_expiry - 10})

    await layer.group_send("chat", {"type": "session.events", "frames": []})

    assert await redis.zscore("t2:group:chat", plain) is None
    assert await redis.exists("t2plain-member") == 0
    await layer.flush()


async def test_a_member_at_capacity_loses_the_message_and_the_others_still_hear_it(
    redis, redis_url, caplog
):
    layer = _layer(ToolhubChannelLayer, redis_url, "t3", capacity=2)
    local_a, _, plain = await _members(layer)
    for number in range(2):
        await layer.send(plain, {"type": "filler", "n": number})

    with caplog.at_level(logging.INFO, logger="channels_redis.core"):
        await layer.group_send("chat", {"type": "session.events", "frames": [{"seq": 7}]})

    assert await redis.zcard("t3plain-member") == 2
    assert (await layer.receive(local_a))["frames"] == [{"seq": 7}]
    assert "1 of 3 channels over capacity in group chat" in caplog.text
    await layer.flush()


async def test_messages_past_their_expiry_make_room_before_capacity_is_counted(redis, redis_url):
    layer = _layer(ToolhubChannelLayer, redis_url, "t4", capacity=1)
    _, _, plain = await _members(layer)
    await redis.zadd("t4plain-member", {b"stale": time.time() - layer.expiry - 10})

    await layer.group_send("chat", {"type": "session.events", "frames": [{"seq": 2}]})

    assert (await layer.receive(plain))["frames"] == [{"seq": 2}]
    await layer.flush()


async def test_the_keys_a_group_send_leaves_are_those_channels_redis_leaves(redis, redis_url):
    ours = _layer(ToolhubChannelLayer, redis_url, "ours", capacity=2)
    theirs = _layer(RedisChannelLayer, redis_url, "theirs", capacity=2)
    for layer, prefix in ((ours, "ours"), (theirs, "theirs")):
        # The same members: this process's channels named alike, a plain one at capacity,
        # one expired member, one stale message.
        layer.client_prefix = "proc"
        for channel in ("specific.proc!a", "specific.proc!b", "full", "gone"):
            await layer.group_add("chat", channel)
        await redis.zadd(f"{prefix}:group:chat", {"gone": 1})
        await layer.send("full", {"type": "filler"})
        await layer.send("full", {"type": "filler"})
        await redis.zadd(f"{prefix}specific.proc!", {b"stale": 1})
        await layer.group_send("chat", {"type": "session.events", "frames": [{"seq": 3}]})
        await layer.group_send("chat", {"type": "session.events", "frames": [{"seq": 4}]})

    async def contents(prefix):
        found = {}
        for key in sorted(await redis.keys(f"{prefix}*")):
            kind = (await redis.type(key)).decode()
            assert kind == "zset", key
            members = await redis.zrange(key, 0, -1)
            ttl = await redis.ttl(key)
            name = key.decode().removeprefix(prefix)
            # Messages carry a random id (channels-redis's own); group members do not.
            found[name] = (
                len(members) if name != ":group:chat" else sorted(members),
                ttl > 0,
            )
        return found

    assert await contents("ours") == await contents("theirs")
    # The stale message made room for both sends; the full member took neither.
    assert (await contents("ours"))["specific.proc!"][0] == 2
    assert (await contents("ours"))["full"][0] == 2
    assert b"stale" not in await redis.zrange("oursspecific.proc!", 0, -1)
    for layer in (ours, theirs):
        await layer.flush()


async def test_a_redis_that_forgot_the_script_still_delivers(redis, redis_url):
    layer = _layer(ToolhubChannelLayer, redis_url, "t6")
    local_a, _, _ = await _members(layer)
    await layer.group_send("chat", {"type": "session.events", "frames": [{"seq": 1}]})
    await layer.receive(local_a)

    await redis.script_flush()
    await layer.group_send("chat", {"type": "session.events", "frames": [{"seq": 2}]})

    assert (await layer.receive(local_a))["frames"] == [{"seq": 2}]
    await layer.flush()
