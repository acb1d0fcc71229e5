"""Tool profiles: validation, who may read and edit them, their writes, and how a name
resolves (own, then shared, then a preset; docs/architecture.md, "Glossary").

Writes are atomic and versioned: an update names the version it read and is applied with a
conditional UPDATE (``WHERE version = read``), so of two stale writers exactly one wins and
the other gets ``Stale`` with nothing changed. Every change to a shared profile is written
to Django's admin log. Profiles hold the names a person removed or picked, never an
expansion of the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION
from django.db import IntegrityError, transaction
from django.db.models import Q

from profiles_app.models import (
    ToolProfile,
)
from profiles_app.services.disables import global_disables
from profiles_app.services.rules import (
    audit_write,
    check_can_edit,
    check_fresh,
    check_operator,
    check_removals,
    clean_approvals,
    clean_mode,
    clean_name,
    clean_tools,
    missing_tools,
    profiles_visible_to,
    refuse_meta_tool,
)
from toolhub.lib.errors import Conflict, Forbidden, Invalid, NotFound
from toolhub.lib.model_windows import DEFAULT_WINDOW
from toolhub.lib.versioned import versioned_delete, versioned_update
from toolhub.tools import (
    PRESETS,
    ProfileSpec,
    TokenCost,
    ToolContext,
    registry,
    resolve,
    token_cost,
)
from toolhub.tools.presets import DEFAULT_PRESET, toolset_members

# --- validation -----------------------------------------------------------------------------


# --- access -----------------------------------------------------------------------------------


def profile_get_for_user(*, user: Any, profile_id: int) -> ToolProfile:
    profile = profiles_visible_to(user).filter(pk=profile_id).first()
    if profile is None:
        raise NotFound("no such profile")
    return profile


# --- profiles -------------------------------------------------------------------------------


def profile_create(
    *,
    user: Any,
    name: str,
    mode: str = ToolProfile.Mode.ALL_EXCEPT,
    tools: Iterable[str] = (),
    approvals: Any = None,
    shared: bool = False,
    operator: Any = None,
) -> ToolProfile:
    """A new profile; by default a copy of ``default`` (all tools, nothing removed), with
    no approval policy of its own."""
    check_operator(operator)
    if shared and not user.is_staff:
        raise Forbidden("shared profiles are created by staff")
    name, mode, tools = clean_name(name), clean_mode(mode), clean_tools(tools)
    approvals = clean_approvals(approvals if approvals is not None else {})
    check_removals(mode, tools)
    try:
        with transaction.atomic():
            profile = ToolProfile.objects.create(
                name=name,
                owner=None if shared else user,
                mode=mode,
                tools=tools,
                approvals=approvals,
            )
            audit_write(
                user=user,
                operator=operator,
                shared=shared,
                obj=profile,
                flag=ADDITION,
                message=f"created {'shared ' if shared else ''}profile {name}",
            )
    except IntegrityError:
        raise Conflict(f"a profile named '{name}' exists", fields={"name": ["taken"]}) from None
    return profile


def profile_update(
    *,
    user: Any,
    profile: ToolProfile,
    version: int,
    name: str | None = None,
    mode: str | None = None,
    tools: Iterable[str] | None = None,
    approvals: dict[str, str] | None = None,
    operator: Any = None,
) -> ToolProfile:
    """Change the fields given, if ``version`` is still current; else ``Conflict``."""
    check_operator(operator)
    check_can_edit(user, profile)
    changes: dict[str, Any] = {}
    if approvals is not None:
        changes["approvals"] = clean_approvals(approvals)
    if name is not None:
        changes["name"] = clean_name(name)
    if mode is not None:
        changes["mode"] = clean_mode(mode)
    if tools is not None:
        changes["tools"] = clean_tools(tools)
    if mode is not None or tools is not None:
        check_removals(changes.get("mode", profile.mode), changes.get("tools", profile.tools))
    try:
        with transaction.atomic():
            versioned_update(
                ToolProfile.objects, pk=profile.pk, version=version, what="profile", **changes
            )
            profile.refresh_from_db()
            audit_write(
                user=user,
                operator=operator,
                shared=profile.is_shared,
                obj=profile,
                flag=CHANGE,
                message=f"changed {', '.join(sorted(changes)) or 'nothing'}",
            )
    except IntegrityError:
        raise Conflict("a profile with that name exists", fields={"name": ["taken"]}) from None
    return profile


def profile_rename(*, user: Any, profile: ToolProfile, version: int, name: str) -> ToolProfile:
    return profile_update(user=user, profile=profile, version=version, name=name)


def _profile_tool_set(
    *, user: Any, profile: ToolProfile, version: int, tool: str, offered: bool
) -> ToolProfile:
    """Make ``tool`` offered or not by editing the short list: in ``all_except`` the list
    holds removed names, in ``only`` the picked ones."""
    check_fresh(profile, version)
    (tool,) = clean_tools([tool], "tool")
    if not offered:
        refuse_meta_tool(tool, "tool", "removed from a profile")
    listed = offered == (profile.mode == ToolProfile.Mode.ONLY)
    if listed:
        tools = list(profile.tools) if tool in profile.tools else [*profile.tools, tool]
    else:
        tools = [name for name in profile.tools if name != tool]
    return profile_update(user=user, profile=profile, version=version, tools=tools)


def profile_tool_remove(*, user: Any, profile: ToolProfile, version: int, tool: str) -> ToolProfile:
    """Take ``tool`` out of what the profile offers."""
    return _profile_tool_set(user=user, profile=profile, version=version, tool=tool, offered=False)


def profile_tool_add(*, user: Any, profile: ToolProfile, version: int, tool: str) -> ToolProfile:
    """Put ``tool`` back into what the profile offers."""
    return _profile_tool_set(user=user, profile=profile, version=version, tool=tool, offered=True)


def profile_tool_policy(
    *, user: Any, profile: ToolProfile, version: int, tool: str, policy: str
) -> ToolProfile:
    """Set the profile's ``auto``, ``ask`` or ``deny`` for ``tool``; ``""`` goes back to
    what the operator or the tool's author says (toolhub.tools.approval)."""
    check_fresh(profile, version)
    (tool,) = clean_tools([tool], "tool")
    approvals = {name: value for name, value in profile.approvals.items() if name != tool}
    if policy:
        approvals[tool] = policy
    return profile_update(user=user, profile=profile, version=version, approvals=approvals)


def profile_delete(*, user: Any, profile: ToolProfile, version: int, operator: Any = None) -> None:
    check_operator(operator)
    check_can_edit(user, profile)
    with transaction.atomic():
        audit_write(
            user=user,
            operator=operator,
            shared=profile.is_shared,
            obj=profile,
            flag=DELETION,
            message=f"deleted {'shared ' if profile.is_shared else ''}profile {profile.name}",
        )
        versioned_delete(ToolProfile.objects, pk=profile.pk, version=version, what="profile")


@dataclass(frozen=True, slots=True)
class ProfileView:
    """A profile as the catalog shows it: stored, shared, a preset or ``default``."""

    id: int | None
    name: str
    source: str
    mode: str
    tools: tuple[str, ...]
    missing: tuple[str, ...]
    readonly: bool
    version: int | None
    approvals: tuple[tuple[str, str], ...] = ()


def profile_offers(view: ProfileView) -> Callable[[str], bool]:
    """Whether the profile offers a tool, by its own rule (layers and disables apart)."""
    if view.name == DEFAULT_PRESET:
        return lambda name: True
    listed = frozenset(view.tools)
    if view.mode == ToolProfile.Mode.ONLY:
        return lambda name: name in listed
    return lambda name: name not in listed


def profile_token_cost(*, user: Any, name: str, agent: Any, ctx: ToolContext) -> TokenCost:
    """What ``agent``'s tool array costs per turn with this toolset picked: the resident
    tools and the deferred catalog, in tokens, exactly as a turn would send them."""
    resolved = resolve(
        intent={"toolset": name},
        agent_intent=agent.tool_intent,
        profile_lookup=profile_lookup_for(user),
        disabled=global_disables(),
        ctx=ctx,
        strategy=agent.strategy,
        # The agent's own figure: the Programs page prices a profile without asking any
        # model's server (the turn and the Agents page use the reported window).
        context_window_tokens=agent.context_window or DEFAULT_WINDOW,
        budget_tokens=agent.tier_budget,
    )
    return token_cost(resolved)


def profiles_for_user(*, user: Any) -> list[ProfileView]:
    """``default``, the presets, the shared profiles, then the user's own (each by name).

    The stored ones are read as rows, not model instances: the list is the API's busiest
    read, and a model per profile (init signals, field descriptors) cost more than the
    query (docs/architecture.md, "Request path")."""
    views = [ProfileView(None, DEFAULT_PRESET, "builtin", "all_except", (), (), True, None)]
    for name, preset in PRESETS.items():
        if preset.everything:
            continue
        members = toolset_members(name, registry)
        tools = tuple(tool.name for tool in registry.all_tools() if tool.name in members)
        views.append(ProfileView(None, name, "preset", "only", tools, (), True, None))
    rows = profiles_visible_to(user).values_list(
        "pk", "name", "owner_id", "mode", "tools", "version", "approvals"
    )
    staff = bool(user.is_staff)
    for pk, name, owner_id, mode, tools, version, approvals in sorted(
        rows, key=lambda row: (row[2] is not None, row[1])
    ):
        shared = owner_id is None
        views.append(
            ProfileView(
                id=pk,
                name=name,
                source="shared" if shared else "user",
                mode=mode,
                tools=tuple(tools),
                missing=missing_tools(tools),
                readonly=shared and not staff,
                version=version,
                approvals=approval_pairs(approvals),
            )
        )
    return views


def profile_lookup_preloaded(user: Any) -> Callable[[str], ProfileSpec | None]:
    """``profile_lookup_for`` with every profile the person can use read in one query,
    for a page that resolves many toolsets at once (the composer's Profile select)."""
    chosen: dict[str, ToolProfile] = {}
    for profile in ToolProfile.objects.filter(Q(owner=user) | Q(owner__isnull=True)):
        known = chosen.get(profile.name)
        # Own before shared, as profile_lookup_for picks.
        if known is None or (known.is_shared and not profile.is_shared):
            chosen[profile.name] = profile
    specs = {name: profile_spec(profile) for name, profile in chosen.items()}
    return specs.get


def profile_spec(profile: ToolProfile) -> ProfileSpec:
    """A stored profile as the runtime reads it (policies in name order: a frozen value)."""
    return ProfileSpec(
        profile.name, profile.mode, tuple(profile.tools), approval_pairs(profile.approvals)
    )


def approval_pairs(approvals: Any) -> tuple[tuple[str, str], ...]:
    """A profile's stored policies as (tool, policy) pairs in name order: a frozen value."""
    if not isinstance(approvals, dict):
        return ()
    return tuple(sorted((str(name), str(policy)) for name, policy in approvals.items()))


def profile_lookup_for(user: Any) -> Callable[[str], ProfileSpec | None]:
    """Resolve a toolset name as a chat does: own, then shared, then preset
    (``None`` here lets the runtime fall through to its presets)."""

    def lookup(name: str) -> ProfileSpec | None:
        candidates = ToolProfile.objects.filter(name=name).filter(
            Q(owner=user) | Q(owner__isnull=True)
        )
        chosen = min(candidates, key=lambda profile: profile.is_shared, default=None)
        if chosen is None:
            return None
        return profile_spec(chosen)

    return lookup


def toolset_check_exists(
    *, user: Any, name: str | None, field: str = "intent", shared: bool = False
) -> None:
    """A toolset named in an intent must be the user's profile, a shared one, or a preset;
    for something shared (an agent everyone uses), only a shared profile or a preset."""
    if name is None or name in PRESETS:
        return
    if shared and ToolProfile.objects.filter(name=name, owner__isnull=True).exists():
        return
    if not shared and profile_lookup_for(user)(name) is not None:
        return
    where = "shared profile" if shared else "profile"
    raise Invalid(f"no {where} or preset named '{name}'", fields={field: ["unknown toolset"]})
