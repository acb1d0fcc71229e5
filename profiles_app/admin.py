"""Admin for tool profiles, agent profiles, global disables and approval policies.

A global disable or an approval policy added, changed or removed here goes through the
same service as the API, so the audit record (with its reason) is the same and every
process sees it at once; Django's own log entry is not written twice.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages

from profiles_app import services
from profiles_app.models import Agent, GlobalDisable, ToolApprovalPolicy, ToolProfile
from toolhub.lib.errors import ServiceError


@admin.register(ToolProfile)
class ToolProfileAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "mode", "version", "updated"]
    list_filter = ["mode", ("owner", admin.EmptyFieldListFilter)]
    search_fields = ["name", "owner__username"]
    readonly_fields = ["version", "created", "updated"]


@admin.register(GlobalDisable)
class GlobalDisableAdmin(admin.ModelAdmin):
    list_display = ["tool", "reason", "created_by", "created_at"]
    list_filter = ["created_at"]
    search_fields = ["tool", "reason"]
    fields = ["tool", "reason"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        # A disable is added or removed, never edited: the audit trail stays simple.
        return False

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
    list_display = ["tool", "policy", "reason", "created_by", "updated"]
    list_filter = ["policy"]
    search_fields = ["tool", "reason"]
    fields = ["tool", "policy", "reason"]

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
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "provider", "model", "strategy", "version"]
    list_filter = ["provider", "strategy", ("owner", admin.EmptyFieldListFilter)]
    search_fields = ["name", "model", "owner__username"]
    readonly_fields = ["version", "created", "updated"]
