"""A staff member's sign-in to an OAuth MCP server: a browser round trip to the
authorization server, split at the redirect so that any web process can finish what
another began. ``oauth_sign_in_begin`` discovers the server (``oauth_discovery``),
registers a client when there is none, and makes the PKCE pair and the state, each with
the SDK's own helpers; it returns everything the other half needs (``OAuthSignIn``), which
the caller keeps (toolhub: a database row) until the authorization server sends the
browser back. ``oauth_sign_in_finish`` checks the issuer, exchanges the code and returns
the grant to store.

Invariants (the others are in ``oauth``'s docstring): the state and the PKCE verifier are
secrets until the sign-in finishes; a client an earlier sign-in registered is reused only
with the issuer and redirect URI it was registered for; an operator's client secret comes
from the configuration, never from what is stored.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlparse

from toolhub.tools.mcp.config import McpServerConfig
from toolhub.tools.mcp.oauth import (
    McpOAuthGrant,
    client_metadata_for,
    grant_client,
    oauth_error,
    oauth_http,
    token_request,
)
from toolhub.tools.mcp.oauth_discovery import Discovery, discover

if TYPE_CHECKING:
    from mcp.shared.auth import (
        OAuthClientInformationFull,
        OAuthClientMetadata,
        OAuthToken,
    )


@dataclass(frozen=True, slots=True)
class OAuthSignIn:
    """A begun sign-in: where to send the browser, and what finishing it needs (the state
    and the PKCE verifier are secrets until then)."""

    authorization_url: str
    state: str
    code_verifier: str
    client_info: dict[str, Any]
    metadata: dict[str, Any]


async def oauth_sign_in_begin(
    config: McpServerConfig, *, redirect_uri: str, client_info: dict[str, Any] | None
) -> OAuthSignIn:
    """Discover, register if needed, and make the authorization URL for ``config``'s
    server. ``client_info`` is a client registered by an earlier sign-in, reused while it
    belongs to the same authorization server and redirect URI. Raises ``McpOAuthError``."""
    import httpx2
    from mcp.client.auth import OAuthFlowError

    try:
        async with oauth_http(config) as http:
            found = await discover(config, http)
            client = await _sign_in_client(
                config,
                http,
                found.asm,
                client_metadata_for(redirect_uri, found.scope),
                client_info,
                issuer=found.issuer,
            )
    except (OAuthFlowError, httpx2.HTTPError, ValueError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise oauth_error(config, "the sign-in could not start", detail) from None
    return _begun(config, found, client, redirect_uri)


def _begun(
    config: McpServerConfig,
    found: Discovery,
    client: OAuthClientInformationFull,
    redirect_uri: str,
) -> OAuthSignIn:
    """The authorization URL, with a new PKCE pair and state, and what finishing needs."""
    from mcp.client.auth import PKCEParameters

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
        "resource": found.resource,
    }
    if found.scope:
        params["scope"] = found.scope
        if "offline_access" in found.scope.split():
            params["prompt"] = "consent"  # OIDC asks for it with offline_access
    stored = client.model_dump(mode="json", exclude_none=True)
    if config.oauth_client_id:
        stored.pop("client_secret", None)  # the configuration's, read from there
    prm = found.prm
    return OAuthSignIn(
        authorization_url=f"{found.asm.authorization_endpoint}?{urlencode(params)}",
        state=state,
        code_verifier=pkce.code_verifier,
        client_info=stored,
        metadata={
            "resource_metadata": prm.model_dump(mode="json", exclude_none=True) if prm else None,
            "server_metadata": found.asm.model_dump(mode="json", exclude_none=True),
            "auth_server_url": found.auth_server_url,
            "resource": found.resource,
            "redirect_uri": redirect_uri,
            "scope": found.scope,
        },
    )


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
        return grant_client(config, {"redirect_uris": [str(uri) for uri in redirect_uris]})
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
    from mcp.client.auth.utils import validate_authorization_response_iss
    from mcp.shared.auth import OAuthMetadata
    from mcp.shared.auth_utils import calculate_token_expiry

    metadata = sign_in.metadata
    asm = OAuthMetadata.model_validate(metadata["server_metadata"])
    client = grant_client(config, sign_in.client_info)
    try:
        validate_authorization_response_iss(iss, asm)
        tokens = await _code_for_tokens(config, client, sign_in, code=code, asm=asm)
    except (OAuthFlowError, httpx2.HTTPError, ValueError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise oauth_error(config, "the sign-in could not finish", detail) from None
    if tokens.scope is None:
        tokens.scope = metadata["scope"]  # RFC 6749 §5.1: the scope asked for
    return McpOAuthGrant(
        tokens=tokens.model_dump(mode="json", exclude_none=True),
        expires_at=calculate_token_expiry(tokens.expires_in),
        client_info=sign_in.client_info,
        metadata=metadata,
    )


async def _code_for_tokens(
    config: McpServerConfig,
    client: OAuthClientInformationFull,
    sign_in: OAuthSignIn,
    *,
    code: str,
    asm: Any,
) -> OAuthToken:
    """The authorization server's tokens for ``code`` (RFC 6749 §4.1.3); a refusal raises
    ``McpOAuthError`` with what it said, the code itself left out."""
    from mcp.client.auth.utils import handle_token_response_scopes

    metadata = sign_in.metadata
    data, headers = token_request(
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
    async with oauth_http(config) as http:
        answer = await http.post(str(asm.token_endpoint), data=data, headers=headers)
        if answer.status_code not in (200, 201):
            body = (await answer.aread()).decode("utf-8", "replace")
            raise oauth_error(
                config,
                f"the authorization server refused the code (HTTP {answer.status_code})",
                body.replace(code, "***"),
            )
        return await handle_token_response_scopes(answer)
