"""Where OAuth grants of MCP servers live for the runtime: ``DatabaseOAuthStore``, the
``McpOAuthStore`` that ``toolhub.tools.mcp`` takes, over ``McpOAuthGrant`` rows.

Invariants:
- The SDK calls the store from the manager's event loop thread, which must never wait on
  the database: every query runs in a worker thread (``sync_to_async``), which closes
  its database connection when it is done, as a request would.
- A grant is refreshed under its row lock (``select_for_update``): the connection that
  takes the lock first and finds the access token it holds still stored refreshes, with
  the lock held until the new tokens are written; every other connection, in any
  process, waits for the lock, finds newer tokens and takes them without a refresh. So
  no refresh token is ever sent twice, which an authorization server that rotates them
  would take as theft. The lock is held at most ``REFRESH_SECONDS``.
- A refresh writes the new tokens and nothing else: the generation stays, so no process
  reconnects for it. A grant found not to work is marked lost only while it holds the
  tokens that failed (under the lock, or with a conditional UPDATE on the access token
  the connection used): when another connection refreshed it meanwhile, nothing changes
  and that connection takes the newer tokens. A loss changes the generation, so every
  process's connection follows.
- Writes use ``QuerySet.update``: no signal fires, nothing else reacts to a token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async
from django.db import close_old_connections, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from agent_app.models import McpOAuthGrant
from toolhub.tools.mcp import McpOAuthGrant as Grant
from toolhub.tools.mcp.oauth import McpOAuthTokens

# The longest a refresh holds a grant's row: the token request's own timeout is 30 s.
REFRESH_SECONDS = 60.0


async def _off_loop[T](query: Callable[[], T]) -> T:
    def run() -> T:
        close_old_connections()
        try:
            return query()
        finally:
            close_old_connections()

    return await sync_to_async(run, thread_sensitive=False)()


async def _awaited[T](awaitable: Awaitable[T]) -> T:
    # The store's contract hands over an awaitable; run_coroutine_threadsafe takes only a
    # coroutine.
    return await awaitable


def _grant(row: McpOAuthGrant) -> Grant:
    return Grant(
        tokens=row.tokens,
        expires_at=row.expires_at,
        client_info=row.client_info,
        metadata=row.metadata,
    )


def _working(server: str) -> Grant | None:
    row = McpOAuthGrant.objects.filter(server__name=server, tokens__isnull=False).first()
    return _grant(row) if row is not None else None


def _mark_lost(rows: QuerySet[McpOAuthGrant], reason: str) -> int:
    return rows.update(
        tokens=None,
        expires_at=None,
        lost_at=timezone.now(),
        lost_reason=reason[:300],
        generation=F("generation") + 1,
    )


def _refresh(
    server: str,
    *,
    access_token: str,
    refresh: Callable[[], Awaitable[McpOAuthTokens | None]],
    reason: str,
    loop: asyncio.AbstractEventLoop,
) -> Grant | None:
    with transaction.atomic():
        row = (
            McpOAuthGrant.objects.select_for_update(of=("self",))
            .filter(server__name=server, tokens__isnull=False)
            .first()
        )
        if row is None:
            return None
        if row.tokens.get("access_token") != access_token:
            return _grant(row)  # another connection refreshed it while this one waited
        # The token request runs on the manager's loop while this thread holds the lock;
        # it is a task of its own, so new tokens are written even if the connection that
        # asked is closed meanwhile.
        asked = asyncio.run_coroutine_threadsafe(_awaited(refresh()), loop)
        try:
            tokens = asked.result(timeout=REFRESH_SECONDS)
        except TimeoutError:
            asked.cancel()
            raise
        rows = McpOAuthGrant.objects.filter(pk=row.pk)
        if tokens is None:
            _mark_lost(rows, reason)
            return None
        rows.update(tokens=tokens.tokens, expires_at=tokens.expires_at, refreshed_at=timezone.now())
        return Grant(
            tokens=tokens.tokens,
            expires_at=tokens.expires_at,
            client_info=row.client_info,
            metadata=row.metadata,
        )


def _lost(server: str, access_token: str, reason: str) -> bool:
    """Mark the grant lost if it still holds ``access_token``. The tokens are sealed, so
    the check opens them; the write is conditional on the grant being unchanged since
    (a refresh stamps ``refreshed_at``, a sign-in or a loss moves ``generation``)."""
    row = McpOAuthGrant.objects.filter(server__name=server, tokens__isnull=False).first()
    if row is None or (row.tokens or {}).get("access_token") != access_token:
        return False
    rows = McpOAuthGrant.objects.filter(
        pk=row.pk, generation=row.generation, refreshed_at=row.refreshed_at
    )
    return bool(_mark_lost(rows, reason))


class DatabaseOAuthStore:
    """The grants of this deployment's MCP servers, shared by every process."""

    async def grant(self, server: str) -> Grant | None:
        return await _off_loop(lambda: _working(server))

    async def grant_refresh(
        self,
        server: str,
        *,
        access_token: str,
        refresh: Callable[[], Awaitable[McpOAuthTokens | None]],
        reason: str,
    ) -> Grant | None:
        loop = asyncio.get_running_loop()
        return await _off_loop(
            lambda: _refresh(
                server, access_token=access_token, refresh=refresh, reason=reason, loop=loop
            )
        )

    async def grant_lost(self, server: str, *, access_token: str, reason: str) -> bool:
        return await _off_loop(lambda: _lost(server, access_token, reason))
