"""MCP servers in the Django processes: configuration from ``McpServer`` rows, one
``McpManager`` per process, and what pages and the API show about them.

Invariants:
- Every web and worker process connects on start-up (``mcp_start``), then follows the
  table: a save or delete reconciles at once in the process that made it (on commit) and
  every other process within ``TOOLHUB_MCP_POLL`` seconds. Each web process tells open
  chats (``catalog_changed``) when its own tools changed, so an inspector refreshed too
  early is refreshed again.
- Secrets (``env`` values, ``headers`` values, the OAuth client secret) leave this module
  only inside the config handed to the manager; every view of a server (``server_json``)
  carries their keys, or whether it is set, only. OAuth tokens are read and written by
  the manager's store (``mcp_grants``) and the sign-in (``mcp_oauth``), never shown.
- A sign-in, or a grant found not to work, changes the grant's generation, which is part
  of the server's config: every process reconnects at its next reconcile.
- Only rows are configuration: nothing a model, a user or an MCP server sends can add a
  server or a command.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db import close_old_connections, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from agent_app.mcp_grants import DatabaseOAuthStore
from agent_app.models import McpCredential, McpOAuthGrant, McpServer
from agent_app.turns.loop import on_db_thread
from profiles_app.services import global_disables
from sessions_app.models import ChatSession
from sessions_app.services import session_context
from toolhub.lib.catalog_news import catalog_changed, catalog_changed_now
from toolhub.lib.errors import Conflict, Forbidden, Invalid, NotFound
from toolhub.tools.mcp import (
    ConflictingSettings,
    McpLogLine,
    McpManager,
    McpServerConfig,
    McpStatus,
    prompt_problem,
    tool_name,
)
from toolhub.tools.mcp.resources import READ_RESOURCE

logger = logging.getLogger(__name__)

manager = McpManager(
    health_interval=settings.TOOLHUB_MCP_HEALTH_INTERVAL,
    backoff_max=settings.TOOLHUB_MCP_BACKOFF_MAX,
    errlog=sys.stderr,
    oauth_store=DatabaseOAuthStore(),
)
SYNC_WAIT_SECONDS = 10.0
_poller: threading.Thread | None = None
_poller_lock = threading.Lock()


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{what} must be a list of strings")
    return value


def _string_map(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(item, str) for item in value.values()):
        raise ValueError(f"{what} must be an object of strings")
    return value


def mcp_config(server: McpServer) -> McpServerConfig:
    """The manager's view of a row, secrets included (never shown anywhere). Raises
    ``ValueError`` naming what is wrong (never a secret's value)."""
    args = _strings(server.args or [], "args")
    env = _string_map(server.env or {}, "env")
    headers = _string_map(server.headers or {}, "headers")
    allowlist = None if server.allowlist is None else _strings(server.allowlist, "allowlist")
    grant = mcp_grant(server) if server.auth == "oauth" else None
    return McpServerConfig(
        name=server.name,
        transport=server.transport,
        command=server.command,
        args=tuple(args),
        env=tuple(sorted(env.items())),
        url=server.url,
        headers=tuple(sorted(headers.items())),
        defer=server.defer,
        timeout=server.timeout,
        timeout_ceiling=server.timeout_ceiling,
        # An empty list means "no allowlist" (the admin's empty box), not "no tools".
        allowlist=tuple(allowlist) if allowlist else None,
        approve_destructive=server.approve_destructive,
        sampling=server.sampling,
        workspace_roots=server.workspace_roots,
        user_credential=server.user_credential,
        auth=server.auth,
        oauth_scopes=server.oauth_scopes,
        oauth_client_id=server.oauth_client_id,
        oauth_client_secret=server.oauth_client_secret,
        oauth_generation=grant.generation if grant is not None else 0,
        allow_private=settings.TOOLHUB_MCP_ALLOW_PRIVATE,
    )


def mcp_grant(server: McpServer) -> McpOAuthGrant | None:
    """The server's OAuth grant row, working or lost (None: never signed in)."""
    if server.pk is None:
        return None
    try:
        return server.oauth_grant
    except McpOAuthGrant.DoesNotExist:
        return None


def mcp_configs() -> list[McpServerConfig]:
    configs = []
    for server in McpServer.objects.filter(enabled=True).select_related("oauth_grant"):
        try:
            configs.append(mcp_config(server))
        except ValueError as exc:
            logger.error("MCP server %s is misconfigured: %s", server.name, exc)
    return configs


def mcp_sync(*, wait: float | None = None) -> None:
    """Make this process's connections match the table now."""
    manager.reconcile(mcp_configs(), wait=wait)


def mcp_start(*, serves_pages: bool = False) -> None:
    """Connect every enabled server and keep following the table (once per process). A
    process that ``serves_pages`` (their inspectors) also tells open chats when its
    tools changed (``mcp_follow_once``)."""
    global _poller
    if not settings.TOOLHUB_MCP_CONNECT:
        return
    with _poller_lock:
        if _poller is not None:
            return
        _poller = threading.Thread(
            target=_follow, args=(serves_pages,), name="toolhub-mcp-config", daemon=True
        )
        _poller.start()


def _follow(announce: bool) -> None:
    # A daemon thread for the life of the process: it ends with it.
    while True:
        try:
            mcp_follow_once(announce=announce)
        except Exception:
            logger.exception("reading the MCP server table failed")
        finally:
            close_old_connections()
        time.sleep(settings.TOOLHUB_MCP_POLL)


# What open chats were last told of this process's tools: (registry uid, generation).
_announced: tuple[int, int] | None = None
_announced_lock = threading.Lock()


def mcp_follow_once(*, announce: bool) -> None:
    """Make this process's connections match the table; then, if ``announce``, tell open
    chats when the tools this process offers changed since it last looked. Each web
    process says so itself: a page's inspector may be served by any of them, and each
    changes when its own connections list their tools, after the process that saved the
    row announced it (a server that connects late, or relists, is announced at the next
    poll too). A process's first look only notes what it has."""
    try:
        mcp_sync()
    finally:
        if announce:
            _announce_changes()


def _announce_changes(*, always: bool = False) -> None:
    global _announced
    registry = manager.registry
    now = (registry.uid, registry.generation)
    with _announced_lock:
        first, changed, _announced = _announced is None, _announced != now, now
    if always or (changed and not first):
        catalog_changed_now()


@receiver(post_save, sender=McpServer)
@receiver(post_delete, sender=McpServer)
def _server_changed(**_: Any) -> None:
    mcp_reconcile_on_commit()


def mcp_reconcile_on_commit() -> None:
    """After the transaction commits, make this process's connections match the table
    (other processes follow within ``TOOLHUB_MCP_POLL`` seconds)."""
    # Only a process that connects follows changes; a management command does not start
    # servers because someone saved a row.
    if _poller is not None:
        transaction.on_commit(_sync_now)
    else:
        catalog_changed()


def _sync_now() -> None:
    # The page that made the change shows its effect when it reloads: wait for the
    # reconcile (a stdio server's shutdown included), but never fail the request for it.
    try:
        mcp_sync(wait=SYNC_WAIT_SECONDS)
    except Exception:
        logger.warning("MCP servers are still being reconciled", exc_info=True)
    # Open chats refresh their inspectors with the servers' tools as they are now (and
    # again from each web process as its own connections catch up: mcp_follow_once).
    _announce_changes(always=True)


def mcp_status(server: McpServer) -> McpStatus | None:
    return manager.statuses().get(server.name) if server.enabled else None


OPS_LOG_LINES = 20


def mcp_resources() -> list[dict[str, Any]]:
    """The resources a person can attach to a message ("@" in the composer): those of
    every connected server whose reader no operator has disabled."""
    disabled = global_disables()
    return [
        resource.to_json()
        for resource in manager.resources()
        if tool_name(resource.server, READ_RESOURCE) not in disabled
    ]


def mcp_resource_attach(*, session: ChatSession, server: str, uri: str) -> str:
    """A listed resource's contents as the composer attaches them: a line naming it, then
    its text exactly as the server sent it. Raises ``Invalid`` for a URI the server does
    not list, ``Conflict`` when it cannot be read now (its reader disabled included) or
    is binary (an image or a file: the reader tool carries those, a message cannot)."""
    resource = next((r for r in manager.resources() if (r.server, r.uri) == (server, uri)), None)
    if resource is None:
        raise Invalid(f"MCP server {server[:24]} lists no resource {uri[:200]!r}")
    reader = tool_name(server, READ_RESOURCE)
    reason = global_disables().get(reader)
    if reason is not None:
        raise Conflict(f"{reader} is {reason}")
    # Read as the chat's own call would: a person's own credential where the server
    # takes one, never the server's on their behalf.
    result = async_to_sync(manager.read_resource)(server, uri, ctx=session_context(session=session))
    if result.is_error:
        raise Conflict(result.content)
    if result.files or result.images:
        # A message carries text: the bytes would be lost, and its line would promise a
        # download nobody is offered. The reader tool carries both, in a turn.
        raise Conflict(
            f"{resource.name[:80]} is a binary file, and a message carries only text: ask "
            f"the assistant to read it with {reader}, which shows you images and offers "
            "files for download."
        )
    return f"[Resource {resource.name} ({uri}) from MCP server {server}]\n{result.content}"


def mcp_prompts() -> list[dict[str, Any]]:
    """The prompts of every server connected in this process, as the composer lists them."""
    return [prompt.to_json() for prompt in manager.prompts()]


def mcp_prompt_fill(*, session: ChatSession, server: str, name: str, arguments: Any) -> str:
    """``server``'s prompt ``name`` filled in with ``arguments`` (text by name): the text
    the person's message will be. Raises ``Invalid`` for arguments the prompt does not
    take, ``Conflict`` when the server cannot answer now."""
    if not isinstance(arguments, dict) or not all(
        isinstance(value, str) for value in arguments.values()
    ):
        raise Invalid("a prompt's arguments are an object of texts")
    prompt = next((p for p in manager.prompts() if (p.server, p.name) == (server, name)), None)
    if prompt is None:
        raise Conflict(f"MCP server {server[:24]} offers no prompt {name[:128]!r} now")
    problem = prompt_problem(prompt, arguments)
    if problem:
        raise Invalid(problem)
    # Checked again there; what fails now is the server's state (gone, an error).
    ctx = session_context(session=session)
    result = async_to_sync(manager.get_prompt)(server, name, arguments, ctx=ctx)
    if result.is_error:
        raise Conflict(result.content)
    return result.content


def mcp_logs(server: McpServer) -> list[McpLogLine]:
    """The last log messages the server sent this process's connection, oldest first."""
    return manager.logs(server.name)[-OPS_LOG_LINES:] if server.enabled else []


def server_json(server: McpServer) -> dict[str, Any]:
    """A server as pages and the API show it: secrets by key only, live status."""
    status = mcp_status(server)
    grant = mcp_grant(server) if server.auth == "oauth" else None
    signed_in = grant is not None and grant.tokens is not None
    if not server.enabled:
        state = "disabled"
    elif status is not None:
        state = status.state
    else:
        # Not connected in this process (yet): an OAuth server without a grant will not.
        state = "needs_sign_in" if server.auth == "oauth" and not signed_in else "connecting"
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
        "state": state,
        "error": status.error if status is not None else "",
        # A stdio server's last stderr lines when it failed (why it would not start).
        "stderr": list(status.stderr) if status is not None else [],
        "tools": status.tools if status is not None else 0,
        # When this process last changed the server's state (connected, disconnected).
        "since": datetime.fromtimestamp(status.since, UTC) if status is not None else None,
    }


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


def _personal_servers() -> Any:
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
    return (
        McpCredential.objects.filter(server__name=server, server__enabled=True, owner_id=user_id)
        .values_list("value", flat=True)
        .first()
    )


class CredentialsAdapter:
    """``CredentialStore`` for the runtime: a person's own credential, read per call (a
    changed or removed one takes effect at the next call)."""

    async def get(self, *, server: str, user_id: str) -> str | None:
        value: str | None = await on_db_thread(_credential, server=server, user_id=user_id)
        return value
