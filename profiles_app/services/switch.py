"""Switching a profile between "all except" and "only", with a preview and an undo.

A switch keeps what the profile offers as far as it can: the list is recomputed from the
live registry at the moment of the switch, shown before it is applied, and undone only while
nobody changed the profile since.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from profiles_app.models import (
    ToolProfile,
)
from profiles_app.services.profiles import ProfileView, profile_spec, profile_update
from profiles_app.services.rules import (
    check_can_edit,
    check_fresh,
    check_removals,
    clean_mode,
    clean_tools,
    missing_tools,
)
from toolhub.tools import (
    registry,
)
from toolhub.tools.layers import META_TOOLS

# --- switching between "all except" and "only" ----------------------------------------------

_MODE_NAMES: dict[str, str] = {
    ToolProfile.Mode.ALL_EXCEPT: "all except",
    ToolProfile.Mode.ONLY: "only",
}


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
    check_can_edit(user, profile)
    check_fresh(profile, version)
    mode = clean_mode(mode)
    previous = tuple(profile.tools)
    if mode == profile.mode:
        return ModeSwitch(mode, previous, profile.mode, previous)
    tools = clean_tools(_switched_list(profile))
    check_removals(mode, tools)
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
    approvals: dict[str, str] | None = None,
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
            user=user,
            profile=profile,
            version=version,
            name=name,
            mode=mode,
            tools=tools,
            approvals=approvals,
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
        missing=missing_tools(profile.tools),
        readonly=False,
        version=version if preview else profile.version,
        approvals=profile_spec(profile).approvals,
    )
    return ProfileChange(view=view, switch=switch, applied=not preview)
