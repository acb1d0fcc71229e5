"""News for every open chat that the tools on offer changed: an operator disabled or
enabled a tool, or an MCP server was added, changed or removed; and news for one chat's
tabs that its options (agent, model, profile, toggles) changed in one of them, or that a
turn's ``enter_plan_mode`` or ``exit_plan_mode`` switched its plan mode.

Every session socket is in ``CATALOG_GROUP``; a ``catalog.changed`` message makes each
page refresh its inspector, so an open chat shows the change before its next turn. The
news carries nothing but the fact: each page asks for its own chat's next turn, with its
own permissions. It is sent after the change commits, and again by each web process
once its own MCP connections changed its tools (agent_app.mcp.mcp_follow_once). It is
not kept: an outage of the channel layer, or a page away from its socket, loses only
the news (the page asks again when it reconnects; the next turn resolves live either
way).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from toolhub.lib.event_frames import event_frames
from toolhub.lib.outage import REDIS_ERRORS

logger = logging.getLogger(__name__)

CATALOG_GROUP = "toolhub.catalog"
MESSAGE = {"type": "catalog.changed"}


def catalog_changed() -> None:
    """Tell every open chat, once the caller's transaction commits. Called from sync
    code (a view, a service, a thread of its own)."""
    transaction.on_commit(catalog_changed_now)


def catalog_changed_now() -> None:
    with contextlib.suppress(*REDIS_ERRORS):
        async_to_sync(get_channel_layer().group_send)(CATALOG_GROUP, MESSAGE)


def session_group(session_id: Any) -> str:
    """The channel layer group of a chat's sockets."""
    return f"session.{session_id}"


def chat_options_changed(*, session_id: Any, tab: str) -> None:
    """Tell a chat's pages that its options changed, once the caller's transaction
    commits: each draws its options panel again from the chat as stored, so what a tab's
    controls show is what its next message uses; ``tab`` (the page that made the change,
    which drew it already) ignores it."""
    message = {"type": "options.changed", "tab": tab[:64]}

    def send() -> None:
        with contextlib.suppress(*REDIS_ERRORS):
            async_to_sync(get_channel_layer().group_send)(session_group(session_id), message)

    transaction.on_commit(send)


def chat_events_stored(*, session_id: Any, events: list[Any]) -> None:
    """Send events stored outside a turn (a switch of versions) to the chat's sockets
    once the caller's transaction commits, as a turn's are sent (``session.events``); a
    socket that misses them reads them from the log with the next event."""
    frames = event_frames(events)

    def send() -> None:
        with contextlib.suppress(*REDIS_ERRORS):
            async_to_sync(get_channel_layer().group_send)(
                session_group(session_id), {"type": "session.events", "frames": frames}
            )

    transaction.on_commit(send)
