"""The tool catalog a person sees: every exposed tool, and for them whether it is
available and if not, the layer and why."""

from __future__ import annotations

from typing import Any

from profiles_app.services.disables import global_disables
from toolhub.tools import (
    TOOLSETS,
    ToolContext,
    agent_tools,
    registry,
)
from toolhub.tools.presets import toolset_members
from toolhub.tools.resolve import TOOL_SEARCH

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
