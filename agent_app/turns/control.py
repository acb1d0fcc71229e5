"""How cancel, approvals and answers reach a running turn, from any process.

Each event loop that runs turns reads one channel-layer channel of its own, for its whole
life, and hands each message to the turn it names (``turn``). A turn stores that
channel's name on the session row while it runs, so any process's socket can reach it.
One long-lived reader per loop, rather than one per turn, means a turn costs no channel
read to start or to stop (channels-redis drops and reopens a connection to cancel a
blocking read).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from channels.layers import get_channel_layer

from toolhub.lib.redis_codecs import DISCARDED

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], None]

# One reader per (event loop, channel layer): tests replace the layer between cases.
_readers: dict[tuple[asyncio.AbstractEventLoop, int], tuple[str, asyncio.Task[None], Any]] = {}
_handlers: dict[str, Handler] = {}
# Messages for a turn that is not listening yet (a cancel can arrive between the claim
# naming the channel and the runner starting), delivered when it does.
_early: dict[str, list[dict[str, Any]]] = {}
EARLY_TURNS = 1_000


async def control_channel() -> str:
    """The channel this loop's turns are steered through (its reader started if needed)."""
    layer = get_channel_layer()
    loop = asyncio.get_running_loop()
    key = (loop, id(layer))
    known = _readers.get(key)
    if known is not None and not known[1].done():
        return known[0]
    for stale in [k for k in _readers if k[0] is loop or k[0].is_closed()]:
        _, task, _ = _readers.pop(stale)
        if not stale[0].is_closed():
            task.cancel()
    # The default prefix matters: channels-redis reads all of a process's channels that
    # share a prefix from one inbox; another prefix would be a second inbox that one
    # blocking read at a time serves, delaying every socket of the process by seconds.
    name: str = await layer.new_channel()
    task = loop.create_task(_read(layer, name), name=f"turn control {name}")
    # The layer is kept with its reader, so its id cannot be reused while both live.
    _readers[key] = (name, task, layer)
    return name


def listen(turn_id: str, handler: Handler) -> Callable[[], None]:
    """Deliver control messages for ``turn_id`` to ``handler`` (first any that came before);
    returns the unsubscribe."""
    _handlers[turn_id] = handler
    for message in _early.pop(turn_id, []):
        handler(message)

    def unlisten() -> None:
        _handlers.pop(turn_id, None)

    return unlisten


async def control_send(channel: str, turn_id: str, message: dict[str, Any]) -> None:
    """Send a control message to a turn through the channel its session row names."""
    await get_channel_layer().send(channel, {**message, "turn": turn_id})


async def _read(layer: Any, name: str) -> None:
    failing = False
    while True:
        try:
            message = await layer.receive(name)
        except asyncio.CancelledError:
            raise
        except Exception:
            # A broken read must not leave turns deaf to cancel and approvals. Said once
            # per outage (Redis down fails every retry), and again when it reads.
            if not failing:
                logger.exception("turn control channel %s: read failed; retrying", name)
            failing = True
            await asyncio.sleep(0.5)
            continue
        if failing:
            logger.info("turn control channel %s: reading again", name)
            failing = False
        if message["type"] == DISCARDED:
            continue
        turn = message.get("turn", "")
        handler = _handlers.get(turn)
        if handler is None:
            # Kept for a turn about to listen; bounded, oldest turns dropped first.
            _early.setdefault(turn, []).append(message)
            while len(_early) > EARLY_TURNS:
                _early.pop(next(iter(_early)))
            continue
        try:
            handler(message)
        except Exception:
            logger.exception("turn control: handler failed for %s", message.get("type"))
