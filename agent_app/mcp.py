"""MCP servers in the Django processes: configuration from ``McpServer`` rows, and one
``McpManager`` per process that follows the table.

What pages and the API show of a server, and staff's changes to one, are
``agent_app.mcp_servers``'s; each person's own credentials ``agent_app.mcp_credentials``';
what the composer takes from the servers (resources, prompts) ``agent_app.mcp_composer``'s.

Invariants:
- Every web and worker process connects on start-up (``mcp_start``), then follows the
  table: a save or delete reconciles at once in the process that made it (on commit) and
  every other process within ``TOOLHUB_MCP_POLL`` seconds. Each web process tells open
  chats (``catalog_changed``) when its own tools changed, so an inspector refreshed too
  early is refreshed again.
- Secrets (``env`` values, ``headers`` values, the OAuth client secret) leave
  ``mcp_config`` only inside the config handed to the manager. OAuth tokens are read and
  written by the manager's store (``mcp_grants``) and the sign-in (``mcp_oauth``), never
  shown.
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
from typing import Any

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from agent_app.mcp_grants import DatabaseOAuthStore
from agent_app.models import McpOAuthGrant, McpServer
from toolhub.lib.catalog_news import catalog_changed, catalog_changed_now
from toolhub.tools.mcp import McpLogLine, McpManager, McpServerConfig, McpStatus

logger = logging.getLogger(__name__)

manager = McpManager(
    health_interval=settings.TOOLHUB_MCP_HEALTH_INTERVAL,
    backoff_max=settings.TOOLHUB_MCP_BACKOFF_MAX,
    max_chats=settings.TOOLHUB_MCP_CHAT_CONNECTIONS,
    chat_idle=settings.TOOLHUB_MCP_CHAT_IDLE,
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


def mcp_logs(server: McpServer) -> list[McpLogLine]:
    """The last log messages the server sent this process's connection, oldest first."""
    return manager.logs(server.name)[-OPS_LOG_LINES:] if server.enabled else []
