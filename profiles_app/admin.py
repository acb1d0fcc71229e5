"""Admin for tool profiles, agent profiles, global disables and approval policies.

A global disable or an approval policy added, changed or removed here goes through the
same service as the API, so the audit record (with its reason) is the same and every
process sees it at once; Django's own log entry is not written twice.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from profiles_app import services
from profiles_app.models import Agent, GlobalDisable, ToolApprovalPolicy, ToolProfile
from toolhub.lib.admin_links import NOT_THEIRS, ReadOnlyLog, product_link
from toolhub.lib.errors import ServiceError


class _LinksToPage:
    """Each row links to its page in the product, where the viewer may open it: their
    own, or a shared one (another person's is a 404 there, for staff too)."""

    page = ""

    def get_list_display(self, request: Any) -> list[Any]:
        def in_product(row: Any) -> str:
            if row.owner_id is not None and row.owner_id != request.user.pk:
                return NOT_THEIRS
            return product_link(reverse(self.page, args=[row.pk]))

        in_product.short_description = "In the product"  # type: ignore[attr-defined]
        return [*super().get_list_display(request), in_product]  # type: ignore[misc]


@admin.register(ToolProfile)
class ToolProfileAdmin(_LinksToPage, admin.ModelAdmin):
    page = "program"
    list_display = ["name", "owner", "mode", "version", "updated"]
    list_filter = ["mode", ("owner", admin.EmptyFieldListFilter)]
    search_fields = ["name", "owner__username"]
    readonly_fields = ["version", "created", "updated"]


@admin.register(GlobalDisable)
class GlobalDisableAdmin(admin.ModelAdmin):
    list_display = ["tool", "reason", "created_by", "created_at", "in_product"]
    list_filter = ["created_at"]
    search_fields = ["tool", "reason"]
    fields = ["tool", "reason"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        # A disable is added or removed, never edited: the audit trail stays simple.
        return False

    @admin.display(description="In the product")
    def in_product(self, row: GlobalDisable) -> str:
        return product_link(f"{reverse('ops_tools')}#tool-{row.tool}", "On the ops page")

    def save_model(self, request: Any, obj: GlobalDisable, form: Any, change: bool) -> None:
        try:
            saved = services.tool_disable_globally(
                user=request.user, tool=obj.tool, reason=obj.reason
            )
        except ServiceError as exc:
            messages.error(request, exc.message)
            return
        obj.pk = saved.pk

    def delete_model(self, request: Any, obj: GlobalDisable) -> None:
        services.tool_enable_globally(user=request.user, tool=obj.tool, reason="from the admin")

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)

    # The service already wrote the audit entry, with the reason.
    def log_addition(self, request: Any, obj: Any, message: Any) -> None:
        return None

    def log_deletion(self, request: Any, obj: Any, object_repr: str) -> None:
        return None

    def log_deletions(self, request: Any, queryset: Any) -> None:
        return None


@admin.register(ToolApprovalPolicy)
class ToolApprovalPolicyAdmin(admin.ModelAdmin):
    list_display = ["tool", "policy", "reason", "created_by", "updated", "in_product"]
    list_filter = ["policy"]
    search_fields = ["tool", "reason"]
    fields = ["tool", "policy", "reason"]

    @admin.display(description="In the product")
    def in_product(self, row: ToolApprovalPolicy) -> str:
        return product_link(f"{reverse('ops_tools')}#policy-row-{row.tool}", "On the ops page")

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        # A policy names its tool for good: another tool gets a policy of its own.
        return ["tool"] if obj is not None else []

    def save_model(self, request: Any, obj: ToolApprovalPolicy, form: Any, change: bool) -> None:
        try:
            saved = services.tool_policy_set(
                user=request.user, tool=obj.tool, policy=obj.policy, reason=obj.reason
            )
        except ServiceError as exc:
            messages.error(request, exc.message)
            return
        obj.pk = saved.pk

    def delete_model(self, request: Any, obj: ToolApprovalPolicy) -> None:
        services.tool_policy_clear(user=request.user, tool=obj.tool)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)

    # The service already wrote the audit entry, with the reason.
    def log_addition(self, request: Any, obj: Any, message: Any) -> None:
        return None

    def log_change(self, request: Any, obj: Any, message: Any) -> None:
        return None

    def log_deletion(self, request: Any, obj: Any, object_repr: str) -> None:
        return None

    def log_deletions(self, request: Any, queryset: Any) -> None:
        return None


@admin.register(Agent)
class AgentAdmin(_LinksToPage, admin.ModelAdmin):
    page = "agent_page"
    list_display = ["name", "owner", "provider", "model", "strategy", "version"]
    list_filter = ["provider", "strategy", ("owner", admin.EmptyFieldListFilter)]
    search_fields = ["name", "model", "owner__username"]
    readonly_fields = ["version", "created", "updated"]


@admin.register(LogEntry)
class ChangeLogAdmin(ReadOnlyLog):
    """Every change made through the product's services, the admin included: who, when,
    what and the reason given."""

    list_display = ["action_time", "user", "content_type", "object_repr", "change_message"]
    list_filter = ["action_flag", "content_type", "action_time"]
    search_fields = ["object_repr", "change_message", "user__username"]
    list_select_related = ["user", "content_type"]
    date_hierarchy = "action_time"
