"""Each person's own credential for an MCP server that takes one (``user_credential``
names the header or environment variable that carries it): set, replaced, forgotten, and
read by the runtime per call (``CredentialsAdapter``).

Invariants:
- A credential is never shown back or quoted, not even when it is refused: a person's
  page and the API say whether theirs is set and when.
- A credential goes only where its owner gave it: when staff change where it would go
  (``DESTINATION``), every person's is forgotten (``mcp_credentials_forget_if_moved``).
- One that no header or variable could carry is refused before anything is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from agent_app.mcp import mcp_config
from agent_app.models import McpCredential, McpServer
from agent_app.turns.loop import on_db_thread
from toolhub.lib.errors import Invalid, NotFound


@dataclass(frozen=True, slots=True)
class CredentialView:
    """A server that takes each person's own credential, as its page shows it to one
    person: whether theirs is set and when, never what it is."""

    server_id: int
    server: str
    transport: str
    # The header (streamable HTTP) or environment variable (stdio) that carries it.
    carried_in: str
    updated: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "server_id": self.server_id,
            "server": self.server,
            "transport": self.transport,
            "carried_in": self.carried_in,
            "set": self.updated is not None,
            "updated": self.updated,
        }


# Where a person's own credential goes: change any of these and it would go somewhere its
# owner never gave it for.
DESTINATION = ("transport", "command", "args", "url", "user_credential")


def destination_of(server: McpServer) -> dict[str, Any]:
    return {field: getattr(server, field) for field in DESTINATION}


def mcp_credentials_forget_if_moved(*, server: McpServer, before: dict[str, Any] | None) -> int:
    """Forget every person's own credential for ``server`` when where it goes changed
    since ``before`` (a new command, URL or header): each person adds theirs again,
    knowing where it now goes. Returns how many were forgotten."""
    if before is None or before == destination_of(server):
        return 0
    forgotten, _ = McpCredential.objects.filter(server=server).delete()
    return forgotten


def _personal_servers() -> QuerySet[McpServer]:
    return McpServer.objects.filter(enabled=True).exclude(user_credential="")


def mcp_credentials_of(*, user: Any) -> list[CredentialView]:
    """Every enabled server that takes a person's own credential, with ``user``'s state."""
    servers = list(_personal_servers())
    mine = dict(
        McpCredential.objects.filter(owner=user, server__in=servers).values_list(
            "server_id", "updated"
        )
    )
    return [_view(server, mine.get(server.pk)) for server in servers]


def _view(server: McpServer, updated: datetime | None) -> CredentialView:
    return CredentialView(
        server_id=server.pk,
        server=server.name,
        transport=server.transport,
        carried_in=server.user_credential,
        updated=updated,
    )


def _personal_server(server_id: int) -> McpServer:
    server = _personal_servers().filter(pk=server_id).first()
    if server is None:
        raise NotFound("no MCP server here takes a personal credential under that id")
    return server


MAX_CREDENTIAL_CHARS = 4_096


def mcp_credential_set(*, user: Any, server_id: int, value: Any) -> CredentialView:
    """Store ``user``'s own credential for a server that takes one, replacing theirs; it is
    refused, and nothing changes, when no header or variable could carry it."""
    server = _personal_server(server_id)
    if not isinstance(value, str) or not value.strip():
        raise Invalid("the credential is empty", fields={"value": ["required"]})
    if len(value) > MAX_CREDENTIAL_CHARS:
        raise Invalid(
            f"the credential is longer than {MAX_CREDENTIAL_CHARS:,} characters",
            fields={"value": ["too long"]},
        )
    try:
        mcp_config(server).with_credential(value)
    except ValueError:
        # Never quoted: it is a secret even when it is wrong.
        raise Invalid(
            f"that credential cannot be sent in {server.user_credential} (spaces around it, "
            "a line break or another control character)",
            fields={"value": ["cannot be sent"]},
        ) from None
    credential, _ = McpCredential.objects.update_or_create(
        server=server, owner=user, defaults={"value": value}
    )
    return _view(server, credential.updated)


def mcp_credential_delete(*, user: Any, server_id: int) -> None:
    """Forget ``user``'s own credential for a server: their next call is refused."""
    server = _personal_server(server_id)
    McpCredential.objects.filter(server=server, owner=user).delete()


def _credential(*, server: str, user_id: str) -> str | None:
    # The runtime names a person by their id as text (ToolContext.user_id).
    return (
        McpCredential.objects.filter(
            server__name=server, server__enabled=True, owner_id=int(user_id)
        )
        .values_list("value", flat=True)
        .first()
    )


class CredentialsAdapter:
    """``CredentialStore`` for the runtime: a person's own credential, read per call (a
    changed or removed one takes effect at the next call)."""

    async def get(self, *, server: str, user_id: str) -> str | None:
        value: str | None = await on_db_thread(_credential, server=server, user_id=user_id)
        return value
