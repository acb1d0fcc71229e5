"""OAuth 2.1 for streamable HTTP MCP servers, with the SDK's client auth helpers: what the
two halves share. The grant as stored (``McpOAuthGrant``) and the store it lives in
(``McpOAuthStore``), the errors, and the requests both halves make to the authorization
server (``oauth_http``, ``token_request``).

Two halves, neither of which keeps a flow open between requests:

- **Sign-in** (``oauth_sign_in``) is a staff member's browser round trip to the
  authorization server, split at the redirect so that any web process can finish what
  another began. ``oauth_sign_in_begin`` asks the MCP server, reads its protected-resource
  and authorization-server metadata (``oauth_discovery``), registers a client when there
  is none, and makes the PKCE pair and the state, each with the SDK's own helpers; it
  returns everything the other half needs (``OAuthSignIn``), which the caller keeps
  (toolhub: a database row) until the authorization server sends the browser back.
  ``oauth_sign_in_finish`` checks the issuer, exchanges the code and returns the grant to
  store.
- **Connecting** (``oauth_bearer.oauth_transport``) sends the stored grant's access token
  with every request to the MCP server and refreshes it a little before it expires,
  through the ``McpOAuthStore``, which every process's and every chat's connection to the
  server shares.

Invariants:
- A grant is refreshed once, whichever of the connections sharing it gets there first:
  the store re-reads it and holds it exclusively while one refresh runs
  (``McpOAuthStore.grant_refresh``), and a connection whose copy is older than what the
  store holds adopts the stored tokens instead of refreshing. An authorization server
  that rotates refresh tokens, and revokes every token of a grant when an old one comes
  back, never sees one twice.
- A connection never asks a person anything. A refresh the authorization server refuses,
  or a token the MCP server refuses while the store holds no newer one, marks the grant
  lost (``McpSignInNeeded``); only while the store holds the tokens that failed, so a
  connection that another connection's refresh overtook adopts the newer tokens instead.
- What goes to the authorization server (its metadata, registration, code exchange,
  refresh) never carries the MCP server's configured headers, which are for the MCP
  server alone; it may be another host.
- A grant is used only while it fits the configuration: a token goes to no URL outside
  the resource it was issued for (an operator who changes the URL signs in again), and
  belongs to the configured client.
- Tokens live in the store, the connection and ``McpServerConfig.held_secrets``, whence
  ``redact`` removes them from every error and log line of the server.
- The store is called on the manager's event loop: an implementation must not block it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from toolhub.tools.mcp.config import McpServerConfig, untrusted_text
from toolhub.tools.netguard import guard

if TYPE_CHECKING:
    from mcp.shared.auth import (
        OAuthClientInformationFull,
        OAuthClientMetadata,
        OAuthToken,
    )

# What toolhub asks for: it refreshes, so it needs a refresh token.
GRANT_TYPES = ["authorization_code", "refresh_token"]
HTTP_SECONDS = 30.0
MAX_ERROR_CHARS = 300


class McpSignInNeeded(Exception):
    """The server cannot connect until a staff member signs in (the message says so)."""


class McpOAuthError(Exception):
    """A sign-in that cannot go on, with what the servers said (secrets removed)."""


def sign_in_reason(server: str) -> str:
    return f"MCP server {server} needs sign-in: a staff member signs in on the ops page"


@dataclass(frozen=True, slots=True)
class McpOAuthGrant:
    """One sign-in's result, as stored: the tokens (``OAuthToken`` as JSON), when the
    access token expires (epoch seconds; None: not said), the client it was issued to, and
    what discovery found (the token endpoint a refresh goes to, the resource, the redirect
    URI the client was registered with)."""

    tokens: dict[str, Any]
    expires_at: float | None
    client_info: dict[str, Any]
    metadata: dict[str, Any]


class McpOAuthStore(Protocol):
    """Where grants live (toolhub: the database). Called on the manager's loop."""

    async def grant(self, server: str) -> McpOAuthGrant | None:
        """The server's grant, or None when it has none that works (sign-in needed)."""
        ...

    async def grant_refresh(
        self,
        server: str,
        *,
        access_token: str,
        refresh: Callable[[], Awaitable[McpOAuthTokens | None]],
        reason: str,
    ) -> McpOAuthGrant | None:
        """Refresh the grant once for every process. Re-read it, holding it exclusively
        (another call for the server waits): while it still holds ``access_token``, call
        ``refresh`` and keep the tokens it returns, or, when it returns None (the
        authorization server refused), mark the grant as needing sign-in with ``reason``.
        A grant that holds other tokens already (another connection refreshed it) is
        returned as it is, ``refresh`` not called. Returns the grant as stored after; None
        when it has none that works. What ``refresh`` raises leaves the grant as it was."""
        ...

    async def grant_lost(self, server: str, *, access_token: str, reason: str) -> bool:
        """Mark the grant as needing sign-in if it still holds ``access_token``; False
        when it holds newer tokens (another process refreshed it meanwhile)."""
        ...


@dataclass(frozen=True, slots=True)
class McpOAuthTokens:
    """What a refresh gave, to store in place of the grant's tokens: the tokens
    (``OAuthToken`` as JSON) and when the access token expires (epoch seconds)."""

    tokens: dict[str, Any]
    expires_at: float | None


def sign_in_needed(exc: BaseException) -> McpSignInNeeded | None:
    """The ``McpSignInNeeded`` inside ``exc`` (the SDK raises exception groups), if any."""
    if isinstance(exc, McpSignInNeeded):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = sign_in_needed(inner)
            if found is not None:
                return found
    return None


def oauth_http(config: McpServerConfig) -> Any:
    """A client without the MCP server's configured headers: what goes to the
    authorization server (which may be another host) must not carry them, so a request
    to the MCP server adds them itself (``_to_server`` in ``oauth_discovery``). It
    connects only where the server's reach allows (``toolhub.tools.netguard``)."""
    import httpcore2
    import httpx2

    return guard(httpx2.AsyncClient(timeout=HTTP_SECONDS), httpcore2, config.reach)


def client_metadata_for(redirect_uri: str, scope: str | None) -> OAuthClientMetadata:
    """What toolhub registers as, and what the SDK's token requests describe it as."""
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientMetadata(
        redirect_uris=[redirect_uri],  # type: ignore[list-item]  # pydantic parses it
        client_name="toolhub",
        scope=scope,
        grant_types=list(GRANT_TYPES),
        # A server-side web application, not a native app on a loopback port.
        application_type="web",
    )


def grant_client(
    config: McpServerConfig, client_info: dict[str, Any]
) -> OAuthClientInformationFull:
    """The client a grant belongs to: the operator's pre-registered one when configured
    (its secret from the configuration, never the grant), else the registered one."""
    from mcp.shared.auth import OAuthClientInformationFull

    if config.oauth_client_id:
        return OAuthClientInformationFull(
            client_id=config.oauth_client_id,
            client_secret=config.oauth_client_secret or None,
            token_endpoint_auth_method=(
                "client_secret_post" if config.oauth_client_secret else "none"
            ),
            redirect_uris=client_info.get("redirect_uris"),
        )
    return OAuthClientInformationFull.model_validate(client_info)


def oauth_error(config: McpServerConfig, what: str, detail: str = "") -> McpOAuthError:
    """The error to raise, as untrusted text, cut, with the server's secrets removed."""
    text = f"{what}: {detail}" if detail else what
    return McpOAuthError(config.redact(untrusted_text(text, MAX_ERROR_CHARS)))


def token_request(
    config: McpServerConfig,
    client: OAuthClientInformationFull,
    metadata: dict[str, Any],
    data: dict[str, str],
) -> tuple[dict[str, str], dict[str, str]]:
    """A token request's form and headers, the client authenticated the SDK's way (its
    secret in the form or a Basic header, or nothing)."""
    from mcp.client.auth.oauth2 import OAuthContext

    context = OAuthContext(
        server_url=config.url,
        client_metadata=client_metadata_for(metadata["redirect_uri"], metadata.get("scope")),
        storage=_NoStorage(),
        redirect_handler=None,
        callback_handler=None,
        client_info=client,
    )
    return context.prepare_token_auth(data, {"Content-Type": "application/x-www-form-urlencoded"})


class _NoStorage:
    """The SDK's context wants a storage; a token request keeps nothing there."""

    async def get_tokens(self) -> OAuthToken | None:
        return None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        return None

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        return None
