"""MCP servers as staff manage them: what pages and the API show of each, and its
creation, change and removal, each in the admin log.

Invariants:
- Every view of a server (``server_json``) carries its secrets' keys, or whether one is
  set, never a value: ``env``, ``headers`` and the OAuth client secret are written and
  never shown back; OAuth tokens are never shown, only who signed in and when.
- Only staff write, and a row is saved only once its config is valid (``mcp_config``)
  and its name free; a change of where a person's own credential would go forgets every
  such credential in the same transaction (``mcp_credentials_forget_if_moved``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db import transaction

from agent_app.mcp import manager, mcp_config, mcp_grant, mcp_status
from agent_app.mcp_credentials import destination_of, mcp_credentials_forget_if_moved
from agent_app.models import McpServer
from toolhub.lib.errors import Conflict, Forbidden, Invalid, NotFound
from toolhub.tools.mcp import ConflictingSettings, McpStatus


def server_json(server: McpServer) -> dict[str, Any]:
    """A server as pages and the API show it: secrets by key only, live status."""
    status = mcp_status(server)
    grant = mcp_grant(server) if server.auth == "oauth" else None
    signed_in = grant is not None and grant.tokens is not None
    return {
        "id": server.pk,
        "name": server.name,
        "transport": server.transport,
        "command": server.command,
        "args": list(server.args or ()),
        "env_keys": sorted(server.env or {}),
        "url": server.url,
        "header_names": sorted(server.headers or {}),
        "enabled": server.enabled,
        "defer": server.defer,
        "timeout": server.timeout,
        "timeout_ceiling": server.timeout_ceiling,
        "allowlist": server.allowlist,
        "approve_destructive": server.approve_destructive,
        "sampling": server.sampling,
        "workspace_roots": server.workspace_roots,
        "user_credential": server.user_credential,
        # Connections of a chat's or a person's own open in this process.
        "chats": manager.chats(server.name),
        "auth": server.auth,
        "oauth_scopes": server.oauth_scopes,
        "oauth_client_id": server.oauth_client_id,
        "oauth_client_secret_set": bool(server.oauth_client_secret),
        # Who signed in and when, while that grant works (its tokens are never shown).
        "signed_in_by": (
            grant.signed_in_by.get_username()
            if signed_in and grant is not None and grant.signed_in_by is not None
            else None
        ),
        "signed_in_at": grant.signed_in_at if signed_in and grant is not None else None,
        "state": _state(server, status, signed_in=signed_in),
        "error": status.error if status is not None else "",
        # A stdio server's last stderr lines when it failed (why it would not start).
        "stderr": list(status.stderr) if status is not None else [],
        "tools": status.tools if status is not None else 0,
        # When this process last changed the server's state (connected, disconnected).
        "since": datetime.fromtimestamp(status.since, UTC) if status is not None else None,
    }


def _state(server: McpServer, status: McpStatus | None, *, signed_in: bool) -> str:
    if not server.enabled:
        return "disabled"
    if status is not None:
        return status.state
    # Not connected in this process (yet): an OAuth server without a grant will not.
    return "needs_sign_in" if server.auth == "oauth" and not signed_in else "connecting"


# Written, never shown back (pages and the API show their keys, or whether they are set).
SECRET_FIELDS = ("env", "headers", "oauth_client_secret")
FIELDS = (
    "name",
    "transport",
    "command",
    "args",
    "env",
    "url",
    "headers",
    "enabled",
    "defer",
    "timeout",
    "timeout_ceiling",
    "allowlist",
    "approve_destructive",
    "sampling",
    "workspace_roots",
    "user_credential",
    "auth",
    "oauth_scopes",
    "oauth_client_id",
    "oauth_client_secret",
)


def mcp_servers() -> list[McpServer]:
    return list(McpServer.objects.select_related("oauth_grant__signed_in_by"))


def mcp_server_get(*, server_id: int) -> McpServer:
    server = McpServer.objects.filter(pk=server_id).first()
    if server is None:
        raise NotFound("no such MCP server")
    return server


def mcp_server_save(*, user: Any, server: McpServer | None, data: dict[str, Any]) -> McpServer:
    """Create or change a server from validated fields. ``env``, ``headers`` and
    ``oauth_client_secret`` replace the stored secrets only when given (omitted: kept;
    ``{}`` or ``""``: cleared)."""
    if not user.is_staff:
        raise Forbidden("MCP servers are managed by staff")
    adding = server is None
    before = None if server is None else destination_of(server)
    server = server or McpServer(created_by=user)
    changed = [field for field in FIELDS if field in data]
    for field in changed:
        setattr(server, field, data[field])
    try:
        mcp_config(server)
    except ConflictingSettings as exc:
        raise Conflict(str(exc)) from exc
    except ValueError as exc:
        raise Invalid(str(exc)) from exc
    if McpServer.objects.exclude(pk=server.pk).filter(name=server.name).exists():
        raise Conflict(
            f"an MCP server named {server.name} already exists", fields={"name": ["taken"]}
        )
    with transaction.atomic():
        server.save()
        forgotten = mcp_credentials_forget_if_moved(server=server, before=before)
        # Field names only: env, headers and the OAuth client secret are secrets.
        what = "added" if adding else f"changed {', '.join(changed) or 'nothing'}"
        if forgotten:
            what += f"; forgot {forgotten} personal credential{'s' if forgotten > 1 else ''}"
        LogEntry.objects.log_actions(
            user.pk, [server], ADDITION if adding else CHANGE, change_message=what
        )
    return server


def mcp_server_delete(*, user: Any, server: McpServer) -> None:
    """Remove a server (its tools leave the registry on commit), in the admin log."""
    if not user.is_staff:
        raise Forbidden("MCP servers are managed by staff")
    with transaction.atomic():
        LogEntry.objects.log_actions(
            user.pk, [server], DELETION, change_message=f"deleted MCP server {server.name}"
        )
        server.delete()
