"""Presets: named subsets of tools (``PRESETS``), which may include other presets.

A preset's members are the tools it names, the tools that declare membership with
``@function(toolset=[...])``, and the members of every preset it includes, recursively.
The include graph is validated whenever it changes: an include of an unknown preset or a
cycle raises at import, naming the path. Asking for an unknown preset raises too; it is
never a silent empty set. ``default`` is special: every exposed tool, so a new tool
reaches it with no configuration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolhub.tools.registry import ToolRegistry

DEFAULT_PRESET = "default"


class UnknownToolsetError(LookupError):
    pass


class ToolsetCycleError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Toolset:
    name: str
    description: str
    tools: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()
    everything: bool = False


PRESETS: dict[str, Toolset] = {}


def _validate(toolsets: dict[str, Toolset]) -> None:
    for toolset in toolsets.values():
        for included in toolset.includes:
            if included not in toolsets:
                raise UnknownToolsetError(
                    f"toolset '{toolset.name}' includes unknown toolset '{included}'"
                )
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = [*path[path.index(name) :], name]
            raise ToolsetCycleError("toolset include cycle: " + " -> ".join(cycle))
        if name in done:
            return
        for included in toolsets[name].includes:
            visit(included, [*path, name])
        done.add(name)

    for name in toolsets:
        visit(name, [])


def define_toolsets(*toolsets: Toolset) -> None:
    """Add presets together (they may include each other); all or nothing."""
    candidate = dict(PRESETS)
    for toolset in toolsets:
        if toolset.name in candidate:
            raise ValueError(f"toolset '{toolset.name}' is already defined")
        candidate[toolset.name] = toolset
    _validate(candidate)
    PRESETS.update((toolset.name, toolset) for toolset in toolsets)


def check_memberships(tool_name: str, toolsets: Iterable[str]) -> None:
    for name in toolsets:
        if name not in PRESETS:
            raise UnknownToolsetError(f"tool '{tool_name}' declares unknown toolset '{name}'")
        if PRESETS[name].everything:
            raise ValueError(f"tool '{tool_name}': every exposed tool is in '{name}' already")


def expand_toolset(name: str) -> tuple[str, ...]:
    """``name`` and every preset it includes, each once, in depth-first order."""
    if name not in PRESETS:
        raise UnknownToolsetError(f"unknown toolset '{name}'")
    order: list[str] = []

    def visit(current: str) -> None:
        if current in order:
            return
        order.append(current)
        for included in PRESETS[current].includes:
            visit(included)

    visit(name)
    return tuple(order)


def toolset_members(name: str, registry: ToolRegistry) -> frozenset[str]:
    """Names in preset ``name``. Used for membership tests; order comes from the registry."""
    presets = expand_toolset(name)
    if any(PRESETS[preset].everything for preset in presets):
        return frozenset(tool.name for tool in registry.all_tools() if tool.expose)
    named = {tool for preset in presets for tool in PRESETS[preset].tools}
    declared = {
        tool.name
        for tool in registry.all_tools()
        if any(preset in tool.toolset for preset in presets)
    }
    return frozenset(named | declared)


def default_tools(registry: ToolRegistry) -> tuple[str, ...]:
    """``DEFAULT_TOOLS``: every exposed tool, in registry order."""
    return tuple(tool.name for tool in registry.all_tools() if tool.expose)


define_toolsets(
    Toolset(DEFAULT_PRESET, "Every exposed tool.", everything=True),
    Toolset(
        "safe",
        "Tools that read and compute but change nothing.",
        tools=(
            "read",
            "glob",
            "grep",
            "web_fetch",
            "web_search",
            "tool_search",
            "current_time",
            "calculate",
            "recall",
            "list_agents",
            "ask_user_question",
        ),
    ),
    Toolset(
        "research",
        "Search and read the web, keep notes.",
        tools=("web_search", "web_fetch", "remember", "recall", "tool_search"),
        includes=("safe",),
    ),
    Toolset(
        "files",
        "Read and change files in the workspace.",
        tools=("read", "write", "edit", "glob", "grep"),
    ),
    Toolset(
        "coding",
        "Files plus a shell, for working on code.",
        tools=("bash", "tool_search"),
        includes=("files",),
    ),
    Toolset(
        "planning",
        "Plan first: ask questions and propose a plan.",
        tools=("enter_plan_mode", "exit_plan_mode", "ask_user_question"),
    ),
)
