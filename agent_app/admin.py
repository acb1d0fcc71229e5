"""Admin for agents and notes."""

from __future__ import annotations

from django.contrib import admin

from agent_app.models import Agent, Note


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
