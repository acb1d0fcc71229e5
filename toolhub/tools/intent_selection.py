"""What the intents select (layer L2b) and veto (L5), read into ``layers.agent_tools``' terms.

The session's ``ToolIntent`` comes first and the agent's fills what it leaves unset; a
toolset name names a person's profile (``ProfileSpec``, looked up by the caller) or else a
preset. Nothing here looks at a tool: the result names tools, and the layers apply it to
the live registry, so a tool registered tomorrow reaches every "all tools" intent.

Invariants: tools switched off select nothing; hand-picked names win over any toolset; a
profile's ``deny`` approvals veto only where the profile decides the tools (not when
picked by hand or switched off); the Web Search toggle adds ``web_search`` on top of
whatever the rest gives, or vetoes it; two allow lists intersect.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolhub.tools.approval import DENY
from toolhub.tools.intent import ToolIntent
from toolhub.tools.presets import PRESETS, UnknownToolsetError, toolset_members
from toolhub.tools.registry import ToolRegistry

WEB_SEARCH = "web_search"


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    """A tool profile as the apps store it: intent, never an expansion."""

    name: str
    mode: str  # "all_except" | "only"
    tools: tuple[str, ...] = ()
    # Tool -> auto | ask | deny, as the person set it (toolhub.tools.approval), by name.
    approvals: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class IntentSelection:
    """What the intents select (layer L2b) and veto (L5), before the layers apply it:
    ``names`` (``None``: every exposed tool) with the reason a tool outside it reads, names
    excluded with theirs, the allow list, the session's and the agent's denials, and the
    vetoes the intent itself makes (web search off)."""

    names: frozenset[str] | None
    names_reason: str
    exclude: dict[str, str]
    allow: frozenset[str] | None
    deny: tuple[str, ...]
    agent_deny: tuple[str, ...]
    vetoes: dict[str, str]


@dataclass(frozen=True, slots=True)
class _Scope:
    """The names an intent keeps (``None``: every exposed tool), the reason a tool outside
    them reads, and the names it excludes with theirs."""

    names: frozenset[str] | None = None
    reason: str = "not among the picked tools"
    exclude: dict[str, str] = field(default_factory=dict)


def intent_selection(
    *,
    registry: ToolRegistry,
    session: ToolIntent,
    agent: ToolIntent,
    toolset_name: str | None,
    profile: ProfileSpec | None,
) -> IntentSelection:
    """Read the two intents (and the profile their toolset names) into one selection."""
    enabled = next((v for v in (session.enabled, agent.enabled) if v is not None), True)
    picked = session.picked if session.picked is not None else agent.picked
    web = session.web_search if session.web_search is not None else agent.web_search
    scope = _scope(
        registry, enabled=enabled, picked=picked, toolset_name=toolset_name, profile=profile
    )
    names, exclude = scope.names, dict(scope.exclude)
    vetoes: dict[str, str] = {}
    if profile is not None and enabled and picked is None:
        for name, policy in profile.approvals:
            if policy == DENY:
                vetoes[name] = f"the profile '{profile.name}' never runs it"
    if web is True:
        # The Web Search toggle layers web_search on top of whatever the rest gives.
        if names is not None:
            names = names | {WEB_SEARCH}
        exclude.pop(WEB_SEARCH, None)
    elif web is False:
        vetoes[WEB_SEARCH] = "web search is off in this conversation"
    allowed = None
    for allow in (session.allowed, agent.allowed):
        if allow is not None:
            allowed = frozenset(allow) if allowed is None else allowed & frozenset(allow)
    return IntentSelection(
        names=names,
        names_reason=scope.reason,
        exclude=exclude,
        allow=allowed,
        deny=tuple(session.disabled),
        agent_deny=tuple(agent.disabled),
        vetoes=vetoes,
    )


def _scope(
    registry: ToolRegistry,
    *,
    enabled: bool,
    picked: tuple[str, ...] | None,
    toolset_name: str | None,
    profile: ProfileSpec | None,
) -> _Scope:
    if not enabled:
        return _Scope(frozenset(), "tools are off in this conversation")
    if picked is not None:
        return _Scope(frozenset(picked))
    if toolset_name is None:
        return _Scope()
    if profile is not None and profile.mode == "only":
        return _Scope(frozenset(profile.tools), f"not in the profile '{profile.name}'")
    if profile is not None:
        removed = f"removed from the profile '{profile.name}'"
        return _Scope(exclude=dict.fromkeys(profile.tools, removed))
    if toolset_name in PRESETS:
        members = toolset_members(toolset_name, registry)
        return _Scope(members, f"not in the '{toolset_name}' toolset")
    raise UnknownToolsetError(f"no profile or preset named '{toolset_name}'")
