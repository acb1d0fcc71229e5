"""OAuth 2.1 for streamable HTTP MCP servers, with the SDK's client auth helpers.

Two halves, neither of which keeps a flow open between requests:

- **Sign-in** is a staff member's browser round trip to the authorization server, split
  at the redirect so that any web process can finish what another began.
  ``oauth_sign_in_begin`` asks the MCP server, reads its protected-resource and
  authorization-server metadata, registers a client when there is none, and makes the
  PKCE pair and the state, each with the SDK's own helpers; it returns everything the
  other half needs (``OAuthSignIn``), which the caller keeps (toolhub: a database row)
  until the authorization server sends the browser back. ``oauth_sign_in_finish`` checks
  the issuer, exchanges the code and returns the grant to store.
- **Connecting** (``oauth_transport``) sends the stored grant's access token with every
  request to the MCP server and refreshes it a little before it expires, through the
  ``McpOAuthStore``, which every process's and every chat's connection to the server
  shares.

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

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlencode, urlparse

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
# A token is refreshed this long before it expires (at most a third of its life), so that
# no request leaves with a token that expires on the way: a 401 would cost the grant.
REFRESH_EARLY_SECONDS = 60.0
# The version toolhub names when it only wants the server's 401.
_PROBE_VERSION = "2025-06-18"


class McpSignInNeeded(Exception):
    """The server cannot connect until a staff member signs in (the message says so)."""


class McpOAuthError(Exception):
    """A sign-in that cannot go on, with what the servers said (secrets removed)."""


class _Superseded(Exception):
    """Another connection changed the grant while this connection's tokens failed."""


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


@dataclass(frozen=True, slots=True)
class OAuthSignIn:
    """A begun sign-in: where to send the browser, and what finishing it needs (the state
    and the PKCE verifier are secrets until then)."""

    authorization_url: str
    state: str
    code_verifier: str
    client_info: dict[str, Any]
    metadata: dict[str, Any]


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


def _http(config: McpServerConfig) -> Any:
    """A client without the MCP server's configured headers: what goes to the
    authorization server (which may be another host) must not carry them, so a request
    to the MCP server adds them itself (``_to_server``). It connects only where the
    server's reach allows (``toolhub.tools.netguard``)."""
    import httpcore2
    import httpx2

    return guard(httpx2.AsyncClient(timeout=HTTP_SECONDS), httpcore2, config.reach)


def _same_origin(url: str, other: str) -> bool:
    a, b = urlparse(url), urlparse(other)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc)


def _check_scheme(config: McpServerConfig, url: str, what: str) -> None:
    """Sign-in goes over https; plain http only where loopback and private addresses are
    allowed (a local authorization server in development). Where it may connect is the
    connection guard's to check."""
    scheme = urlparse(url).scheme
    if scheme != "https" and not (scheme == "http" and config.allow_private):
        raise _error(config, f"{what} is not on https ({url[:200]})")


def _to_server(config: McpServerConfig, request: Any) -> Any:
    """``request`` with the MCP server's headers when it goes to the MCP server's own
    origin (its protected-resource metadata, normally), else as it is."""
    target, server = urlparse(str(request.url)), urlparse(config.url)
    if (target.scheme, target.netloc) == (server.scheme, server.netloc):
        for name, value in config.headers:
            request.headers.setdefault(name, value)
    return request


def _client_metadata(redirect_uri: str, scope: str | None) -> OAuthClientMetadata:
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientMetadata(
        redirect_uris=[redirect_uri],  # type: ignore[list-item]  # pydantic parses it
        client_name="toolhub",
        scope=scope,
        grant_types=list(GRANT_TYPES),
        # A server-side web application, not a native app on a loopback port.
        application_type="web",
    )


def _client(config: McpServerConfig, client_info: dict[str, Any]) -> OAuthClientInformationFull:
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


def _error(config: McpServerConfig, what: str, detail: str = "") -> McpOAuthError:
    text = f"{what}: {detail}" if detail else what
    return McpOAuthError(config.redact(untrusted_text(text, MAX_ERROR_CHARS)))


async def oauth_sign_in_begin(
    config: McpServerConfig, *, redirect_uri: str, client_info: dict[str, Any] | None
) -> OAuthSignIn:
    """Discover, register if needed, and make the authorization URL for ``config``'s
    server. ``client_info`` is a client registered by an earlier sign-in, reused while it
    belongs to the same authorization server and redirect URI. Raises ``McpOAuthError``."""
    import httpx2
    from mcp.client.auth import OAuthFlowError, PKCEParameters
    from mcp.client.auth.utils import (
        build_oauth_authorization_server_metadata_discovery_urls,
        build_protected_resource_metadata_discovery_urls,
        create_oauth_metadata_request,
        extract_resource_metadata_from_www_auth,
        extract_scope_from_www_auth,
        get_client_metadata_scopes,
        handle_auth_metadata_response,
        handle_protected_resource_response,
        issuers_match,
        validate_metadata_issuer,
    )
    from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

    try:
        async with _http(config) as http:
            challenge = await http.post(
                config.url, json=_probe(), headers={**dict(config.headers), **_PROBE_HEADERS}
            )
            if challenge.status_code != 401:
                raise _error(
                    config,
                    f"MCP server {config.name} did not ask for a sign-in "
                    f"(HTTP {challenge.status_code} without a token)",
                )
            prm = None
            for url in build_protected_resource_metadata_discovery_urls(
                extract_resource_metadata_from_www_auth(challenge), config.url
            ):
                # The server's own metadata is on its own origin: a challenge naming
                # another (loopback, say) is not followed.
                if not _same_origin(url, config.url):
                    continue
                prm = await handle_protected_resource_response(
                    await http.send(_to_server(config, create_oauth_metadata_request(url)))
                )
                if prm is not None:
                    break
            resource = resource_url_from_server_url(config.url)
            auth_server_url = None
            if prm is not None:
                named = str(prm.resource) if prm.resource else None
                if named and not check_resource_allowed(
                    requested_resource=resource, configured_resource=named
                ):
                    raise _error(config, f"its metadata names another resource ({named})")
                resource = named or resource
                auth_server_url = str(prm.authorization_servers[0])
                _check_scheme(config, auth_server_url, "its authorization server")
            parsed = urlparse(config.url)
            expected = auth_server_url or f"{parsed.scheme}://{parsed.netloc}"
            asm = None
            for url in build_oauth_authorization_server_metadata_discovery_urls(
                auth_server_url, config.url
            ):
                ok, found = await handle_auth_metadata_response(
                    await http.send(create_oauth_metadata_request(url))
                )
                if not ok:
                    break
                if found is not None:
                    if auth_server_url is None and issuers_match(str(found.issuer), expected):
                        expected = str(found.issuer)
                    validate_metadata_issuer(found, expected)
                    asm = found
                    break
            if asm is None:
                raise _error(config, "its authorization server publishes no OAuth metadata")
            for what, endpoint in (
                ("authorization endpoint", asm.authorization_endpoint),
                ("token endpoint", asm.token_endpoint),
                ("registration endpoint", asm.registration_endpoint),
            ):
                if endpoint is not None:
                    _check_scheme(config, str(endpoint), f"its {what}")
            scope = config.oauth_scopes or get_client_metadata_scopes(
                extract_scope_from_www_auth(challenge), prm, asm, GRANT_TYPES
            )
            client_metadata = _client_metadata(redirect_uri, scope)
            client = await _sign_in_client(
                config, http, asm, client_metadata, client_info, issuer=expected
            )
    except (OAuthFlowError, httpx2.HTTPError, ValueError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise _error(config, "the sign-in could not start", detail) from None
    pkce = PKCEParameters.generate()
    state = secrets.token_urlsafe(32)
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": pkce.code_challenge,
        "code_challenge_method": "S256",
        # RFC 8707: the token is for this server and no other.
        "resource": resource,
    }
    if scope:
        params["scope"] = scope
        if "offline_access" in scope.split():
            params["prompt"] = "consent"  # OIDC asks for it with offline_access
    stored = client.model_dump(mode="json", exclude_none=True)
    if config.oauth_client_id:
        stored.pop("client_secret", None)  # the configuration's, read from there
    return OAuthSignIn(
        authorization_url=f"{asm.authorization_endpoint}?{urlencode(params)}",
        state=state,
        code_verifier=pkce.code_verifier,
        client_info=stored,
        metadata={
            "resource_metadata": prm.model_dump(mode="json", exclude_none=True) if prm else None,
            "server_metadata": asm.model_dump(mode="json", exclude_none=True),
            "auth_server_url": auth_server_url,
            "resource": resource,
            "redirect_uri": redirect_uri,
            "scope": scope,
        },
    )


_PROBE_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": _PROBE_VERSION,
}


def _probe() -> dict[str, Any]:
    # What the SDK's transport sends first; a server that needs a sign-in answers 401.
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": _PROBE_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "toolhub", "version": "1"},
        },
    }


async def _sign_in_client(
    config: McpServerConfig,
    http: Any,
    asm: Any,
    client_metadata: OAuthClientMetadata,
    known: dict[str, Any] | None,
    *,
    issuer: str,
) -> OAuthClientInformationFull:
    """The operator's client, or the one an earlier sign-in registered with this issuer
    for this redirect URI, or a new registration (RFC 7591)."""
    from mcp.client.auth.oauth2 import check_registration_usable
    from mcp.client.auth.utils import (
        create_client_registration_request,
        credentials_match_issuer,
        handle_registration_response,
    )
    from mcp.shared.auth import OAuthClientInformationFull

    redirect_uris = client_metadata.redirect_uris or []
    if config.oauth_client_id:
        return _client(config, {"redirect_uris": [str(uri) for uri in redirect_uris]})
    if known is not None:
        client = OAuthClientInformationFull.model_validate(known)
        same_uri = [str(uri) for uri in client.redirect_uris or ()] == [
            str(uri) for uri in redirect_uris
        ]
        if same_uri and credentials_match_issuer(client, issuer, None):
            return client
    parsed = urlparse(config.url)
    request = create_client_registration_request(
        asm, client_metadata, f"{parsed.scheme}://{parsed.netloc}"
    )
    client = await handle_registration_response(await http.send(request))
    check_registration_usable(client)
    if asm.registration_endpoint is not None:
        # SEP-2352: these credentials belong to this issuer and no other.
        client.issuer = issuer
    return client


async def oauth_sign_in_finish(
    config: McpServerConfig, *, sign_in: OAuthSignIn, code: str, iss: str | None
) -> McpOAuthGrant:
    """Exchange the code the authorization server sent back for tokens. Raises
    ``McpOAuthError`` (an issuer that is not the one asked, a refused code)."""
    import httpx2
    from mcp.client.auth import OAuthFlowError
    from mcp.client.auth.utils import (
        handle_token_response_scopes,
        validate_authorization_response_iss,
    )
    from mcp.shared.auth import OAuthMetadata
    from mcp.shared.auth_utils import calculate_token_expiry

    metadata = sign_in.metadata
    asm = OAuthMetadata.model_validate(metadata["server_metadata"])
    client = _client(config, sign_in.client_info)
    try:
        validate_authorization_response_iss(iss, asm)
        data, headers = _token_request(
            config,
            client,
            metadata,
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": metadata["redirect_uri"],
                "client_id": client.client_id,
                "code_verifier": sign_in.code_verifier,
                "resource": metadata["resource"],
            },
        )
        async with _http(config) as http:
            answer = await http.post(str(asm.token_endpoint), data=data, headers=headers)
            if answer.status_code not in (200, 201):
                body = (await answer.aread()).decode("utf-8", "replace")
                raise _error(
                    config,
                    f"the authorization server refused the code (HTTP {answer.status_code})",
                    body.replace(code, "***"),
                )
            tokens = await handle_token_response_scopes(answer)
    except (OAuthFlowError, httpx2.HTTPError, ValueError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise _error(config, "the sign-in could not finish", detail) from None
    if tokens.scope is None:
        tokens.scope = metadata["scope"]  # RFC 6749 §5.1: the scope asked for
    return McpOAuthGrant(
        tokens=tokens.model_dump(mode="json", exclude_none=True),
        expires_at=calculate_token_expiry(tokens.expires_in),
        client_info=sign_in.client_info,
        metadata=metadata,
    )


def _token_request(
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
        client_metadata=_client_metadata(metadata["redirect_uri"], metadata.get("scope")),
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
        self.client = _client(self.config, grant.client_info)
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
        data, headers = _token_request(
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
            async with _http(config) as http:
                answer = await http.post(self.token_endpoint, data=data, headers=headers)
                if answer.status_code in (400, 401):
                    # RFC 6749 §5.2: the refresh token or the client is no good any more.
                    return None
                if answer.status_code != 200:
                    raise _error(
                        config,
                        "the authorization server could not refresh the token "
                        f"(HTTP {answer.status_code})",
                    )
                tokens = await handle_token_response_scopes(answer)
        except (OAuthFlowError, httpx2.HTTPError, ValueError) as exc:
            detail = f"{type(exc).__name__}: {exc}"
            raise _error(config, "the token could not be refreshed", detail) from None
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
