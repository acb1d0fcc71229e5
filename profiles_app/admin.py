"""Admin for tool profiles, agent profiles, global disables and approval policies.

Every add, change and delete here goes through the same service as the pages and the API
(toolhub.lib.admin_writes): a value the service refuses is refused here with its message,
the audit entry is the service's (an operator's edit of a person's profile or agent is
audited too), and every process sees a disable or a policy at once.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from profiles_app import services
from profiles_app.models import Agent, GlobalDisable, ToolApprovalPolicy, ToolProfile
from toolhub.lib.admin_links import NOT_THEIRS, ReadOnlyLog, product_link
from toolhub.lib.admin_writes import ServiceAdmin


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


class _Owned(ServiceAdmin):
    """A profile or an agent: a person's own (``owner``) or shared (no owner). The owner is
    chosen when adding and kept after; an operator's edit runs with the owner's rules."""

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        stamps = ["version", "created", "updated"]
        return ["owner", *stamps] if obj is not None else stamps

    @staticmethod
    def _acting(request: Any, row: Any, data: dict[str, Any]) -> tuple[Any, bool]:
        """Whose rules apply (the owner, or the operator for a shared one) and whether shared."""
        owner = row.owner if row is not None else data.get("owner")
        return owner or request.user, owner is None


@admin.register(ToolProfile)
class ToolProfileAdmin(_LinksToPage, _Owned):
    page = "profile"
    list_display = ["name", "owner", "mode", "version", "updated"]
    list_filter = ["mode", ("owner", admin.EmptyFieldListFilter)]
    search_fields = ["name", "owner__username"]
    fields = ["name", "owner", "mode", "tools", "approvals", "version", "created", "updated"]

    def service_save(self, request: Any, *, row: Any, data: dict[str, Any]) -> ToolProfile:
        user, shared = self._acting(request, row, data)
        fields = {
            "name": data.get("name"),
            "mode": data.get("mode"),
            # An empty box is an empty list or map, not "unchanged".
            "tools": [] if data.get("tools") is None else data["tools"],
            "approvals": {} if data.get("approvals") is None else data["approvals"],
        }
        if row is None:
            return services.profile_create(
                user=user, shared=shared, operator=request.user, **fields
            )
        return services.profile_update(
            user=user, profile=row, version=row.version, operator=request.user, **fields
        )

    def service_delete(self, request: Any, *, row: Any) -> None:
        user, _ = self._acting(request, row, {})
        services.profile_delete(user=user, profile=row, version=row.version, operator=request.user)


@admin.register(GlobalDisable)
class GlobalDisableAdmin(ServiceAdmin):
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

    def service_save(self, request: Any, *, row: Any, data: dict[str, Any]) -> GlobalDisable:
        return services.tool_disable_globally(
            user=request.user, tool=data.get("tool") or "", reason=data.get("reason") or ""
        )

    def service_delete(self, request: Any, *, row: Any) -> None:
        services.tool_enable_globally(user=request.user, tool=row.tool, reason="from the admin")


@admin.register(ToolApprovalPolicy)
class ToolApprovalPolicyAdmin(ServiceAdmin):
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

    def service_save(self, request: Any, *, row: Any, data: dict[str, Any]) -> ToolApprovalPolicy:
        return services.tool_policy_set(
            user=request.user,
            tool=row.tool if row is not None else data.get("tool") or "",
            policy=data.get("policy") or "",
            reason=data.get("reason") or "",
        )

    def service_delete(self, request: Any, *, row: Any) -> None:
        services.tool_policy_clear(user=request.user, tool=row.tool)


@admin.register(Agent)
class AgentAdmin(_LinksToPage, _Owned):
    page = "agent_page"
    list_display = ["name", "owner", "provider", "model", "strategy", "version"]
    list_filter = ["provider", "strategy", ("owner", admin.EmptyFieldListFilter)]
    search_fields = ["name", "model", "owner__username"]
    fields = ["owner", *services.AGENT_FIELDS, "version", "created", "updated"]

    def service_save(self, request: Any, *, row: Any, data: dict[str, Any]) -> Agent:
        user, shared = self._acting(request, row, data)
        fields = {key: data[key] for key in services.AGENT_FIELDS if key in data}
        if row is None:
            return services.agent_create(user=user, shared=shared, operator=request.user, **fields)
        return services.agent_update(
            user=user, agent=row, version=row.version, operator=request.user, **fields
        )

    def service_delete(self, request: Any, *, row: Any) -> None:
        user, _ = self._acting(request, row, {})
        services.agent_delete(user=user, agent=row, version=row.version, operator=request.user)


@admin.register(LogEntry)
class ChangeLogAdmin(ReadOnlyLog):
    """Every change made through the product's services, the admin included: who, when,
    what and the reason given."""

    list_display = ["action_time", "user", "content_type", "object_repr", "change_message"]
    list_filter = ["action_flag", "content_type", "action_time"]
    search_fields = ["object_repr", "change_message", "user__username"]
    list_select_related = ["user", "content_type"]
    date_hierarchy = "action_time"
