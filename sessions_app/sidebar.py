"""The chats list beside a conversation: pinned chats first, then the rest by when they
last changed — Today, Yesterday, Previous 7 days, then month by month — and archived
chats apart, in a list of their own to bring back.

Days are counted in UTC: the page does not tell the server its time zone, so a chat from
just before a person's midnight may sit under the neighbouring day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from sessions_app.models import ChatSession
from sessions_app.services import sessions_of

SHOWN = 100
ARCHIVED_SHOWN = 50


@dataclass(frozen=True, slots=True)
class ChatGroup:
    label: str
    chats: list[ChatSession]


def chat_groups(*, user: Any, now: datetime | None = None) -> list[ChatGroup]:
    """The person's chats as the list shows them, newest first in each group."""
    now = now or timezone.now()
    today = now.date()
    chats = list(
        sessions_of(user).filter(archived__isnull=True).order_by("-pinned", "-updated")[:SHOWN]
    )
    groups: dict[str, list[ChatSession]] = {}
    for chat in chats:
        groups.setdefault(_label(chat, today), []).append(chat)
    return [ChatGroup(label, members) for label, members in groups.items()]


def _label(chat: ChatSession, today: Any) -> str:
    if chat.pinned:
        return "Pinned"
    day = chat.updated.date()
    if day >= today:
        return "Today"
    if day == today - timedelta(days=1):
        return "Yesterday"
    if day > today - timedelta(days=7):
        return "Previous 7 days"
    return f"{chat.updated:%B %Y}"


def archived_chats(*, user: Any) -> list[ChatSession]:
    return list(
        sessions_of(user).filter(archived__isnull=False).order_by("-archived")[:ARCHIVED_SHOWN]
    )
