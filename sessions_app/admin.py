"""Admin for sessions, their events and provider calls (read-mostly)."""

from __future__ import annotations

from django.contrib import admin

from sessions_app.models import ChatSession, ProviderCall, SessionEvent


@admin.register(ChatSession)
class ChatSessionAdmin(admin.ModelAdmin):
    list_display = ["__str__", "owner", "agent", "plan_mode", "last_seq", "updated"]
    list_filter = ["plan_mode", "channel", "agent"]
    search_fields = ["title", "owner__username", "id"]
    readonly_fields = ["last_seq", "version", "created", "updated"]


@admin.register(SessionEvent)
class SessionEventAdmin(admin.ModelAdmin):
    list_display = ["session", "seq", "kind", "turn", "created"]
    list_filter = ["kind"]
    search_fields = ["session__id", "turn"]


@admin.register(ProviderCall)
class ProviderCallAdmin(admin.ModelAdmin):
    list_display = ["session", "model", "fingerprint", "resident_tokens", "input_tokens", "created"]
    list_filter = ["model"]
    search_fields = ["session__id", "fingerprint"]
