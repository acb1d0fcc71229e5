"""The wire shape of a stored event: the REST log, a socket's replay and its live frames
all send an event as ``event_frame`` makes it, so a client reads the three alike.

Shared below the apps because both sides use it: the conversation store
(``sessions_app.eventlog``) when it reads the log, the runtime's delivery
(``agent_app.delivery``) when it sends what a turn just stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

# An ``event`` frame: type, seq, turn, kind, data, created (ISO 8601).
Frame = dict[str, Any]


class StoredEvent(Protocol):
    """What a frame is made of: a stored event's fields (``SessionEvent``)."""

    seq: int
    turn: str
    kind: str
    data: dict[str, Any]
    created: datetime


def event_frame(seq: int, turn: str, kind: str, data: dict[str, Any], created: datetime) -> Frame:
    return {
        "type": "event",
        "seq": seq,
        "turn": turn,
        "kind": kind,
        "data": data,
        "created": created.isoformat(),
    }


def event_frames(events: Iterable[StoredEvent]) -> list[Frame]:
    """The frames of stored events, in the order given."""
    return [
        event_frame(event.seq, event.turn, event.kind, event.data, event.created)
        for event in events
    ]
