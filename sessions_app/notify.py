"""The one way anything reaches a browser: messages to a session's channel-layer group.

Every socket of a session joins ``session_group(id)``. Stored events travel as
``session.events`` (a batch of ``event`` frames, in seq order, sent only after they are
stored, so a replay from the database never misses what a live socket was sent); worker
tails travel as ``session.tail`` and are never stored.
"""

from __future__ import annotations

from typing import Any

from channels.layers import get_channel_layer

from sessions_app.models import SessionEvent


def session_group(session_id: Any) -> str:
    return f"session.{session_id}"


def event_frame(event: SessionEvent) -> dict[str, Any]:
    return {
        "type": "event",
        "seq": event.seq,
        "turn": event.turn,
        "kind": event.kind,
        "data": event.data,
    }


async def notify_events(session_id: Any, events: list[SessionEvent]) -> None:
    if not events:
        return
    frames = [event_frame(event) for event in events]
    await get_channel_layer().group_send(
        session_group(session_id), {"type": "session.events", "frames": frames}
    )


async def notify_tail(session_id: Any, frame: dict[str, Any]) -> None:
    await get_channel_layer().group_send(
        session_group(session_id), {"type": "session.tail", "frame": frame}
    )
