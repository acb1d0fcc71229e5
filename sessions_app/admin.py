"""Admin for chats, their events and model calls. The events and calls are the record the
product writes: read-only here, searchable by a person's name, a chat's id or a model, and
each row links to the chat page that shows it (for the chats the viewer may open).

A chat is changed or deleted here through the services its page uses, with its owner's
rules and the operator audited (toolhub.lib.admin_writes); chats are started by people,
never here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.urls import reverse

from sessions_app import services
from sessions_app.models import ChatSession, ProviderCall, SessionEvent
from toolhub.lib.admin_links import NOT_THEIRS, ReadOnlyLog, product_link
from toolhub.lib.admin_writes import ServiceAdmin


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
class ChatSessionAdmin(_LinksToChat, ServiceAdmin):
    list_display = ["__str__", "owner", "agent", "plan_mode", "last_seq", "updated"]
    list_filter = ["plan_mode", "channel", "agent", ("deleted", admin.EmptyFieldListFilter)]
    search_fields = ["title", "owner__username", "id"]
    # What session_update changes; the rest is the turn's record.
    fields = ["owner", "title", "agent", "tool_intent", "plan_mode", "allowed_tools"]
    readonly_fields = ["owner", "last_seq", "version", "created", "updated"]
    list_select_related = ["owner", "agent"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def service_save(self, request: Any, *, row: Any, data: dict[str, Any]) -> ChatSession:
        agent = data.get("agent")
        return services.session_update(
            user=row.owner,
            session=row,
            version=row.version,
            operator=request.user,
            title=data.get("title") or "",
            agent=agent.pk if agent is not None else None,
            intent=data.get("tool_intent"),
            plan_mode=bool(data.get("plan_mode")),
            allowed_tools=[] if data.get("allowed_tools") is None else data["allowed_tools"],
        )

    def service_delete(self, request: Any, *, row: Any) -> None:
        services.session_trash(user=row.owner, session=row, operator=request.user)


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
