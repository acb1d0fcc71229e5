"""Admin for agents, notes and worker tool runs (read-only: runs are the record)."""

from __future__ import annotations

from django.contrib import admin

from agent_app.models import Agent, Note, ToolRun


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "provider", "model", "strategy", "version"]
    list_filter = ["provider", "strategy", ("owner", admin.EmptyFieldListFilter)]
    search_fields = ["name", "model", "owner__username"]
    readonly_fields = ["version", "created", "updated"]


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
