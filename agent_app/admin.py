"""Admin for notes, worker tool runs (read-only: runs are the record) and MCP
servers (their secrets write-only)."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from agent_app.mcp import mcp_config, server_json
from agent_app.models import McpServer, Note, ToolRun


@admin.register(Note)
class NoteAdmin(admin.ModelAdmin):
    list_display = ["owner", "text", "created"]
    search_fields = ["text", "owner__username"]


@admin.register(ToolRun)
class ToolRunAdmin(admin.ModelAdmin):
    list_display = ["tool", "status", "session", "worker", "created", "finished"]
    list_filter = ["status", "tool"]
    search_fields = ["tool", "call_id", "worker"]
    readonly_fields = [field.name for field in ToolRun._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False


def _secret_field(label: str, example: str) -> forms.JSONField:
    return forms.JSONField(
        required=False,
        label=label,
        help_text=f"JSON object, e.g. {example}. Empty keeps the stored values; {{}} clears them.",
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
    )


class McpServerForm(forms.ModelForm):
    """``env`` and ``headers`` are write-only: the form never shows their values. Leave a
    box empty to keep what is stored; ``{}`` clears it."""

    env_update = _secret_field("Environment (secret)", '{"GITHUB_TOKEN": "…"}')
    headers_update = _secret_field("HTTP headers (secret)", '{"Authorization": "Bearer …"}')

    class Meta:
        model = McpServer
        fields = [
            "name",
            "transport",
            "command",
            "args",
            "url",
            "enabled",
            "defer",
            "timeout",
            "allowlist",
            "approve_destructive",
        ]

    def clean(self) -> dict:
        data = super().clean()
        # Checked as the row will be used (mcp_config says what is wrong, never a value).
        probe = McpServer(
            name=data.get("name") or "",
            transport=data.get("transport") or "",
            command=data.get("command") or "",
            args=data.get("args") or [],
            url=data.get("url") or "",
            timeout=data.get("timeout") or 0,
            allowlist=data.get("allowlist"),
            env=self.instance.env if data.get("env_update") is None else data["env_update"],
            headers=(
                self.instance.headers
                if data.get("headers_update") is None
                else data["headers_update"]
            ),
        )
        try:
            mcp_config(probe)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data

    def save(self, commit: bool = True) -> McpServer:
        server = super().save(commit=False)
        if self.cleaned_data.get("env_update") is not None:
            server.env = self.cleaned_data["env_update"]
        if self.cleaned_data.get("headers_update") is not None:
            server.headers = self.cleaned_data["headers_update"]
        if commit:
            server.save()
        return server


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    form = McpServerForm
    list_display = ["name", "transport", "enabled", "defer", "approve_destructive", "state"]
    list_filter = ["transport", "enabled", "approve_destructive"]
    search_fields = ["name", "command", "url"]
    readonly_fields = ["stored_secrets", "state", "created_by", "created", "updated"]

    @admin.display(description="Stored secrets")
    def stored_secrets(self, server: McpServer) -> str:
        env = ", ".join(sorted(server.env or {})) or "none"
        headers = ", ".join(sorted(server.headers or {})) or "none"
        return f"environment: {env}; headers: {headers} (values are never shown)"

    @admin.display(description="State in this process")
    def state(self, server: McpServer) -> str:
        data = server_json(server)
        return f"{data['state']}: {data['error']}" if data["error"] else data["state"]

    def save_model(self, request, obj: McpServer, form, change: bool) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
