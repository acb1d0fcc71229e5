"""A staff member's OAuth sign-in to an MCP server, in two requests that any two web
processes may serve: ``mcp_oauth_sign_in_begin`` (the ops page's "Sign in") and
``mcp_oauth_sign_in_finish`` (the callback the authorization server sends the browser to).

Invariants:
- Begin keeps what finishing needs (the PKCE verifier, the client, what discovery found)
  in an ``McpOAuthSignIn`` row found by the sha256 of the state, never by the state
  itself. Finish claims that row with a conditional UPDATE: only the person who began it,
  for that server, once, within ``SIGN_IN_SECONDS``. Anything else is refused before any
  request leaves, and stores nothing.
- The grant is written whole in one transaction, with a new generation; on commit this
  process reconciles, and every other one within ``TOOLHUB_MCP_POLL`` seconds.
- Tokens appear in no answer, message, log entry or error: errors are redacted by the
  server's config and cut.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.admin.models import CHANGE, LogEntry
from django.db import transaction
from django.utils import timezone

from agent_app.mcp import mcp_config, mcp_reconcile_on_commit
from agent_app.models import McpOAuthGrant, McpOAuthSignIn, McpServer
from toolhub.lib.errors import Conflict, Forbidden, Invalid
from toolhub.tools.mcp import (
    McpOAuthError,
    McpServerConfig,
    OAuthSignIn,
    oauth_sign_in_begin,
    oauth_sign_in_finish,
)
from toolhub.tools.mcp import McpOAuthGrant as Grant
from toolhub.tools.mcp.config import untrusted_text

SIGN_IN_SECONDS = 600
NOT_BEGUN = (
    "This sign-in is not one you began here, or it was used already or has expired. "
    "Start again with “Sign in” on the ops page."
)


def _digest(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


def _oauth_config(user: Any, server: McpServer) -> McpServerConfig:
    if not user.is_staff:
        raise Forbidden("MCP servers are managed by staff")
    if server.auth != McpServer.Auth.OAUTH or not server.enabled:
        raise Invalid(f"MCP server {server.name} is not an enabled OAuth server")
    try:
        return mcp_config(server)
    except ValueError as exc:
        raise Invalid(str(exc)) from exc


def mcp_oauth_sign_in_begin(*, user: Any, server: McpServer, redirect_uri: str) -> str:
    """Begin ``user``'s sign-in to ``server``: the authorization server's URL to send
    their browser to. Raises ``Forbidden`` (not staff), ``Invalid`` (not an OAuth
    server), ``Conflict`` (the servers cannot be asked, or refuse)."""
    config = _oauth_config(user, server)
    earlier = McpOAuthGrant.objects.filter(server=server).values_list("client_info", flat=True)
    try:
        sign_in = async_to_sync(oauth_sign_in_begin)(
            config, redirect_uri=redirect_uri, client_info=earlier.first() or None
        )
    except McpOAuthError as exc:
        raise Conflict(str(exc)) from exc
    with transaction.atomic():
        # Begun and abandoned sign-ins go once they can no longer finish.
        McpOAuthSignIn.objects.filter(created__lt=_oldest()).delete()
        McpOAuthSignIn.objects.create(
            server=server,
            user=user,
            state_digest=_digest(sign_in.state),
            code_verifier=sign_in.code_verifier,
            client_info=sign_in.client_info,
            metadata=sign_in.metadata,
        )
    return sign_in.authorization_url


def _oldest() -> Any:
    return timezone.now() - timedelta(seconds=SIGN_IN_SECONDS)


def mcp_oauth_sign_in_finish(
    *, user: Any, server: McpServer, state: str, code: str, iss: str | None, error: str
) -> McpOAuthGrant:
    """Finish the sign-in whose ``state`` came back: the code exchanged for tokens,
    stored as the server's grant. Raises ``Forbidden`` (not staff), ``Invalid`` (a state
    this person did not begin for this server, used or expired; a refusal the
    authorization server sent back), ``Conflict`` (the exchange failed)."""
    config = _oauth_config(user, server)
    digest = _digest(state)
    # Claimed once, by its own person: a replayed or forged callback finds nothing.
    claimed = McpOAuthSignIn.objects.filter(
        state_digest=digest, server=server, user=user, used__isnull=True, created__gte=_oldest()
    ).update(used=timezone.now())
    if not state or claimed != 1:
        raise Invalid(NOT_BEGUN)
    pending = McpOAuthSignIn.objects.get(state_digest=digest)
    if error:
        pending.delete()
        raise Invalid(
            "The authorization server did not grant access: "
            + config.redact(untrusted_text(error, 200))
        )
    if not code:
        pending.delete()
        raise Invalid("The authorization server sent no code back.")
    sign_in = OAuthSignIn(
        authorization_url="",
        state=state,
        code_verifier=pending.code_verifier,
        client_info=pending.client_info,
        metadata=pending.metadata,
    )
    try:
        grant = async_to_sync(oauth_sign_in_finish)(config, sign_in=sign_in, code=code, iss=iss)
    except McpOAuthError as exc:
        pending.delete()
        raise Conflict(str(exc)) from exc
    return _grant_store(user=user, server=server, grant=grant, pending=pending)


def _grant_store(
    *, user: Any, server: McpServer, grant: Grant, pending: McpOAuthSignIn
) -> McpOAuthGrant:
    """The grant written whole, under a new generation, in one transaction with the
    sign-in's removal and its admin log entry; every process reconnects once it commits."""
    with transaction.atomic():
        row, _ = McpOAuthGrant.objects.select_for_update().get_or_create(server=server)
        row.tokens = grant.tokens
        row.expires_at = grant.expires_at
        row.client_info = grant.client_info
        row.metadata = grant.metadata
        row.generation += 1
        row.signed_in_by = user
        row.signed_in_at = timezone.now()
        row.refreshed_at = row.lost_at = None
        row.lost_reason = ""
        row.save()
        pending.delete()
        LogEntry.objects.log_actions(
            user.pk, [server], CHANGE, change_message=f"signed in to MCP server {server.name}"
        )
        mcp_reconcile_on_commit()
    return row
