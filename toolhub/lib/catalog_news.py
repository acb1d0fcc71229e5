"""News for every open chat that the tools on offer changed: an operator disabled or
enabled a tool, or an MCP server was added, changed or removed.

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

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

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
