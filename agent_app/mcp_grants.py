"""Where OAuth grants of MCP servers live for the runtime: ``DatabaseOAuthStore``, the
``McpOAuthStore`` that ``toolhub.tools.mcp`` takes, over ``McpOAuthGrant`` rows.

Invariants:
- The SDK calls the store from the manager's event loop thread, which must never wait on
  the database: every query runs in a worker thread (``sync_to_async``), which closes
  its database connection when it is done, as a request would.
- A refresh writes the new tokens and nothing else: the generation stays, so no process
  reconnects for it. A grant found not to work is marked lost with a conditional UPDATE
  on the access token the connection used: when another process refreshed it meanwhile,
  nothing changes and that connection reconnects with the newer tokens. A loss changes
  the generation, so every process's connection follows.
- Writes use ``QuerySet.update``: no signal fires, nothing else reacts to a token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.db.models import F
from django.utils import timezone

from agent_app.models import McpOAuthGrant
from toolhub.tools.mcp import McpOAuthGrant as Grant


async def _off_loop[T](query: Callable[[], T]) -> T:
    def run() -> T:
        close_old_connections()
        try:
            return query()
        finally:
            close_old_connections()

    return await sync_to_async(run, thread_sensitive=False)()


def _working(server: str) -> Grant | None:
    row = McpOAuthGrant.objects.filter(server__name=server, tokens__isnull=False).first()
    if row is None:
        return None
    return Grant(
        tokens=row.tokens,
        expires_at=row.expires_at,
        client_info=row.client_info,
        metadata=row.metadata,
    )


def _refreshed(server: str, tokens: dict[str, Any], expires_at: float | None) -> None:
    McpOAuthGrant.objects.filter(server__name=server, tokens__isnull=False).update(
        tokens=tokens, expires_at=expires_at, refreshed_at=timezone.now()
    )


def _lost(server: str, access_token: str, reason: str) -> bool:
    return bool(
        McpOAuthGrant.objects.filter(server__name=server, tokens__access_token=access_token).update(
            tokens=None,
            expires_at=None,
            lost_at=timezone.now(),
            lost_reason=reason[:300],
            generation=F("generation") + 1,
        )
    )


class DatabaseOAuthStore:
    """The grants of this deployment's MCP servers, shared by every process."""

    async def grant(self, server: str) -> Grant | None:
        return await _off_loop(lambda: _working(server))

    async def tokens_refreshed(
        self, server: str, *, tokens: dict[str, Any], expires_at: float | None
    ) -> None:
        await _off_loop(lambda: _refreshed(server, tokens, expires_at))

    async def grant_lost(self, server: str, *, access_token: str, reason: str) -> bool:
        return await _off_loop(lambda: _lost(server, access_token, reason))
