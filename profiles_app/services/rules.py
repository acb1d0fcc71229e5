"""The rules every profile write shares: names, modes and tool lists are checked here, who
may read or edit a profile is decided here, and an edit names the version it read.

A meta tool (``tool_search``, ``call_tool``) can be neither removed from a profile nor
disabled: such a request is refused with its reason.

The admin writes through the same services: an operator's edit of a person's object runs
with that person as ``user`` (their rules: which profiles they may name) and the operator
as ``operator``, who is audited for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.admin.models import LogEntry
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from profiles_app.models import (
    ToolProfile,
    profile_name_validator,
)
from toolhub.lib.errors import Conflict, Forbidden, Invalid, MetaToolRefused, NotFound, Stale
from toolhub.tools import (
    PRESETS,
    registry,
)
from toolhub.tools.approval import POLICIES
from toolhub.tools.intent import MAX_NAMES
from toolhub.tools.layers import META_TOOLS
from toolhub.tools.presets import DEFAULT_PRESET
from toolhub.tools.tool import NAME_PATTERN


def profiles_visible_to(user: Any) -> QuerySet[ToolProfile]:
    """The stored profiles ``user`` may read: their own and the shared ones."""
    return ToolProfile.objects.filter(Q(owner=user) | Q(owner__isnull=True))


def clean_name(name: Any) -> str:
    if not isinstance(name, str):
        raise Invalid("name must be a string", fields={"name": ["must be a string"]})
    cleaned = name.strip()
    if cleaned == DEFAULT_PRESET or cleaned in PRESETS:
        raise Conflict(f"'{cleaned}' is a built-in preset name", fields={"name": ["reserved"]})
    try:
        profile_name_validator(cleaned)
    except ValidationError as exc:
        raise Invalid(f"invalid name {cleaned!r}", fields={"name": exc.messages}) from None
    return cleaned


def clean_tools(tools: Any, field: str = "tools") -> list[str]:
    if not isinstance(tools, list | tuple):
        raise Invalid(f"{field} must be a list of tool names", fields={field: ["not a list"]})
    if len(tools) > MAX_NAMES:
        raise Invalid(f"{field}: at most {MAX_NAMES} names", fields={field: ["too many"]})
    names: dict[str, None] = {}
    for item in tools:
        if not isinstance(item, str) or not NAME_PATTERN.fullmatch(item):
            raise Invalid(f"{field}: {item!r} is not a tool name", fields={field: [str(item)]})
        names[item] = None
    return list(names)


def clean_approvals(approvals: Any, field: str = "approvals") -> dict[str, str]:
    """A person's policies for a profile: tool name -> auto, ask or deny (meta tools have
    none: they are never asked for and never removed)."""
    if not isinstance(approvals, dict):
        raise Invalid(
            f"{field} must map tool names to auto, ask or deny", fields={field: ["not an object"]}
        )
    names = clean_tools(list(approvals), field)
    cleaned: dict[str, str] = {}
    for name in sorted(names):
        policy = approvals[name]
        if policy not in POLICIES:
            raise Invalid(
                f"{field}: {name} must be auto, ask or deny, not {policy!r}",
                fields={field: [name]},
            )
        refuse_meta_tool(name, field, "given an approval policy")
        cleaned[name] = policy
    return cleaned


def clean_mode(mode: Any) -> str:
    if mode not in ToolProfile.Mode.values:
        raise Invalid("mode must be all_except or only", fields={"mode": ["invalid"]})
    return str(mode)


def check_removals(mode: str, tools: Iterable[str]) -> None:
    """An "all except" list names removed tools: a meta tool cannot be one of them."""
    if mode == ToolProfile.Mode.ALL_EXCEPT:
        for tool in tools:
            refuse_meta_tool(tool, "tools", "removed from a profile")


def refuse_meta_tool(tool: str, field: str, what: str) -> None:
    if tool in META_TOOLS:
        raise MetaToolRefused(
            f"{tool} cannot be {what}: it is how the model reaches deferred tools, and "
            "it is only offered when something is deferred",
            fields={field: [tool]},
        )


def check_can_edit(user: Any, profile: ToolProfile) -> None:
    if profile.is_shared and not user.is_staff:
        raise Forbidden("shared profiles are edited by staff")
    if not profile.is_shared and profile.owner_id != user.pk:
        raise NotFound("no such profile")


def check_fresh(profile: ToolProfile, version: int) -> None:
    # The new list is built from ``profile.tools``: it must be the version the write names.
    if profile.version != version:
        raise Stale("profile")


def audit(user: Any, obj: Any, flag: int, message: str) -> None:
    LogEntry.objects.log_actions(user.pk, [obj], flag, change_message=message)


def check_operator(operator: Any) -> None:
    """``operator`` is the staff member making a write for an object's owner in the admin
    (``None`` on the pages and the API, where people write their own)."""
    if operator is not None and not operator.is_staff:
        raise Forbidden("the admin is for staff")


def audit_write(
    *, user: Any, operator: Any, shared: bool, obj: Any, flag: int, message: str
) -> None:
    """The change log entry of a write: a shared object's change by the staff member who
    made it, and every change an operator made in the admin, whosever the object."""
    writer = operator if operator is not None else (user if shared else None)
    if writer is not None:
        audit(writer, obj, flag, message)


def missing_tools(tools: Iterable[str]) -> tuple[str, ...]:
    return tuple(name for name in tools if name not in registry)
