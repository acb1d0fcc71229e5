"""An OAuth-protected MCP server for the tests: an authorization server and the MCP server
it protects, on two local ports of one process, both built with the SDK (its server auth
routes over an in-memory provider, and its ``MCPServer`` as the resource server). Run as a
program: ``python tests/mcp/oauth_server.py --as-port A --mcp-port M``.

- The authorization server at ``http://127.0.0.1:A`` lets any client register (RFC 7591),
  approves every ``/authorize`` at once (no login page: a redirect back with a code), and
  issues access tokens that expire after ``--access-seconds``, with refresh tokens that
  rotate on every use. With ``--reuse-revokes`` it does what OAuth 2.1 recommends to a
  server that rotates them: a refresh token presented again after its rotation is taken
  as stolen, and every token descended from the same sign-in is revoked.
- The MCP server at ``http://127.0.0.1:M/mcp`` answers 401 without a valid token, with
  its protected-resource metadata naming the authorization server, takes only tokens
  issued for itself (RFC 8707), and offers ``echo`` and ``whoami`` (the client id and
  scopes of the token the call came with).
- ``--client ID:SECRET --client-redirect URL`` registers a client beforehand (its secret
  sent in the token request's body); ``--no-registration`` closes dynamic registration.
- ``/test/...`` on the authorization server lets a test see and break things:
  ``GET /test/stats`` (registrations, authorizations, code exchanges, refreshes, reused
  refresh tokens; the tokens it issued, the refresh tokens presented to it in order, and
  the names of the headers each of the two servers received), ``POST
  /test/revoke-refresh`` (every refresh token refused from now on), ``POST /test/revoke``
  (every token refused).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import secrets
import time
from collections import Counter
from typing import Any

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    ProviderTokenVerifier,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

SCOPE = "mcp"


class MemoryProvider:
    """The SDK's ``OAuthAuthorizationServerProvider``, in memory, approving everyone."""

    def __init__(self, access_seconds: int, *, reuse_revokes: bool = False) -> None:
        self.access_seconds = access_seconds
        self.reuse_revokes = reuse_revokes
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.issued: list[str] = []
        self.presented: list[str] = []
        # Every token's family (the sign-in it descends from), and the refresh tokens
        # already rotated away, by family.
        self.family: dict[str, str] = {}
        self.rotated: dict[str, str] = {}
        self.stats: Counter[str] = Counter()

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info
        self.stats["registrations"] += 1

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        self.stats["authorizations"] += 1
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        self.stats["code_exchanges"] += 1
        return self._issue(
            client.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            family=secrets.token_hex(8),
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        self.presented.append(refresh_token)
        family = self.rotated.get(refresh_token)
        if family is not None:
            self.stats["reuses"] += 1
            if self.reuse_revokes:
                self._revoke_family(family)
            return None
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        del self.refresh[refresh_token.token]
        family = self.family[refresh_token.token]
        self.rotated[refresh_token.token] = family
        self.stats["refreshes"] += 1
        return self._issue(
            client.client_id, scopes or refresh_token.scopes, refresh_token.resource, family=family
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.access.get(token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _revoke_family(self, family: str) -> None:
        for token in [token for token, its in self.family.items() if its == family]:
            self.access.pop(token, None)
            self.refresh.pop(token, None)

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, *, family: str
    ) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self.family[access] = self.family[refresh] = family
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=math.ceil(time.time() + self.access_seconds),
            resource=resource,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        self.issued += [access, refresh]
        return OAuthToken(
            access_token=access,
            expires_in=self.access_seconds,
            refresh_token=refresh,
            scope=" ".join(scopes),
        )


class HeadersSeen:
    """ASGI middleware: keeps the name of every header a server received."""

    def __init__(self, app: Any, names: set[str]) -> None:
        self.app = app
        self.names = names

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.names.update(name.decode("latin-1").lower() for name, _ in scope["headers"])
        await self.app(scope, receive, send)


def authorization_server(
    provider: MemoryProvider, issuer: str, *, registration: bool, seen: dict[str, set[str]]
) -> Starlette:
    async def stats(_request: Request) -> JSONResponse:
        return JSONResponse(
            {
                **provider.stats,
                "issued": provider.issued,
                "presented": provider.presented,
                "headers": {server: sorted(names) for server, names in seen.items()},
            }
        )

    async def revoke_refresh(_request: Request) -> JSONResponse:
        provider.refresh.clear()
        return JSONResponse({})

    async def revoke(_request: Request) -> JSONResponse:
        provider.refresh.clear()
        provider.access.clear()
        return JSONResponse({})

    routes: list[Any] = create_auth_routes(
        provider,
        issuer_url=AnyHttpUrl(issuer),
        client_registration_options=ClientRegistrationOptions(
            enabled=registration, valid_scopes=[SCOPE], default_scopes=[SCOPE]
        ),
    )
    routes += [
        Route("/test/stats", stats, methods=["GET"]),
        Route("/test/revoke-refresh", revoke_refresh, methods=["POST"]),
        Route("/test/revoke", revoke, methods=["POST"]),
    ]
    return Starlette(routes=routes)


def resource_server(provider: MemoryProvider, issuer: str, url: str) -> MCPServer:
    server = MCPServer(
        "oauth-demo",
        token_verifier=ProviderTokenVerifier(provider),
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(issuer),
            resource_server_url=AnyHttpUrl(url),
            required_scopes=[SCOPE],
            validate_token_resource=True,
        ),
    )

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool()
    def whoami() -> str:
        """Who the call's token was issued to."""
        token = get_access_token()
        if token is None:
            return "anonymous"
        return f"client {token.client_id} with scopes {' '.join(token.scopes)}"

    return server


async def serve(options: argparse.Namespace) -> None:
    as_port, mcp_port = options.as_port, options.mcp_port
    issuer = f"http://127.0.0.1:{as_port}"
    provider = MemoryProvider(options.access_seconds, reuse_revokes=options.reuse_revokes)
    seen: dict[str, set[str]] = {"authorization_server": set(), "mcp_server": set()}
    if options.client:
        client_id, _, secret = options.client.partition(":")
        provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            token_endpoint_auth_method="client_secret_post",
            redirect_uris=[options.client_redirect],
            scope=SCOPE,
        )
    mcp = resource_server(provider, issuer, f"http://127.0.0.1:{mcp_port}/mcp")
    servers = [
        uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        )
        for app, port in (
            (
                HeadersSeen(
                    authorization_server(
                        provider, issuer, registration=options.registration, seen=seen
                    ),
                    seen["authorization_server"],
                ),
                as_port,
            ),
            (HeadersSeen(mcp.streamable_http_app(), seen["mcp_server"]), mcp_port),
        )
    ]
    await asyncio.gather(*(server.serve() for server in servers))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--as-port", type=int, required=True)
    parser.add_argument("--mcp-port", type=int, required=True)
    parser.add_argument("--access-seconds", type=int, default=3_600)
    parser.add_argument("--client")
    parser.add_argument("--client-redirect")
    parser.add_argument("--no-registration", dest="registration", action="store_false")
    parser.add_argument("--reuse-revokes", action="store_true")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
