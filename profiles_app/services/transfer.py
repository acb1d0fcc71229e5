"""Profiles out and in as JSON (toolhub's own format and functions_meta.json's), and what
a person's new chats start with.

An import never overwrites: a taken name gets a free one, and the report says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F

from profiles_app.models import (
    NewChatDefault,
    ToolProfile,
)
from profiles_app.services.rules import (
    check_removals,
    clean_approvals,
    clean_mode,
    clean_name,
    clean_tools,
    missing_tools,
    profiles_visible_to,
)
from toolhub.lib.errors import Conflict, Invalid
from toolhub.tools import (
    PRESETS,
    registry,
)
from toolhub.tools.intent import MAX_NAMES
from toolhub.tools.layers import META_TOOLS
from toolhub.tools.presets import DEFAULT_PRESET, default_tools

EXPORT_FORMAT = "toolhub.profiles/1"


def profile_export(*, user: Any) -> dict[str, Any]:
    own = ToolProfile.objects.filter(owner=user).order_by("name")
    return {
        "format": EXPORT_FORMAT,
        "profiles": [
            {
                "name": profile.name,
                "mode": profile.mode,
                "tools": list(profile.tools),
                "approvals": dict(profile.approvals),
            }
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
    taken = taken | {DEFAULT_PRESET, *PRESETS, *(str(name) for name in profiles)}
    entries, mapped = [], {}
    for name, tools in profiles.items():
        if name == DEFAULT_PRESET:
            mapped[name] = "is toolhub's built-in default (every exposed tool); not copied"
            continue
        entry = {"name": name, "source": name, "mode": ToolProfile.Mode.ONLY, "tools": tools}
        if name in PRESETS:
            entry["name"] = _free_name(f"{name} copy", taken)
            taken.add(entry["name"])
            mapped[name] = f"imported as '{entry['name']}': a built-in preset has that name"
        # Only a well-formed list is compared; clean_tools refuses any other.
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
            clean_name(entry.get("name")),
            clean_mode(entry.get("mode", "all_except")),
            clean_tools(entry.get("tools", [])),
            clean_approvals(entry.get("approvals", {})),
        )
        for entry in entries
    ]
    for _, mode, tools, _ in cleaned:
        check_removals(mode, tools)
    names = [name for name, _, _, _ in cleaned]
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
                ToolProfile(name=name, owner=user, mode=mode, tools=tools, approvals=approvals)
                for name, mode, tools, approvals in cleaned
            )
            if "active" in data:
                sources = [entry.get("source", entry.get("name")) for entry in entries]
                imported = dict(zip(sources, names, strict=True))
                active = _import_active(user, data["active"], imported)
    except IntegrityError:
        raise Conflict("a profile with one of these names was just created") from None
    unknown = {
        name: list(missing_tools(tools)) for name, _, tools, _ in cleaned if missing_tools(tools)
    }
    return ImportReport(created=tuple(names), unknown_tools=unknown, mapped=mapped, active=active)


def _import_active(user: Any, active: str, imported: dict[Any, str]) -> str:
    """The file's ``active`` profile (functions_meta.json has one) becomes what new chats
    start with."""
    if active == DEFAULT_PRESET:
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
    if not isinstance(toolset, str) or len(toolset) > 200 or "\x00" in toolset:
        raise Invalid("toolset must be a profile's name", fields={"toolset": ["not a name"]})
    name = toolset.strip()
    profile, preset = None, ""
    if name and name != DEFAULT_PRESET:
        # Own before shared, as a chat resolves a name (profile_lookup_for).
        profile = (
            profiles_visible_to(user)
            .filter(name=name)
            .order_by(F("owner").asc(nulls_last=True))
            .first()
        )
        if profile is None and name not in PRESETS:
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
