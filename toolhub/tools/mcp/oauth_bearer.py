"""An OAuth server's connection: the streamable HTTP transport that sends the stored
grant's access token with every request to the MCP server (``oauth_transport``), and the
connection's copy of the grant (``_HeldGrant``), refreshed through the ``McpOAuthStore``
a little before it expires.

Invariants (the whole list is in ``oauth``'s docstring): a grant is refreshed once for
every process, through the store, and a copy older than the store's adopts the stored
tokens instead; a token the MCP server refuses marks the grant lost only while the store
still holds it; a grant is used only while it fits the configuration (its resource, its
client); every token held is one ``redact`` hides; nothing here asks a person anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

from toolhub.tools.mcp.config import McpServerConfig
from toolhub.tools.mcp.oauth import (
    McpOAuthGrant,
    McpOAuthStore,
    McpOAuthTokens,
    McpSignInNeeded,
    grant_client,
    oauth_error,
    oauth_http,
    sign_in_reason,
    token_request,
)
from toolhub.tools.netguard import guard

if TYPE_CHECKING:
    from mcp.shared.auth import OAuthToken

# A token is refreshed this long before it expires (at most a third of its life), so that
# no request leaves with a token that expires on the way: a 401 would cost the grant.
REFRESH_EARLY_SECONDS = 60.0


class _Superseded(Exception):
    """Another connection changed the grant while this connection's tokens failed."""


def _refresh_at(expires_at: float | None, lifetime: float | None) -> float | None:
    if expires_at is None:
        return None
    early = min(REFRESH_EARLY_SECONDS, (lifetime or REFRESH_EARLY_SECONDS * 3) / 3)
    return expires_at - early


class _HeldGrant:
    """One connection's copy of the stored grant. It changes only by a refresh made
    through the store (``McpOAuthStore.grant_refresh``: one process at a time, and none
    while the store holds newer tokens than this copy) or by adopting the newer tokens
    another connection stored. Every token it holds is one ``redact`` hides."""

    def __init__(self, config: McpServerConfig, store: McpOAuthStore, grant: McpOAuthGrant):
        self.config = config
        self.store = store
        # One refresh at a time on this connection; the store makes it one per grant.
        self.lock = asyncio.Lock()
        self._adopt(grant)

    def _adopt(self, grant: McpOAuthGrant) -> None:
        from mcp.shared.auth import OAuthMetadata, OAuthToken

        self.grant = grant
        self.tokens = OAuthToken.model_validate(grant.tokens)
        self.client = grant_client(self.config, grant.client_info)
        # Where discovery at sign-in found it, which may be another host than the server's.
        asm = OAuthMetadata.model_validate(grant.metadata["server_metadata"])
        self.token_endpoint = str(asm.token_endpoint)
        self.refresh_at = _refresh_at(grant.expires_at, self.tokens.expires_in)
        self._hold(self.tokens)

    def _hold(self, tokens: OAuthToken) -> None:
        for value in (tokens.access_token, tokens.refresh_token):
            if value:
                self.config.held_secrets.add(value)

    def _due(self) -> bool:
        return (
            bool(self.tokens.refresh_token)
            and self.refresh_at is not None
            and time.time() >= self.refresh_at
        )

    async def access_token(self) -> str:
        """The access token to send now, refreshed first when it is about to expire."""
        async with self.lock:
            # Adopted tokens may be due in turn (the process that stored them stopped
            # refreshing): the second round refreshes those.
            for _ in range(2):
                if not self._due():
                    break
                await self._refresh()
            return self.tokens.access_token

    async def _refresh(self) -> None:
        reason = sign_in_reason(self.config.name)
        grant = await self.store.grant_refresh(
            self.config.name,
            access_token=self.tokens.access_token,
            refresh=self._exchange,
            reason=reason,
        )
        if grant is None or not _fits(self.config, grant):
            raise McpSignInNeeded(reason)
        self._adopt(grant)

    async def _exchange(self) -> McpOAuthTokens | None:
        """New tokens for this copy's refresh token, from the authorization server (the
        store holds the grant meanwhile); None when it refuses them. Raises
        ``McpOAuthError`` when it cannot be asked or answers otherwise."""
        import httpx2
        from mcp.client.auth import OAuthFlowError
        from mcp.client.auth.utils import handle_token_response_scopes
        from mcp.shared.auth_utils import calculate_token_expiry

        prior, config = self.tokens, self.config
        data, headers = token_request(
            config,
            self.client,
            self.grant.metadata,
            {
                "grant_type": "refresh_token",
                "refresh_token": prior.refresh_token or "",
                "client_id": self.client.client_id,
                "resource": self.grant.metadata["resource"],
            },
        )
        try:
            async with oauth_http(config) as http:
                answer = await http.post(self.token_endpoint, data=data, headers=headers)
                if answer.status_code in (400, 401):
                    # RFC 6749 §5.2: the refresh token or the client is no good any more.
                    return None
                if answer.status_code != 200:
                    raise oauth_error(
                        config,
                        "the authorization server could not refresh the token "
                        f"(HTTP {answer.status_code})",
                    )
                tokens = await handle_token_response_scopes(answer)
        except (OAuthFlowError, httpx2.HTTPError, ValueError) as exc:
            detail = f"{type(exc).__name__}: {exc}"
            raise oauth_error(config, "the token could not be refreshed", detail) from None
        # RFC 6749 §6: a refresh may leave out the scope and the refresh token, unchanged.
        if tokens.scope is None:
            tokens.scope = prior.scope
        if tokens.refresh_token is None:
            tokens.refresh_token = prior.refresh_token
        self._hold(tokens)
        return McpOAuthTokens(
            tokens=tokens.model_dump(mode="json", exclude_none=True),
            expires_at=calculate_token_expiry(tokens.expires_in),
        )

    async def after_refusal(self, used: str) -> str:
        """The access token to try again with after the MCP server refused ``used``: the
        newer one another connection stored. Raises ``McpSignInNeeded`` when the store
        holds ``used`` still (the grant is marked lost) or nothing that works."""
        async with self.lock:
            if self.tokens.access_token != used:
                return self.tokens.access_token  # another request here moved on meanwhile
            reason = sign_in_reason(self.config.name)
            stored = await self.store.grant(self.config.name)
            if stored is None:
                raise McpSignInNeeded(reason)
            if stored.tokens.get("access_token") != used:
                if not _fits(self.config, stored):
                    raise McpSignInNeeded(reason)
                self._adopt(stored)
                return self.tokens.access_token
            if await self.store.grant_lost(self.config.name, access_token=used, reason=reason):
                raise McpSignInNeeded(reason)
            raise _Superseded("another process refreshed the tokens; reconnecting with them")


def _refused(response: Any) -> bool:
    """Whether the MCP server refused the token a request carried (RFC 6750 §3.1)."""
    from mcp.client.auth.utils import extract_field_from_www_auth

    if response.status_code == 401:
        return True
    return (
        response.status_code == 403
        and extract_field_from_www_auth(response, "error") == "insufficient_scope"
    )


def _bearer(held: _HeldGrant) -> Any:
    """The ``httpx2.Auth`` of an OAuth server's connection: each request carries the held
    access token; one the server refuses goes once more with the token another
    connection stored since, if any."""
    import httpx2

    class Bearer(httpx2.Auth):
        async def async_auth_flow(
            self, request: httpx2.Request
        ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
            used = await held.access_token()
            request.headers["Authorization"] = f"Bearer {used}"
            response = yield request
            if _refused(response):
                request.headers["Authorization"] = f"Bearer {await held.after_refusal(used)}"
                yield request

    return Bearer()


def _fits(config: McpServerConfig, grant: McpOAuthGrant) -> bool:
    """Whether the grant was made for this server as configured now: a token is never
    sent to a URL outside the resource it was issued for, nor used by another client."""
    from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

    resource = grant.metadata.get("resource")
    if not isinstance(resource, str) or not check_resource_allowed(
        requested_resource=resource_url_from_server_url(config.url), configured_resource=resource
    ):
        return False
    client_id = grant.client_info.get("client_id")
    return not config.oauth_client_id or client_id == config.oauth_client_id


@contextlib.asynccontextmanager
async def oauth_transport(
    config: McpServerConfig, store: McpOAuthStore | None
) -> AsyncIterator[Any]:
    """The streamable HTTP transport of an OAuth server, with the stored grant; raises
    ``McpSignInNeeded`` at once when there is none. Only the requests to the MCP server
    carry its configured headers."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    grant = await store.grant(config.name) if store is not None else None
    if grant is None or store is None or not _fits(config, grant):
        raise McpSignInNeeded(sign_in_reason(config.name))
    import httpcore2

    auth = _bearer(_HeldGrant(config, store, grant))
    http = guard(
        create_mcp_http_client(headers=dict(config.headers), auth=auth), httpcore2, config.reach
    )
    async with http, streamable_http_client(config.url, http_client=http) as streams:
        yield streams
