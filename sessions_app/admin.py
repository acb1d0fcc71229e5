"""Admin for chats, their events and model calls. The events and calls are the record the
product writes: read-only here, searchable by a person's name, a chat's id or a model, and
each row links to the chat page that shows it (for the chats the viewer may open)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.urls import reverse

from sessions_app.models import ChatSession, ProviderCall, SessionEvent
from toolhub.lib.admin_links import NOT_THEIRS, ReadOnlyLog, product_link


def _chat_link(request: Any, session: ChatSession, anchor: str = "") -> str:
    """The chat page, for its owner (another person's chat is a 404 there, staff too)."""
    if session.owner_id != request.user.pk:
        return NOT_THEIRS
    return product_link(reverse("chat_session", args=[session.pk]) + anchor, "Open the chat")


class _LinksToChat:
    def get_list_display(self, request: Any) -> list[Any]:
        def in_product(row: Any) -> str:
            session = row if isinstance(row, ChatSession) else row.session
            anchor = f"#m{row.seq}" if isinstance(row, SessionEvent) else ""
            return _chat_link(request, session, anchor)

        in_product.short_description = "In the product"  # type: ignore[attr-defined]
        return [*super().get_list_display(request), in_product]  # type: ignore[misc]


@admin.register(ChatSession)
class ChatSessionAdmin(_LinksToChat, admin.ModelAdmin):
    list_display = ["__str__", "owner", "agent", "plan_mode", "last_seq", "updated"]
    list_filter = ["plan_mode", "channel", "agent", ("deleted", admin.EmptyFieldListFilter)]
    search_fields = ["title", "owner__username", "id"]
    readonly_fields = ["last_seq", "version", "created", "updated"]
    list_select_related = ["owner", "agent"]


@admin.register(SessionEvent)
class SessionEventAdmin(_LinksToChat, ReadOnlyLog):
    list_display = ["session", "seq", "kind", "turn", "created"]
    list_filter = ["kind"]
    search_fields = ["session__id", "session__owner__username", "turn"]
    list_select_related = ["session"]


@admin.register(ProviderCall)
class ProviderCallAdmin(_LinksToChat, ReadOnlyLog):
    list_display = [
        "session",
        "model",
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "created",
    ]
    list_filter = ["model", "provider"]
    search_fields = ["session__id", "session__owner__username", "fingerprint", "model"]
    list_select_related = ["session"]
