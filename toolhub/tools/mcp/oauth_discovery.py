"""What a sign-in finds out about an OAuth MCP server before the browser goes anywhere
(``discover``): the server's 401, its protected-resource metadata (RFC 9728), its
authorization server's metadata (RFC 8414), and the scope to ask for, each with the SDK's
own helpers.

Invariants: sign-in goes over https (plain http only where private addresses are
allowed); the server's protected-resource metadata is read only from its own origin, and
names no other resource than the server's; the authorization server's metadata answers
for the issuer asked; the MCP server's configured headers go only to its own origin,
never to the authorization server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from toolhub.tools.mcp.config import McpServerConfig
from toolhub.tools.mcp.oauth import GRANT_TYPES, oauth_error

# The version toolhub names when it only wants the server's 401.
_PROBE_VERSION = "2025-06-18"
_PROBE_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": _PROBE_VERSION,
}


@dataclass(frozen=True, slots=True)
class Discovery:
    """What a sign-in found out about the server: its protected-resource metadata (None
    when it publishes none), the resource a token is for, the authorization server it
    names (None: the MCP server's own origin is asked), that server's metadata and the
    issuer it answers for, and the scope to ask for."""

    prm: Any
    resource: str
    auth_server_url: str | None
    asm: Any
    issuer: str
    scope: str | None


async def discover(config: McpServerConfig, http: Any) -> Discovery:
    """The server's 401, its protected-resource metadata, then its authorization
    server's, each checked before the next is asked; and the scope to ask for."""
    from mcp.client.auth.utils import extract_scope_from_www_auth, get_client_metadata_scopes
    from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

    challenge = await _challenge(config, http)
    prm = await _resource_metadata(config, http, challenge)
    resource = resource_url_from_server_url(config.url)
    auth_server_url = None
    if prm is not None:
        named = str(prm.resource) if prm.resource else None
        if named and not check_resource_allowed(
            requested_resource=resource, configured_resource=named
        ):
            raise oauth_error(config, f"its metadata names another resource ({named})")
        resource = named or resource
        auth_server_url = str(prm.authorization_servers[0])
        _check_scheme(config, auth_server_url, "its authorization server")
    asm = await _auth_server_metadata(config, http, auth_server_url)
    scope = config.oauth_scopes or get_client_metadata_scopes(
        extract_scope_from_www_auth(challenge), prm, asm, GRANT_TYPES
    )
    return Discovery(
        prm=prm,
        resource=resource,
        auth_server_url=auth_server_url,
        asm=asm,
        issuer=_issuer(config, asm, auth_server_url),
        scope=scope,
    )


async def _challenge(config: McpServerConfig, http: Any) -> Any:
    """The server's answer to a request without a token: a 401, or the sign-in stops."""
    challenge = await http.post(
        config.url, json=_probe(), headers={**dict(config.headers), **_PROBE_HEADERS}
    )
    if challenge.status_code != 401:
        raise oauth_error(
            config,
            f"MCP server {config.name} did not ask for a sign-in "
            f"(HTTP {challenge.status_code} without a token)",
        )
    return challenge


async def _resource_metadata(config: McpServerConfig, http: Any, challenge: Any) -> Any:
    """The server's protected-resource metadata (RFC 9728), or None when it has none."""
    from mcp.client.auth.utils import (
        build_protected_resource_metadata_discovery_urls,
        create_oauth_metadata_request,
        extract_resource_metadata_from_www_auth,
        handle_protected_resource_response,
    )

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
            return prm
    return None


async def _auth_server_metadata(
    config: McpServerConfig, http: Any, auth_server_url: str | None
) -> Any:
    """The authorization server's metadata (RFC 8414), for the issuer asked, with every
    endpoint it names on https."""
    from mcp.client.auth.utils import (
        build_oauth_authorization_server_metadata_discovery_urls,
        create_oauth_metadata_request,
        handle_auth_metadata_response,
        validate_metadata_issuer,
    )

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
            validate_metadata_issuer(found, _issuer(config, found, auth_server_url))
            asm = found
            break
    if asm is None:
        raise oauth_error(config, "its authorization server publishes no OAuth metadata")
    for what, endpoint in (
        ("authorization endpoint", asm.authorization_endpoint),
        ("token endpoint", asm.token_endpoint),
        ("registration endpoint", asm.registration_endpoint),
    ):
        if endpoint is not None:
            _check_scheme(config, str(endpoint), f"its {what}")
    return asm


def _issuer(config: McpServerConfig, asm: Any, auth_server_url: str | None) -> str:
    """The issuer the authorization server must answer for: the one the protected-resource
    metadata named, or else the MCP server's own origin, as the metadata spells it when
    the two match."""
    from mcp.client.auth.utils import issuers_match

    parsed = urlparse(config.url)
    expected = auth_server_url or f"{parsed.scheme}://{parsed.netloc}"
    if auth_server_url is None and issuers_match(str(asm.issuer), expected):
        return str(asm.issuer)
    return expected


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


def _same_origin(url: str, other: str) -> bool:
    a, b = urlparse(url), urlparse(other)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc)


def _check_scheme(config: McpServerConfig, url: str, what: str) -> None:
    """Sign-in goes over https; plain http only where loopback and private addresses are
    allowed (a local authorization server in development). Where it may connect is the
    connection guard's to check."""
    scheme = urlparse(url).scheme
    if scheme != "https" and not (scheme == "http" and config.allow_private):
        raise oauth_error(config, f"{what} is not on https ({url[:200]})")


def _to_server(config: McpServerConfig, request: Any) -> Any:
    """``request`` with the MCP server's headers when it goes to the MCP server's own
    origin (its protected-resource metadata, normally), else as it is."""
    target, server = urlparse(str(request.url)), urlparse(config.url)
    if (target.scheme, target.netloc) == (server.scheme, server.netloc):
        for name, value in config.headers:
            request.headers.setdefault(name, value)
    return request
