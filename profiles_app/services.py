"""Profiles and global disables: the business rules, one keyword-only function each.

Writes are atomic and versioned: an update names the version it read and is applied with a
conditional UPDATE (``WHERE version = read``), so of two stale writers exactly one wins and
the other gets ``Conflict`` with nothing changed. Every change to a shared profile or a
global disable is written to Django's admin log with its reason. Nothing here ever stores
an expansion of the registry: profiles hold the names a person removed or picked.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Q

from profiles_app.models import (
    DisablesGeneration,
    GlobalDisable,
    NewChatDefault,
    ToolProfile,
    profile_name_validator,
)
from toolhub.errors import Conflict, Forbidden, Invalid, MetaToolRefused, NotFound, Stale
from toolhub.tools import (
    TOOLSETS,
    ProfileSpec,
    ToolContext,
    ToolsetPrice,
    agent_tools,
    availability,
    price,
    registry,
    resolve,
)
from toolhub.tools.intent import MAX_NAMES
from toolhub.tools.layers import META_TOOLS
from toolhub.tools.presets import DEFAULT_TOOLSET, default_tools, toolset_members
from toolhub.tools.resolve import TOOL_SEARCH
from toolhub.tools.tool import NAME_PATTERN

EXPORT_FORMAT = "toolhub.profiles/1"


# --- validation -----------------------------------------------------------------------------


def _clean_name(name: Any) -> str:
    if not isinstance(name, str):
        raise Invalid("name must be a string", fields={"name": ["must be a string"]})
    name = name.strip()
    if name == DEFAULT_TOOLSET or name in TOOLSETS:
        raise Conflict(f"'{name}' is a built-in preset name", fields={"name": ["reserved"]})
    try:
        profile_name_validator(name)
    except ValidationError as exc:
        raise Invalid(f"invalid name {name!r}", fields={"name": exc.messages}) from None
    return name


def _clean_tools(tools: Any, field: str = "tools") -> list[str]:
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


def _clean_mode(mode: Any) -> str:
    if mode not in ToolProfile.Mode.values:
        raise Invalid("mode must be all_except or only", fields={"mode": ["invalid"]})
    return mode


def _check_removals(mode: str, tools: Iterable[str]) -> None:
    """An "all except" list names removed tools: a meta tool cannot be one of them."""
    if mode == ToolProfile.Mode.ALL_EXCEPT:
        for tool in tools:
            _refuse_meta_tool(tool, "tools", "removed from a profile")


# --- access -----------------------------------------------------------------------------------


def profiles_visible_to(user: Any):
    """The stored profiles ``user`` may read: their own and the shared ones."""
    return ToolProfile.objects.filter(Q(owner=user) | Q(owner__isnull=True))


def profile_get_for_user(*, user: Any, profile_id: int) -> ToolProfile:
    profile = profiles_visible_to(user).filter(pk=profile_id).first()
    if profile is None:
        raise NotFound("no such profile")
    return profile


def _check_can_edit(user: Any, profile: ToolProfile) -> None:
    if profile.is_shared and not user.is_staff:
        raise Forbidden("shared profiles are edited by staff")
    if not profile.is_shared and profile.owner_id != user.pk:
        raise NotFound("no such profile")


def _audit(user: Any, obj: Any, flag: int, message: str) -> None:
    LogEntry.objects.log_actions(user.pk, [obj], flag, change_message=message)


# --- profiles -------------------------------------------------------------------------------


def profile_create(
    *,
    user: Any,
    name: str,
    mode: str = ToolProfile.Mode.ALL_EXCEPT,
    tools: Iterable[str] = (),
    shared: bool = False,
) -> ToolProfile:
    """A new profile; by default a copy of ``default`` (all tools, nothing removed)."""
    if shared and not user.is_staff:
        raise Forbidden("shared profiles are created by staff")
    name, mode, tools = _clean_name(name), _clean_mode(mode), _clean_tools(tools)
    _check_removals(mode, tools)
    try:
        with transaction.atomic():
            profile = ToolProfile.objects.create(
                name=name, owner=None if shared else user, mode=mode, tools=tools
            )
            if shared:
                _audit(user, profile, ADDITION, f"created shared profile {name}")
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
) -> ToolProfile:
    """Change the fields given, if ``version`` is still current; else ``Conflict``."""
    _check_can_edit(user, profile)
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = _clean_name(name)
    if mode is not None:
        changes["mode"] = _clean_mode(mode)
    if tools is not None:
        changes["tools"] = _clean_tools(tools)
    if mode is not None or tools is not None:
        _check_removals(changes.get("mode", profile.mode), changes.get("tools", profile.tools))
    try:
        with transaction.atomic():
            updated = ToolProfile.objects.filter(pk=profile.pk, version=version).update(
                **changes, version=F("version") + 1
            )
            if not updated:
                raise Stale("profile")
            profile.refresh_from_db()
            if profile.is_shared:
                _audit(user, profile, CHANGE, f"changed {', '.join(sorted(changes)) or 'nothing'}")
    except IntegrityError:
        raise Conflict("a profile with that name exists", fields={"name": ["taken"]}) from None
    return profile


def _check_fresh(profile: ToolProfile, version: int) -> None:
    # The new list is built from ``profile.tools``: it must be the version the write names.
    if profile.version != version:
        raise Stale("profile")


def profile_rename(*, user: Any, profile: ToolProfile, version: int, name: str) -> ToolProfile:
    return profile_update(user=user, profile=profile, version=version, name=name)


def _profile_tool_set(
    *, user: Any, profile: ToolProfile, version: int, tool: str, offered: bool
) -> ToolProfile:
    """Make ``tool`` offered or not by editing the short list: in ``all_except`` the list
    holds removed names, in ``only`` the picked ones."""
    _check_fresh(profile, version)
    (tool,) = _clean_tools([tool], "tool")
    if not offered:
        _refuse_meta_tool(tool, "tool", "removed from a profile")
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


def profile_delete(*, user: Any, profile: ToolProfile, version: int) -> None:
    _check_can_edit(user, profile)
    with transaction.atomic():
        if profile.is_shared:
            _audit(user, profile, DELETION, f"deleted shared profile {profile.name}")
        deleted, _ = ToolProfile.objects.filter(pk=profile.pk, version=version).delete()
        if not deleted:
            raise Stale("profile")


# --- switching between "all except" and "only" ----------------------------------------------

_MODE_NAMES = {ToolProfile.Mode.ALL_EXCEPT: "all except", ToolProfile.Mode.ONLY: "only"}


def mode_name(mode: str) -> str:
    """A mode as a sentence names it: "all except", "only"."""
    return _MODE_NAMES.get(mode, mode)


def _count(count: int) -> str:
    return f"{count} tool{'' if count == 1 else 's'}" if count else "no tool"


@dataclass(frozen=True, slots=True)
class ModeSwitch:
    """A switch between "all except" and "only", said before it is made and after.

    A switch keeps what the profile offers today, so it rewrites the list against the
    registry: to "only" it pins every tool offered now (a tool added later stays out), to
    "all except" it lists every tool not offered now as removed (a tool added later joins).
    That is the person's choice, so it is said first (``preview``) and said again once made
    (``done``); ``previous_mode`` and ``previous_tools`` are what an undo writes back.
    """

    mode: str
    tools: tuple[str, ...]
    previous_mode: str
    previous_tools: tuple[str, ...]

    @property
    def changes(self) -> bool:
        return self.mode != self.previous_mode

    @property
    def pinned(self) -> int:
        return len(self.tools) if self.changes and self.mode == ToolProfile.Mode.ONLY else 0

    @property
    def removed(self) -> int:
        return len(self.tools) if self.changes and self.mode == ToolProfile.Mode.ALL_EXCEPT else 0

    @property
    def preview(self) -> str:
        """The sentence said before the switch, with its count."""
        if not self.changes:
            return f"It already chooses tools this way ({mode_name(self.mode)}); nothing changes."
        count = _count(len(self.tools))
        count = count[0].upper() + count[1:]
        if self.mode == ToolProfile.Mode.ONLY:
            return f"{count} will be pinned; tools added later will stay out."
        return f"{count} will be listed as removed; tools added later will join."

    @property
    def done(self) -> str:
        """The sentence said once the switch is made."""
        if not self.changes:
            return f"Nothing switched: it already chooses tools this way ({mode_name(self.mode)})."
        what = "pinned" if self.mode == ToolProfile.Mode.ONLY else "listed as removed"
        return f"Switched to {mode_name(self.mode)}: {_count(len(self.tools))} {what}."


@dataclass(frozen=True, slots=True)
class ModeSwitched:
    """A switch made: the profile as it is now (its version is the one an undo names)."""

    profile: ToolProfile
    switch: ModeSwitch


def _switched_list(profile: ToolProfile) -> list[str]:
    # What the profile offers stays the same, so the new list is the complement of the old
    # one over the registry, in registry order. Meta tools are offered whenever something
    # is deferred: never pinned, and never removable.
    listed = set(profile.tools)
    return [
        tool.name
        for tool in registry.all_tools()
        if tool.name not in listed and tool.name not in META_TOOLS
    ]


def profile_mode_switch_preview(
    *, user: Any, profile: ToolProfile, version: int, mode: str
) -> ModeSwitch:
    """What switching ``profile`` to ``mode`` would do, checked as the write checks it (who
    may edit, the version read, the list's limits). Nothing is written."""
    _check_can_edit(user, profile)
    _check_fresh(profile, version)
    mode = _clean_mode(mode)
    previous = tuple(profile.tools)
    if mode == profile.mode:
        return ModeSwitch(mode, previous, profile.mode, previous)
    tools = _clean_tools(_switched_list(profile))
    _check_removals(mode, tools)
    return ModeSwitch(mode, tuple(tools), profile.mode, previous)


def profile_mode_switch(
    *, user: Any, profile: ToolProfile, version: int, mode: str
) -> ModeSwitched:
    """Switch between "all except" and "only" keeping what the profile offers today (see
    ``ModeSwitch``). Switching to the mode it has already writes nothing."""
    switch = profile_mode_switch_preview(user=user, profile=profile, version=version, mode=mode)
    if switch.changes:
        profile = profile_update(
            user=user, profile=profile, version=version, mode=switch.mode, tools=switch.tools
        )
    return ModeSwitched(profile=profile, switch=switch)


def profile_mode_switch_undo(
    *, user: Any, profile: ToolProfile, version: int, mode: str, tools: Iterable[str]
) -> ToolProfile:
    """Put back the mode and list a switch replaced (``ModeSwitch.previous_mode`` and
    ``previous_tools``), exactly. ``version`` is the one the switch left: if anything
    changed the profile since, the undo is ``Stale`` and nothing is written."""
    return profile_update(user=user, profile=profile, version=version, mode=mode, tools=tools)


@dataclass(frozen=True, slots=True)
class ProfileChange:
    """A change of a profile's fields (the API's PATCH), made or previewed: the profile as
    it now is (or would be) and, when its mode changed, the switch."""

    view: ProfileView
    switch: ModeSwitch | None
    applied: bool


def profile_change(
    *,
    user: Any,
    profile: ToolProfile,
    version: int,
    name: str | None = None,
    mode: str | None = None,
    tools: Iterable[str] | None = None,
    preview: bool = False,
) -> ProfileChange:
    """Change the fields given, as ``profile_update`` does, except that a new ``mode`` given
    without ``tools`` is a switch keeping what the profile offers (``profile_mode_switch``).
    With ``preview`` the change is made and checked exactly as for real, inside a savepoint
    that is then rolled back: nothing is stored or audited, and the version stays."""
    before_mode, before_tools = profile.mode, tuple(profile.tools)
    if mode is not None and tools is None and mode != profile.mode:
        tools = profile_mode_switch_preview(
            user=user, profile=profile, version=version, mode=mode
        ).tools
    with transaction.atomic():
        profile = profile_update(
            user=user, profile=profile, version=version, name=name, mode=mode, tools=tools
        )
        if preview:
            transaction.set_rollback(True)
    switch = None
    if profile.mode != before_mode:
        switch = ModeSwitch(profile.mode, tuple(profile.tools), before_mode, before_tools)
    view = ProfileView(
        id=profile.pk,
        name=profile.name,
        source="shared" if profile.is_shared else "user",
        mode=profile.mode,
        tools=tuple(profile.tools),
        missing=_missing(profile.tools),
        readonly=False,
        version=version if preview else profile.version,
    )
    return ProfileChange(view=view, switch=switch, applied=not preview)


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


def _missing(tools: Iterable[str]) -> tuple[str, ...]:
    return tuple(name for name in tools if name not in registry)


def profile_offers(view: ProfileView) -> Callable[[str], bool]:
    """Whether the profile offers a tool, by its own rule (layers and disables apart)."""
    if view.name == DEFAULT_TOOLSET:
        return lambda name: True
    listed = frozenset(view.tools)
    if view.mode == ToolProfile.Mode.ONLY:
        return lambda name: name in listed
    return lambda name: name not in listed


def profile_price(*, user: Any, name: str, agent: Any, ctx: ToolContext) -> ToolsetPrice:
    """What ``agent``'s tool array costs per turn with this toolset picked: the resident
    tools and the deferred catalog, in tokens, exactly as a turn would send them."""
    resolved = resolve(
        intent={"toolset": name},
        agent_intent=agent.tool_intent,
        profile_lookup=profile_lookup_for(user),
        disabled=global_disables(),
        ctx=ctx,
        strategy=agent.strategy,
        context_window_tokens=agent.context_window,
        budget_tokens=agent.tier_budget,
    )
    return price(resolved)


def profiles_for_user(*, user: Any) -> list[ProfileView]:
    """``default``, the presets, the shared profiles, then the user's own."""
    views = [ProfileView(None, DEFAULT_TOOLSET, "builtin", "all_except", (), (), True, None)]
    for name, preset in TOOLSETS.items():
        if preset.everything:
            continue
        members = toolset_members(name, registry)
        tools = tuple(tool.name for tool in registry.all_tools() if tool.name in members)
        views.append(ProfileView(None, name, "preset", "only", tools, (), True, None))
    stored = sorted(
        profiles_visible_to(user), key=lambda profile: (not profile.is_shared, profile.name)
    )
    for profile in stored:
        views.append(
            ProfileView(
                id=profile.pk,
                name=profile.name,
                source="shared" if profile.is_shared else "user",
                mode=profile.mode,
                tools=tuple(profile.tools),
                missing=_missing(profile.tools),
                readonly=profile.is_shared and not user.is_staff,
                version=profile.version,
            )
        )
    return views


def profile_lookup_for(user: Any) -> Callable[[str], ProfileSpec | None]:
    """Resolve a toolset name the way DESIGN.md 4b says: own, then shared, then preset
    (``None`` here lets the runtime fall through to its presets)."""

    def lookup(name: str) -> ProfileSpec | None:
        candidates = ToolProfile.objects.filter(name=name).filter(
            Q(owner=user) | Q(owner__isnull=True)
        )
        chosen = min(candidates, key=lambda profile: profile.is_shared, default=None)
        if chosen is None:
            return None
        return ProfileSpec(chosen.name, chosen.mode, tuple(chosen.tools))

    return lookup


def toolset_check_exists(
    *, user: Any, name: str | None, field: str = "intent", shared: bool = False
) -> None:
    """A toolset named in an intent must be the user's profile, a shared one, or a preset;
    for something shared (an agent everyone uses), only a shared profile or a preset."""
    if name is None or name in TOOLSETS:
        return
    if shared and ToolProfile.objects.filter(name=name, owner__isnull=True).exists():
        return
    if not shared and profile_lookup_for(user)(name) is not None:
        return
    where = "shared profile" if shared else "profile"
    raise Invalid(f"no {where} or preset named '{name}'", fields={field: ["unknown toolset"]})


def profile_export(*, user: Any) -> dict[str, Any]:
    own = ToolProfile.objects.filter(owner=user).order_by("name")
    return {
        "format": EXPORT_FORMAT,
        "profiles": [
            {"name": profile.name, "mode": profile.mode, "tools": list(profile.tools)}
            for profile in own
        ],
    }


@dataclass(frozen=True, slots=True)
class ImportReport:
    created: tuple[str, ...]
    unknown_tools: dict[str, list[str]]
    # Names of the file that were not imported as they stood, and what became of them.
    mapped: dict[str, str]
    # What functions_meta.json's ``active`` did ("" when the file has none).
    active: str = ""


def _import_entries(data: Any, user: Any) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The entries to create, and what was mapped how (``functions_meta.json`` only)."""
    if not isinstance(data, Mapping) or "profiles" not in data:
        raise Invalid("expected an object with 'profiles'", fields={"profiles": ["missing"]})
    profiles = data["profiles"]
    if isinstance(profiles, Mapping):
        own = ToolProfile.objects.filter(owner=user).values_list("name", flat=True)
        return _functions_meta_entries(profiles, taken=set(own))
    if isinstance(profiles, list) and all(isinstance(item, Mapping) for item in profiles):
        return [dict(item) for item in profiles], {}
    raise Invalid("'profiles' must be a list of profiles or an object of name: tools")


def _functions_meta_entries(
    profiles: Mapping[Any, Any], *, taken: set[str]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """functions_meta.json, ``{"profiles": {name: [tools]}, "active": name}``: picked lists,
    read as a person meant them. ``default`` is toolhub's own default (every exposed tool),
    so it is not copied; a list naming every exposed tool means "all tools" (tools added
    later reach it), not a frozen pick; a name a preset has is imported as a copy, under
    the first name free among ``taken`` (the person's profiles) and the file's."""
    everything = {name for name in default_tools(registry) if name not in META_TOOLS}
    taken = taken | {DEFAULT_TOOLSET, *TOOLSETS, *(str(name) for name in profiles)}
    entries, mapped = [], {}
    for name, tools in profiles.items():
        if name == DEFAULT_TOOLSET:
            mapped[name] = "is toolhub's built-in default (every exposed tool); not copied"
            continue
        entry = {"name": name, "source": name, "mode": ToolProfile.Mode.ONLY, "tools": tools}
        if name in TOOLSETS:
            entry["name"] = _free_name(f"{name} copy", taken)
            taken.add(entry["name"])
            mapped[name] = f"imported as '{entry['name']}': a built-in preset has that name"
        # Only a well-formed list is compared; _clean_tools refuses any other.
        names = tools if isinstance(tools, list) else []
        if everything and all(isinstance(t, str) for t in names) and everything <= set(names):
            entry.update(mode=ToolProfile.Mode.ALL_EXCEPT, tools=[])
            how = "names every tool here, so it is all tools (tools added later reach it)"
            mapped[name] = f"{mapped[name]}; it {how}" if name in mapped else how
        entries.append(entry)
    return entries, mapped


def _free_name(base: str, taken: set[str]) -> str:
    candidates = (base, *(f"{base} {n}" for n in range(2, 100)))
    return next(name for name in candidates if name not in taken)


def profile_import(*, user: Any, data: Any) -> ImportReport:
    """Create every profile in ``data`` or none: a clash or an invalid entry stops it all.
    Tool names the registry does not know are kept (they show as missing) and reported."""
    entries, mapped = _import_entries(data, user)
    if not isinstance(data.get("active", ""), str):
        raise Invalid("active must be a profile's name", fields={"active": ["not text"]})
    active = ""
    if len(entries) > MAX_NAMES:
        raise Invalid(f"at most {MAX_NAMES} profiles per import")
    cleaned = [
        (
            _clean_name(entry.get("name")),
            _clean_mode(entry.get("mode", "all_except")),
            _clean_tools(entry.get("tools", [])),
        )
        for entry in entries
    ]
    for _, mode, tools in cleaned:
        _check_removals(mode, tools)
    names = [name for name, _, _ in cleaned]
    clashes = sorted(
        {name for name in names if names.count(name) > 1}
        | set(ToolProfile.objects.filter(owner=user, name__in=names).values_list("name", flat=True))
    )
    if clashes:
        raise Conflict(
            f"profiles already named: {', '.join(clashes)}; nothing was imported",
            fields={"profiles": clashes},
        )
    try:
        with transaction.atomic():
            ToolProfile.objects.bulk_create(
                ToolProfile(name=name, owner=user, mode=mode, tools=tools)
                for name, mode, tools in cleaned
            )
            if "active" in data:
                sources = [entry.get("source", entry.get("name")) for entry in entries]
                imported = dict(zip(sources, names, strict=True))
                active = _import_active(user, data["active"], imported)
    except IntegrityError:
        raise Conflict("a profile with one of these names was just created") from None
    unknown = {name: list(_missing(tools)) for name, _, tools in cleaned if _missing(tools)}
    return ImportReport(created=tuple(names), unknown_tools=unknown, mapped=mapped, active=active)


def _import_active(user: Any, active: str, imported: dict[Any, str]) -> str:
    """The file's ``active`` profile (functions_meta.json has one) becomes what new chats
    start with."""
    if active == DEFAULT_TOOLSET:
        new_chat_default_set(user=user, toolset="")
        return "'default' is now what your new chats start with"
    if active not in imported:
        return f"'active' names {active!r}, not a profile of the file; nothing changed"
    new_chat_default_set(user=user, toolset=imported[active])
    return f"'{imported[active]}' is now what your new chats start with"


# --- what new chats start with ----------------------------------------------------------


def new_chat_toolset(*, user: Any) -> str:
    """The toolset ``user``'s new chats start with; "" for the built-in default."""
    row = NewChatDefault.objects.select_related("profile").filter(user=user).first()
    return row.toolset if row is not None else ""


def new_chat_default_set(*, user: Any, toolset: Any) -> str:
    """Make ``toolset`` what ``user``'s new chats start with: one of their profiles, a
    shared one or a preset, resolved as a chat resolves it (own first); "" or ``default``
    for the built-in default. Returns the name stored ("" for the default)."""
    if not isinstance(toolset, str):
        raise Invalid("toolset must be a name", fields={"toolset": ["not text"]})
    name = toolset.strip()
    profile, preset = None, ""
    if name and name != DEFAULT_TOOLSET:
        # Own before shared, as a chat resolves a name (DESIGN.md 4b).
        profile = (
            profiles_visible_to(user)
            .filter(name=name)
            .order_by(F("owner").asc(nulls_last=True))
            .first()
        )
        if profile is None and name not in TOOLSETS:
            raise Invalid(
                f"no profile or preset named '{name}'", fields={"toolset": ["unknown toolset"]}
            )
        preset = "" if profile is not None else name
    else:
        name = ""
    NewChatDefault.objects.update_or_create(
        user=user, defaults={"profile": profile, "preset": preset}
    )
    return name


# --- the catalog -------------------------------------------------------------------------


def tool_catalog(*, ctx: ToolContext) -> list[dict[str, Any]]:
    """Every exposed tool with its presets, and for this person whether it is available
    and if not, the layer and why; then tools that never registered (layer 1) and plugin
    modules that failed to load, so a person sees why something they expect is missing."""
    disabled = global_disables()
    selection = agent_tools(ctx=ctx, disabled=disabled)
    hidden = {item.name: item for item in selection.hidden}
    # A turn offers tool_search whenever it defers something, and no veto applies to it:
    # its layer-4 gate only says that no turn's index exists here.
    hidden.pop(TOOL_SEARCH, None)
    members = {
        name: toolset_members(name, registry)
        for name, preset in TOOLSETS.items()
        if not preset.everything
    }
    catalog = [
        {
            "name": tool.name,
            "label": tool.label,
            "description": tool.description,
            "presets": [name for name, names in members.items() if tool.name in names],
            "deferred": tool.defer,
            "runs_on": tool.runs_on,
            "source": tool.source,
            "available": tool.name not in hidden,
            "layer": hidden[tool.name].layer if tool.name in hidden else None,
            "reason": hidden[tool.name].reason if tool.name in hidden else None,
        }
        for tool in registry.all_tools()
        if tool.expose
    ]
    missing = [(skip.name, f"not registered: {skip.reason}") for skip in registry.skipped]
    missing += [
        (module, f"plugin failed to load: {error}")
        for module, error in registry.load_errors.items()
    ]
    catalog += [
        {
            "name": name,
            "label": name,
            "description": "",
            "presets": [],
            "deferred": False,
            "runs_on": "inline",
            "source": "plugin",
            "available": False,
            "layer": "L1",
            "reason": reason,
        }
        for name, reason in missing
    ]
    return catalog


# --- global disables --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _DisablesCopy:
    token: int
    disables: dict[str, str]


# This process's copy of the disables and the generation token it was read under. Readers
# swap the whole object, so a thread sees an old copy or a new one, never half of each.
_copy: _DisablesCopy | None = None


def global_disables() -> dict[str, str]:
    """Globally disabled tool -> the reason a person reads, as committed at the moment of
    the call: a disable whose transaction committed before this call is always in it.

    The generation token is read first, then the rows. A change that commits between the
    two reads makes the rows newer than the token they are kept under, so the next call
    reloads them; the other order could keep old rows under a new token for good."""
    global _copy
    token = DisablesGeneration.objects.filter(pk=1).values_list("token", flat=True).first()
    copy = _copy
    if copy is not None and token is not None and copy.token == token:
        return copy.disables
    rows = GlobalDisable.objects.select_related("created_by").order_by("tool")
    disables = {row.tool: row.explanation for row in rows}
    if token is not None:
        _copy = _DisablesCopy(token, disables)
    return disables


def _bump_disables_generation() -> None:
    """Mark the disables changed, inside the caller's transaction (it commits with it)."""
    token = secrets.randbits(62)
    if not DisablesGeneration.objects.filter(pk=1).update(token=token):
        DisablesGeneration.objects.update_or_create(pk=1, defaults={"token": token})


def _refuse_meta_tool(tool: str, field: str, what: str) -> None:
    if tool in META_TOOLS:
        raise MetaToolRefused(
            f"{tool} cannot be {what}: it is how the model reaches deferred tools, and "
            "it is only offered when something is deferred",
            fields={field: [tool]},
        )


def tool_disable_globally(*, user: Any, tool: str, reason: str) -> GlobalDisable:
    if not user.is_staff:
        raise Forbidden("global disables are managed by staff")
    (tool,) = _clean_tools([tool], "tool")
    _refuse_meta_tool(tool, "tool", "disabled")
    if not isinstance(reason, str):
        raise Invalid("reason must be text", fields={"reason": ["not text"]})
    reason = reason.strip()
    if not reason:
        raise Invalid("say why the tool is disabled", fields={"reason": ["required"]})
    if len(reason) > 500:
        raise Invalid("reason: at most 500 characters", fields={"reason": ["too long"]})
    try:
        with transaction.atomic():
            disable = GlobalDisable.objects.create(tool=tool, reason=reason, created_by=user)
            _audit(user, disable, ADDITION, f"disabled {tool} for everybody: {reason}")
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


def tools_for_ops() -> tuple[list[OpsTool], list[GlobalDisable]]:
    """Every registered tool with its global state, and the disables that name a tool no
    longer registered (still enforced, so still listed). Two queries at most."""
    disables = {row.tool: row for row in GlobalDisable.objects.select_related("created_by")}
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
        )
        for tool in sorted(registry.all_tools(), key=lambda tool: tool.name)
    ]
    return tools, sorted(disables.values(), key=lambda row: row.tool)


def global_disable_audit(*, limit: int = 50) -> list[LogEntry]:
    """The newest changes to global disables: who, when, and the reason given."""
    kind = ContentType.objects.get_for_model(GlobalDisable)
    return list(
        LogEntry.objects.filter(content_type=kind)
        .select_related("user")
        .order_by("-action_time", "-id")[:limit]
    )


def tool_enable_globally(*, user: Any, tool: str, reason: str = "") -> None:
    if not user.is_staff:
        raise Forbidden("global disables are managed by staff")
    with transaction.atomic():
        disable = GlobalDisable.objects.select_for_update().filter(tool=tool).first()
        if disable is None:
            raise NotFound(f"{tool} is not disabled")
        message = f"enabled {tool} again" + (f": {reason.strip()}" if reason.strip() else "")
        _audit(user, disable, DELETION, message)
        disable.delete()
        _bump_disables_generation()
