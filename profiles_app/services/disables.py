"""Global disables and approval policies: an operator turns a tool off for everybody (their
``deny``), or sets whether it asks before it runs (``auto`` / ``ask``), with a reason, in
the admin log.

A disable vetoes execution at once and leaves every array at the next turn boundary; a
policy holds from the next call. Each process keeps a copy of both under a generation
token bumped in the writer's transaction, so a reader never keeps rows older than a
committed change.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, transaction

from profiles_app.models import (
    DisablesGeneration,
    GlobalDisable,
    ToolApprovalPolicy,
)
from profiles_app.services.rules import audit, clean_tools, refuse_meta_tool
from toolhub.lib.catalog_news import catalog_changed
from toolhub.lib.errors import Conflict, Forbidden, Invalid, NotFound
from toolhub.lib.rows import CompiledQuery, compiled_once
from toolhub.tools import (
    ToolContext,
    availability,
    registry,
)
from toolhub.tools.approval import OPERATOR_POLICIES, OperatorPolicy
from toolhub.tools.layers import META_TOOLS

# --- global disables --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _DisablesCopy:
    token: int
    disables: dict[str, str]
    policies: dict[str, OperatorPolicy]


# This process's copy of the disables and policies, and the generation token it was read
# under. Readers swap the whole object, so a thread sees an old copy or a new one, never
# half of each.
_copy: _DisablesCopy | None = None
# ``token``'s default: read it now.
_READ: Any = object()


def _operator_rules(token: int | None = _READ) -> _DisablesCopy:
    """The disables and policies as committed at the moment of the call: a change whose
    transaction committed before this call is always in them.

    The generation token is read first, then the rows. A change that commits between the
    two reads makes the rows newer than the token they are kept under, so the next call
    reloads them; the other order could keep old rows under a new token for good. A
    caller that read the token itself, in its own transaction, passes it (a turn's claim
    returns it: ``agent_app.turns.claim``); the copy is then checked with no statement."""
    global _copy
    if token is _READ:
        found = _token_query().rows()
        token = found[0][0] if found else None
    copy = _copy
    if copy is not None and token is not None and copy.token == token:
        return copy
    rows = GlobalDisable.objects.select_related("created_by").order_by("tool")
    disables = {row.tool: row.explanation for row in rows}
    policies = {
        row.tool: OperatorPolicy(row.policy, row.reason)
        for row in ToolApprovalPolicy.objects.only("tool", "policy", "reason").order_by("tool")
    }
    fresh = _DisablesCopy(token or 0, disables, policies)
    if token is not None:
        _copy = fresh
    return fresh


@functools.cache
def _token_query() -> CompiledQuery:
    # Read by every resolution outside a turn (the inspector, the pages): compiled once,
    # not per call (toolhub.lib.rows). The rows it guards are still read only on a change.
    return compiled_once(
        DisablesGeneration.objects.filter(pk=1).values_list("token").order_by("pk")[:1]
    )


def global_disables(*, token: int | None = _READ) -> dict[str, str]:
    """Globally disabled tool -> the reason a person reads, as committed now (or when
    ``token``, the generation token, was read)."""
    return _operator_rules(token).disables


def operator_policies() -> dict[str, OperatorPolicy]:
    """Tool -> the operator's ``auto`` or ``ask`` for everybody, as committed now."""
    return _operator_rules().policies


def _bump_disables_generation() -> None:
    """Mark the disables changed, inside the caller's transaction (it commits with it)."""
    catalog_changed()
    token = secrets.randbits(62)
    if not DisablesGeneration.objects.filter(pk=1).update(token=token):
        DisablesGeneration.objects.update_or_create(pk=1, defaults={"token": token})


def tool_disable_globally(*, user: Any, tool: str, reason: str) -> GlobalDisable:
    if not user.is_staff:
        raise Forbidden("global disables are managed by staff")
    (tool,) = clean_tools([tool], "tool")
    refuse_meta_tool(tool, "tool", "disabled")
    reason = _clean_reason(reason, "say why the tool is disabled")
    try:
        with transaction.atomic():
            disable = GlobalDisable.objects.create(tool=tool, reason=reason, created_by=user)
            audit(user, disable, ADDITION, f"disabled {tool} for everybody: {reason}")
            _bump_disables_generation()
    except IntegrityError:
        raise Conflict(f"{tool} is already disabled", fields={"tool": ["disabled"]}) from None
    return disable


@dataclass(frozen=True)
class OpsTool:
    """A registered tool as the ops page shows it, with its global disable if any."""

    name: str
    label: str
    summary: str
    source: str
    runs_on: str
    deferred: bool
    disable: GlobalDisable | None
    # Why the tool cannot run in this process now (an MCP server disconnected, a missing
    # key); None when it can.
    unavailable: str | None = None
    # A meta tool (tool_search) cannot be disabled, so the page offers no switch for it.
    meta: bool = False
    # Whether it asks first for everybody: auto, ask or rule (some arguments), and whether
    # that is the operator's policy or its author's.
    approval: str = "auto"
    approval_by: str = "author"


def tools_for_ops() -> tuple[list[OpsTool], list[GlobalDisable]]:
    """Every registered tool with its global state, and the disables that name a tool no
    longer registered (still enforced, so still listed). Three queries at most."""
    disables = {row.tool: row for row in GlobalDisable.objects.select_related("created_by")}
    # Read here rather than through the process's copy: the page's cost stays the same
    # whether or not a change just made that copy stale.
    policies = {
        row.tool: OperatorPolicy(row.policy, row.reason)
        for row in ToolApprovalPolicy.objects.only("tool", "policy", "reason")
    }
    tools = [
        OpsTool(
            name=tool.name,
            label=tool.label,
            summary=tool.first_line,
            source=tool.source,
            runs_on=tool.runs_on,
            deferred=tool.defer,
            disable=disables.pop(tool.name, None),
            unavailable=availability(tool, ToolContext(), per_session=False),
            meta=tool.name in META_TOOLS,
            **approval_for_everybody(tool, policies),
        )
        for tool in sorted(registry.all_tools(), key=lambda tool: tool.name)
    ]
    return tools, sorted(disables.values(), key=lambda row: row.tool)


def global_disable_rows() -> list[GlobalDisable]:
    """Every global disable, with who made it, by tool name."""
    return list(GlobalDisable.objects.select_related("created_by").order_by("tool"))


def approval_for_everybody(tool: Any, policies: dict[str, OperatorPolicy]) -> dict[str, str]:
    """Whether ``tool`` asks first for everybody, before any profile: the operator's policy,
    else its author's (``rule``: it asks for some arguments only)."""
    if tool.name in policies:
        return {"approval": policies[tool.name].policy, "approval_by": "operator"}
    rule = tool.requires_approval
    approval = "rule" if callable(rule) else ("ask" if rule else "auto")
    return {"approval": approval, "approval_by": "author"}


def global_disable_audit(*, limit: int = 50) -> list[LogEntry]:
    """The newest changes to global disables and approval policies: who, when, and the
    reason given."""
    kinds = ContentType.objects.get_for_models(GlobalDisable, ToolApprovalPolicy).values()
    return list(
        LogEntry.objects.filter(content_type__in=kinds)
        .select_related("user")
        .order_by("-action_time", "-id")[:limit]
    )


_ACTIONS = {ADDITION: "added", CHANGE: "changed", DELETION: "deleted"}


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One change in the admin log, as the audit API shows it."""

    time: str
    user: str
    object: str
    type: str
    action: str
    message: str


def audit_entries(*, limit: int = 200) -> list[AuditEntry]:
    """The newest changes of every kind (profiles, agents, disables, MCP servers)."""
    entries = LogEntry.objects.select_related("user", "content_type").order_by(
        "-action_time", "-id"
    )[:limit]
    return [
        AuditEntry(
            time=entry.action_time.isoformat(),
            user=entry.user.get_username(),
            object=entry.object_repr,
            type=entry.content_type.model if entry.content_type else "",
            action=_ACTIONS.get(entry.action_flag, "changed"),
            message=entry.get_change_message(),
        )
        for entry in entries
    ]


def _clean_reason(reason: Any, why: str) -> str:
    if not isinstance(reason, str):
        raise Invalid("reason must be text", fields={"reason": ["not text"]})
    reason = reason.strip()
    if not reason:
        raise Invalid(why, fields={"reason": ["required"]})
    if "\x00" in reason:
        raise Invalid("reason: no NUL characters", fields={"reason": ["NUL"]})
    if len(reason) > 500:
        raise Invalid("reason: at most 500 characters", fields={"reason": ["too long"]})
    return str(reason)


def tool_policy_set(*, user: Any, tool: str, policy: str, reason: str) -> ToolApprovalPolicy:
    """An operator's ``auto`` or ``ask`` for ``tool``, for everybody (``deny`` is a global
    disable: ``tool_disable_globally``)."""
    if not user.is_staff:
        raise Forbidden("approval policies for everybody are set by staff")
    (tool,) = clean_tools([tool], "tool")
    refuse_meta_tool(tool, "tool", "given an approval policy")
    if policy not in OPERATOR_POLICIES:
        raise Invalid(
            "policy is auto or ask (deny is a global disable)", fields={"policy": [str(policy)]}
        )
    reason = _clean_reason(reason, "say why this policy holds for everybody")
    try:
        with transaction.atomic():
            row, created = ToolApprovalPolicy.objects.update_or_create(
                tool=tool, defaults={"policy": policy, "reason": reason, "created_by": user}
            )
            words = "run without asking" if policy == "auto" else "ask every time"
            audit(user, row, ADDITION if created else CHANGE, f"{tool} set to {words}: {reason}")
            _bump_disables_generation()
    except IntegrityError:
        # Two operators set the first policy of one tool at the same moment.
        raise Conflict(f"{tool}'s policy was just set by someone else; look again") from None
    return row


def tool_policy_clear(*, user: Any, tool: str) -> None:
    """Back to the tool author's default for ``tool``."""
    if not user.is_staff:
        raise Forbidden("approval policies for everybody are set by staff")
    with transaction.atomic():
        row = ToolApprovalPolicy.objects.select_for_update().filter(tool=tool).first()
        if row is None:
            raise NotFound(f"{tool} has no approval policy for everybody")
        audit(user, row, DELETION, f"{tool} back to its author's default")
        row.delete()
        _bump_disables_generation()


def tool_policy_rows() -> list[ToolApprovalPolicy]:
    return list(ToolApprovalPolicy.objects.select_related("created_by").order_by("tool"))


def tool_enable_globally(*, user: Any, tool: str, reason: str = "") -> None:
    if not user.is_staff:
        raise Forbidden("global disables are managed by staff")
    with transaction.atomic():
        disable = GlobalDisable.objects.select_for_update().filter(tool=tool).first()
        if disable is None:
            raise NotFound(f"{tool} is not disabled")
        message = f"enabled {tool} again" + (f": {reason.strip()}" if reason.strip() else "")
        audit(user, disable, DELETION, message)
        disable.delete()
        _bump_disables_generation()
