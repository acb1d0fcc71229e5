"""The turn reaper: every process that serves turns ends the turns whose owner died.

A turn's claim is a lease its owner renews (``state``). When the owner process is gone,
nobody renews it; a round of the reaper, every ``reap_seconds()`` on a loop of this
process, ends each such turn (``lost`` results for its open calls, ``turn_failed`` with
code ``lost``, the session released) and sends those events to the session's group, so a
page on any server shows the turn ended without a manual Stop (docs/faults.md). Once a
minute a round also deletes for good the chats binned past their Undo.

There is one reaper per server process. It starts with the server (``toolhub.serve``
starts it as the server's loop starts, before any request), or on the first request. It
never takes this process's own live turns: a loop that stalled past its lease is slow,
not gone. Another process may still take them (as may a new claim on the session); the
owner's heartbeat then finds the lease gone and cancels the turn, whose next write finds
the claim lost and writes nothing (``LostClaim``). After a round that failed (the
database away), the next waits a whole lease: every owner's heartbeat failed too, and
must get a chance to renew before their leases are taken for dead. Leases are stamped
with each server's clock: servers are assumed to keep time (NTP), within a few seconds.
"""

from __future__ import annotations

import asyncio
import logging

from agent_app.delivery import notify_events
from agent_app.turns.claim import lease, reap_seconds, turns_reap
from agent_app.turns.loop import live_turns, on_db_thread
from sessions_app.services import sessions_purge_binned

logger = logging.getLogger(__name__)

_reaper: asyncio.Task[None] | None = None
# How often a round also purges the chats binned past their Undo.
PURGE_SECONDS = 60.0


def reaper_start() -> None:
    """Make sure this process's reaper runs (on the running loop, if it has none)."""
    global _reaper
    if _reaper is not None and not _reaper.done() and not _reaper.get_loop().is_closed():
        return
    _reaper = asyncio.get_running_loop().create_task(_reap_forever(), name="turn reaper")


async def reap_once() -> int:
    """One round: end every abandoned turn and tell its session. Returns how many."""
    freed = await on_db_thread(turns_reap, keep=live_turns())
    for session_id, events in freed:
        logger.warning("ended turn %s: its server stopped", events[-1].turn if events else "?")
        try:
            await notify_events(session_id, events)
        except Exception as exc:
            # The events are stored; a socket that misses this send reads them on resume.
            logger.warning("session %s: its ended turn not sent live (%s)", session_id, exc)
    return len(freed)


async def _reap_forever() -> None:
    purged_at = 0.0
    while True:
        try:
            await reap_once()
            loop_time = asyncio.get_running_loop().time()
            if loop_time - purged_at >= PURGE_SECONDS:
                # Chats binned on the chat page, past their Undo.
                purged_at = loop_time
                await on_db_thread(sessions_purge_binned)
        except Exception:
            # The database may be restarting. Every owner's heartbeat failed meanwhile too,
            # so leases ran out with nobody dead: the next round waits a whole lease, time
            # for the live owners to renew once the database is back.
            logger.warning("the turn reaper's round failed", exc_info=True)
            await asyncio.sleep(lease().total_seconds())
        await asyncio.sleep(reap_seconds())
