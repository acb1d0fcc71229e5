"""Admin for notes, worker tool runs (read-only: runs are the record) and MCP
servers (their secrets write-only). Runs link to their chat, servers to the ops page.

An MCP server is written through ``mcp_server_save`` and ``mcp_server_delete``, as the API
writes it (toolhub.lib.admin_writes): the same checks, the same audit entry, and a change
of where it connects forgets every person's own credential for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.urls import reverse

from agent_app.mcp import mcp_grant
from agent_app.mcp_servers import (
    FIELDS,
    SECRET_FIELDS,
    mcp_server_delete,
    mcp_server_save,
    server_json,
)
from agent_app.models import McpServer, Note, ToolRun
from toolhub.lib.admin_links import NOT_THEIRS, ReadOnlyLog, product_link
from toolhub.lib.admin_writes import ServiceAdmin

# Generic only to the type checker: neither class takes parameters at run time.
if TYPE_CHECKING:
    _NoteAdmin = admin.ModelAdmin[Note]
    _McpServerForm = forms.ModelForm[McpServer]
else:
    _NoteAdmin = admin.ModelAdmin
    _McpServerForm = forms.ModelForm


@admin.register(Note)
class NoteAdmin(_NoteAdmin):
    list_display = ["owner", "text", "created"]
    search_fields = ["text", "owner__username"]


@admin.register(ToolRun)
class ToolRunAdmin(ReadOnlyLog):
    list_display = ["tool", "status", "session", "worker", "created", "finished"]
    list_filter = ["status", "tool"]
    search_fields = ["tool", "call_id", "worker", "session__id", "session__owner__username"]
    list_select_related = ["session"]

    def get_list_display(self, request: Any) -> list[Any]:
        def in_product(run: ToolRun) -> str:
            session = run.session
            if session is None or session.owner_id != request.user.pk:
                return NOT_THEIRS
            return product_link(reverse("chat_session", args=[session.pk]), "Open the chat")

        in_product.short_description = "In the product"  # type: ignore[attr-defined]
        return [*super().get_list_display(request), in_product]


def _secret_field(label: str, example: str) -> forms.JSONField:
    return forms.JSONField(
        required=False,
        label=label,
        help_text=f"JSON object, e.g. {example}. Empty keeps the stored values; {{}} clears them.",
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
    )


class McpServerForm(_McpServerForm):
    """``env``, ``headers`` and the OAuth client secret are write-only: the form never
    shows their values. Leave a box empty to keep what is stored; ``{}`` (or the clear
    box) clears it. OAuth tokens are not here at all: a sign-in on the ops page makes
    them."""

    env_update = _secret_field("Environment (secret)", '{"GITHUB_TOKEN": "…"}')
    headers_update = _secret_field("HTTP headers (secret)", '{"Authorization": "Bearer …"}')
    oauth_client_secret_update = forms.CharField(
        required=False,
        label="OAuth client secret (secret)",
        max_length=500,
        strip=False,
        help_text="Of the pre-registered client. Empty keeps the stored one.",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
    )
    oauth_client_secret_clear = forms.BooleanField(
        required=False, label="Clear the OAuth client secret"
    )

    class Meta:
        model = McpServer
        # Every field the service saves, but the secrets: those have write-only boxes above.
        fields = [field for field in FIELDS if field not in SECRET_FIELDS]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["auth"].required = False

    def clean_auth(self) -> str:
        # A form posted without the field (one from before it existed) keeps what is set.
        auth: str = self.cleaned_data.get("auth") or self.instance.auth
        return auth


def _secrets(data: dict[str, Any]) -> dict[str, Any]:
    """The secrets a post changes (the others are kept as stored)."""
    changed: dict[str, Any] = {}
    for field in ("env", "headers"):
        if data.get(f"{field}_update") is not None:
            changed[field] = data[f"{field}_update"]
    if data.get("oauth_client_secret_clear"):
        changed["oauth_client_secret"] = ""
    elif data.get("oauth_client_secret_update"):
        changed["oauth_client_secret"] = data["oauth_client_secret_update"]
    return changed


@admin.register(McpServer)
class McpServerAdmin(ServiceAdmin):
    form = McpServerForm
    list_display = [
        "name",
        "transport",
        "enabled",
        "defer",
        "approve_destructive",
        "state",
        "in_product",
    ]
    list_filter = ["transport", "enabled", "approve_destructive"]
    search_fields = ["name", "command", "url"]
    readonly_fields = [
        "stored_secrets",
        "state",
        "oauth_sign_in",
        "created_by",
        "created",
        "updated",
    ]

    @admin.display(description="In the product")
    def in_product(self, server: McpServer) -> str:
        return product_link(f"{reverse('ops_tools')}#mcp-{server.name}", "On the ops page")

    @admin.display(description="Stored secrets")
    def stored_secrets(self, server: McpServer) -> str:
        env = ", ".join(sorted(server.env or {})) or "none"
        headers = ", ".join(sorted(server.headers or {})) or "none"
        secret = "set" if server.oauth_client_secret else "none"
        return (
            f"environment: {env}; headers: {headers}; OAuth client secret: {secret} "
            "(values are never shown)"
        )

    @admin.display(description="OAuth sign-in")
    def oauth_sign_in(self, server: McpServer) -> str:
        if server.auth != McpServer.Auth.OAUTH:
            return "not an OAuth server"
        data = server_json(server)
        if data["signed_in_at"] is None:
            lost = mcp_grant(server)
            why = f" ({lost.lost_reason})" if lost is not None and lost.lost_reason else ""
            return f"needs sign-in, on the ops page{why}"
        who = f" by {data['signed_in_by']}" if data["signed_in_by"] else ""
        return f"signed in{who} at {data['signed_in_at']:%Y-%m-%d %H:%M} (tokens are never shown)"

    @admin.display(description="State in this process")
    def state(self, server: McpServer) -> str:
        data = server_json(server)
        return f"{data['state']}: {data['error']}" if data["error"] else data["state"]

    def service_save(self, request: Any, *, row: Any, data: dict[str, Any]) -> McpServer:
        fields = {field: data[field] for field in FIELDS if field in data}
        fields.update(_secrets(data))
        return mcp_server_save(user=request.user, server=row, data=fields)

    def service_delete(self, request: Any, *, row: Any) -> None:
        mcp_server_delete(user=request.user, server=row)
