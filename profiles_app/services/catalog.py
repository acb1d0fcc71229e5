"""The tool catalog a person sees: every exposed tool, and for them whether it is
available and if not, the layer and why; and the catalog as one profile's page shows it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from profiles_app.services.agents import default_agent
from profiles_app.services.disables import (
    approval_for_everybody,
    global_disables,
    operator_policies,
)
from profiles_app.services.profiles import ProfileView, profile_offers, profile_token_cost
from toolhub.lib.chat_services import chat_services
from toolhub.tools import (
    PRESETS,
    TokenCost,
    Tool,
    ToolContext,
    agent_tools,
    registry,
)
from toolhub.tools.layers import META_TOOLS, hidden_words
from toolhub.tools.mcp import Effect
from toolhub.tools.presets import toolset_members
from toolhub.tools.resolve import TOOL_SEARCH

# --- the catalog -------------------------------------------------------------------------


def tool_catalog(*, ctx: ToolContext) -> list[dict[str, Any]]:
    """Every exposed tool with its presets, and for this person whether it is available
    and if not, the layer and why; then tools that never registered (layer 1) and plugin
    modules that failed to load, so a person sees why something they expect is missing."""
    disabled = global_disables()
    policies = operator_policies()
    selection = agent_tools(ctx=ctx, disabled=disabled)
    hidden = {item.name: item for item in selection.hidden}
    # A turn offers tool_search whenever it defers something, and no veto applies to it:
    # its layer-4 gate only says that no turn's index exists here.
    hidden.pop(TOOL_SEARCH, None)
    members = {
        name: toolset_members(name, registry)
        for name, preset in PRESETS.items()
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
            # What an MCP server's annotations say the tool does (None: not an MCP tool).
            "effect": _effect(tool),
            "available": tool.name not in hidden,
            "layer": hidden[tool.name].layer if tool.name in hidden else None,
            "reason": hidden[tool.name].reason if tool.name in hidden else None,
            # The reason in a person's words (the page shows these; the layer is detail).
            "words": hidden_words(hidden[tool.name].layer, hidden[tool.name].reason)
            if tool.name in hidden
            else None,
            **approval_for_everybody(tool, policies),
        }
        for tool in registry.all_tools()
        if tool.expose
    ]
    return catalog + _never_loaded()


def _never_loaded() -> list[dict[str, Any]]:
    """Catalog entries for the tools that never registered and the plugin modules that
    failed to load: unavailable at layer 1, with why."""
    missing = [(skip.name, f"not registered: {skip.reason}") for skip in registry.skipped]
    missing += [
        (module, f"plugin failed to load: {error}")
        for module, error in registry.load_errors.items()
    ]
    return [
        {
            "name": name,
            "label": name,
            "description": "",
            "presets": [],
            "deferred": False,
            "runs_on": "inline",
            "source": "plugin",
            "effect": None,
            "available": False,
            "layer": "L1",
            "reason": reason,
            "words": reason,
            "approval": "auto",
            "approval_by": "author",
        }
        for name, reason in missing
    ]


def _effect(tool: Tool) -> str | None:
    effect = getattr(tool, "effect", None)
    return effect.kind if isinstance(effect, Effect) else None


def catalog_context(*, user: Any) -> ToolContext:
    """A representative chat of ``user``, with a person in it: a workspace and the
    interfaces a chat's tools have, so what is hidden is what a chat would hide."""
    return ToolContext(
        user_id=str(user.pk),
        session_id="catalog",
        workspace=Path(settings.TOOLHUB_WORKSPACE_ROOT),
        services=chat_services(attended=True),
    )


@dataclass(frozen=True, slots=True)
class ProfileCatalog:
    """The catalog as one profile's page shows it: the tools it offers, the ones it leaves
    out (each entry with its first description line as ``summary``, and ``meta`` for the
    tools no profile can remove), and what its array costs under the default agent."""

    offered: list[dict[str, Any]]
    left_out: list[dict[str, Any]]
    cost: TokenCost


def profile_catalog(*, user: Any, view: ProfileView) -> ProfileCatalog:
    ctx = catalog_context(user=user)
    offers = profile_offers(view)
    chosen = dict(view.approvals)
    entries = [
        {
            **entry,
            "summary": (entry["description"].strip().splitlines() or [""])[0],
            "meta": entry["name"] in META_TOOLS,
            # The person's own auto / ask / deny for this tool in this profile ("": none).
            "policy": chosen.get(entry["name"], ""),
        }
        for entry in tool_catalog(ctx=ctx)
        if entry["layer"] != "L1"
    ]
    # A meta tool is in every profile, whatever its list says (it is offered whenever
    # something is deferred): an "only" list never names it, and a switch keeps it.
    offered = [entry for entry in entries if entry["meta"] or offers(entry["name"])]
    left_out = [entry for entry in entries if not (entry["meta"] or offers(entry["name"]))]
    cost = profile_token_cost(user=user, name=view.name, agent=default_agent(), ctx=ctx)
    return ProfileCatalog(offered=offered, left_out=left_out, cost=cost)
