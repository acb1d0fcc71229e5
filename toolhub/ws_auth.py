"""WebSocket handshake authentication: the session cookie, or a DRF token header.

Browsers authenticate with their session cookie, so their sockets must pass the Origin
check (another site's page must not ride a visitor's cookie). API clients send
``Authorization: Token <key>`` on the handshake instead; a token is not ambient, so those
handshakes need no Origin. A token is never read from the URL.
"""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import AllowedHostsOriginValidator
from django.contrib.auth.models import AnonymousUser


def _token(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            header: str = value.decode("latin1")
            scheme, _, key = header.partition(" ")
            if scheme.lower() == "token" and key.strip():
                return key.strip()
    return None


def _user_for_token(key: str) -> Any:
    from toolhub.lib.token_auth import user_for_token

    user = user_for_token(key)
    if user is None or not user.is_active:
        return AnonymousUser()
    return user


class TokenOrSessionAuth:
    """Token handshakes skip the Origin check; everything else gets Origin + cookie."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._browser = AllowedHostsOriginValidator(AuthMiddlewareStack(inner))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        key = _token(scope)
        if key is None:
            return await self._browser(scope, receive, send)
        # Wrapped here, not as a decorator: channels carries no types, and the function
        # keeps its own.
        user = await database_sync_to_async(_user_for_token)(key)
        return await self._inner({**scope, "user": user}, receive, send)
