"""Admin rows that link to where the product shows them (the chat, the Agents page, the
ops page), and log models that are read, never written, in the admin."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.utils.html import format_html

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin

# Where the viewer may not open the row's page (another person's object is a 404 there).
NOT_THEIRS = "its owner's"


def product_link(url: str, label: str = "Open") -> str:
    return format_html('<a href="{}">{}</a>', url, label)


class ReadOnlyLog(_ModelAdmin):
    """A record the product writes (events, model calls, runs, the change log): viewable
    and searchable by staff, never added, changed or deleted here."""

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
