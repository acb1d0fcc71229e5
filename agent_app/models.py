"""The per-person notes the remember/recall tools keep, the runs of tools that execute on
workers, and the MCP servers operators connect. (Agents are profiles: ``profiles_app``.)

A ``ToolRun`` moves forward only: queued → running → succeeded, failed, cancelled or lost
(queued may also end cancelled or lost), each step a conditional UPDATE on the status, so a
redelivered task or a late worker can never run a tool twice or overwrite an ending.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from toolhub.lib.sealing import SealedJSONField, SealedTextField


class Note(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notes"
    )
    text = models.TextField(max_length=4_000)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return self.text[:60]


class ToolRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        LOST = "lost"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        "sessions_app.ChatSession", on_delete=models.CASCADE, related_name="tool_runs"
    )
    turn = models.CharField(max_length=36)
    call_id = models.CharField(max_length=200)
    tool = models.CharField(max_length=128)
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    # How the call ran: the context fields a worker rebuilds the tool's context from.
    channel = models.CharField(max_length=16, default="web")
    mode = models.CharField(max_length=16, blank=True)
    timeout = models.FloatField(null=True, blank=True)
    # Where the turn waits: its control channel, told when the run ends.
    reply_channel = models.CharField(max_length=120, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # {"status", "content", "reason"} once the run has ended.
    result = models.JSONField(null=True, blank=True)
    tail = models.TextField(blank=True)
    bytes_total = models.PositiveBigIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    task_id = models.CharField(max_length=64, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    heartbeat = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "worker tool run"
        ordering = ["-created"]
        # Call ids come from the model and need not be unique (some servers number them
        # per message); a run is its own row, claimed by id.
        indexes = [
            models.Index(fields=["status", "heartbeat"]),
            models.Index(fields=["session", "call_id"]),
        ]

    def __str__(self) -> str:
        return f"{self.tool} {self.call_id} ({self.status})"


def _server_name(value: str) -> None:
    from django.core.exceptions import ValidationError

    from toolhub.tools.mcp import SERVER_NAME

    if not SERVER_NAME.fullmatch(value):
        raise ValidationError(
            "Use lowercase letters, digits and hyphens (at most 24, no underscores): "
            "the name prefixes every tool of this server as <name>__<tool>."
        )


class McpServer(models.Model):
    """An MCP server whose tools every process registers as ``<name>__<tool>``.

    Staff create these (the admin, the API); a stdio command comes only from here. ``env``,
    ``headers`` and ``oauth_client_secret`` are secrets: written, never shown back (pages
    and the API show their keys, or whether it is set, only).
    """

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (a command toolhub starts)"
        STREAMABLE_HTTP = "streamable_http", "streamable HTTP (a URL)"

    name = models.CharField(max_length=24, unique=True, validators=[_server_name])
    transport = models.CharField(max_length=16, choices=Transport.choices)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = SealedJSONField(default=dict, blank=True)
    url = models.URLField(max_length=500, blank=True)
    headers = SealedJSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    defer = models.BooleanField(
        default=True, help_text="Keep its tools deferred behind tool_search (recommended)."
    )
    timeout = models.FloatField(
        default=60.0,
        help_text="Seconds a call may go without reporting progress before it is stopped.",
    )
    timeout_ceiling = models.FloatField(
        default=600.0,
        help_text=(
            "Seconds a call may take in all, however much progress it reports (never less "
            "than the timeout)."
        ),
    )
    allowlist = models.JSONField(
        null=True, blank=True, help_text="Only these of its tool names (empty: all of them)."
    )
    approve_destructive = models.BooleanField(
        default=True,
        help_text=(
            "Ask the person before running a tool this server marks destructive (its MCP "
            "annotations). Off: such tools run without asking."
        ),
    )
    sampling = models.BooleanField(
        default=False,
        help_text=(
            "Let its tools ask the chat's model for a completion (MCP sampling), each time "
            "with the person's approval. Off: every such request is refused."
        ),
    )
    workspace_roots = models.BooleanField(
        default=False,
        help_text=(
            "Tell it the chat's workspace as its only root (MCP roots, for servers like "
            "filesystem). Each chat then gets a connection of its own."
        ),
    )
    user_credential = models.CharField(
        max_length=200,
        blank=True,
        help_text=(
            "The header (streamable HTTP, e.g. Authorization) or environment variable "
            "(stdio) that carries each person's own credential, which they add in Settings; "
            "their calls go with it on a connection of their own, and without one they are "
            "refused. Empty: every call goes with the server's own."
        ),
    )

    class Auth(models.TextChoices):
        NONE = "none", "none (or a header you set)"
        OAUTH = "oauth", "OAuth 2.1 (a staff member signs in on the ops page)"

    auth = models.CharField(
        max_length=8,
        choices=Auth.choices,
        default=Auth.NONE,
        help_text="How toolhub authorizes to a streamable HTTP server.",
    )
    oauth_scopes = models.CharField(
        max_length=500,
        blank=True,
        help_text="OAuth scopes to ask for, space-separated (empty: what the server says).",
    )
    oauth_client_id = models.CharField(
        max_length=200,
        blank=True,
        help_text=(
            "A client registered with the authorization server beforehand (empty: toolhub "
            "registers itself, if the server allows dynamic registration)."
        ),
    )
    oauth_client_secret = SealedTextField(blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name


class McpCredential(models.Model):
    """One person's own credential for a server that takes one (``user_credential``):
    written by its owner, never shown to anybody (pages and the API say only whether it
    is set, and when), used only for its owner's calls."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="credentials")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    value = SealedTextField()
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP credential"
        constraints = [
            models.UniqueConstraint(fields=["server", "owner"], name="one_credential_per_person")
        ]

    def __str__(self) -> str:
        return f"{self.server} for {self.owner}"


class McpOAuthGrant(models.Model):
    """What a staff member's OAuth sign-in to a server gave: the tokens every process's
    connection uses, the client they were issued to, and what discovery found.

    Written only by the sign-in and by the connections (a refresh, a grant found not to
    work); shown nowhere: not in the admin, the API or a page (they show who signed in
    and when). ``generation`` changes with every sign-in and every loss, never with a
    refresh: it is part of each process's server configuration, so a change reconnects
    every process with what is stored now.
    """

    server = models.OneToOneField(McpServer, on_delete=models.CASCADE, related_name="oauth_grant")
    # The SDK's OAuthToken as JSON; null once the grant is lost (sign-in needed).
    tokens = SealedJSONField(null=True, blank=True)
    expires_at = models.FloatField(null=True, blank=True)
    # The registered client, its secret included.
    client_info = SealedJSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    generation = models.PositiveIntegerField(default=0)
    signed_in_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    signed_in_at = models.DateTimeField(null=True, blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    lost_at = models.DateTimeField(null=True, blank=True)
    lost_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        verbose_name = "MCP OAuth grant"

    def __str__(self) -> str:
        return f"OAuth grant for {self.server}"


class McpOAuthSignIn(models.Model):
    """A sign-in begun by a staff member and not yet finished: what the callback needs to
    exchange the code (any web process may receive it). Found by the sha256 of its state,
    by the same person, once, within ``SIGN_IN_SECONDS``."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    state_digest = models.CharField(max_length=64, unique=True)
    code_verifier = SealedTextField()
    client_info = SealedJSONField(default=dict)
    metadata = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True)
    used = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "MCP OAuth sign-in"

    def __str__(self) -> str:
        return f"OAuth sign-in to {self.server} begun {self.created:%Y-%m-%d %H:%M}"
