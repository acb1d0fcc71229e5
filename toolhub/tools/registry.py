"""The tool registry: every registered ``Tool`` by name, in registration order.

Registration order is the primary order of every tool array (docs/architecture.md, hard line 2), so
it is kept exactly; nothing here iterates a set. A duplicate name is an error naming both
definitions. Tools that ``available_if`` kept out, and plugin modules that failed to
import, are remembered with their reasons so the catalog can show why they are missing.
``generation`` increases on every change, so callers can memoize on it. Each tool added
is queued for tool_search's semantic ranker to encode in the background (``search.prepare``),
so no turn waits for it.

Tools a connection brought (``source == "mcp"``) come after all others, sorted by name,
whatever order servers connected in or listed their tools in: two processes, or one
process before and after a reconnect, lay out the same array. ``sync_origin`` swaps one
connection's tools in one step and keeps every unchanged ``Tool`` object, so a relisting
that changed nothing changes nothing (not even ``generation``).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from toolhub.tools.search import prepare
from toolhub.tools.tool import Tool
from toolhub.tools.wire import count_ahead


class DuplicateToolError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Skipped:
    name: str
    reason: str
    origin: str


_REGISTRY_IDS = itertools.count(1)


class ToolRegistry:
    def __init__(self) -> None:
        # Never reused (unlike id()), so memoized resolutions of a registry that was
        # garbage collected cannot be served for a new one.
        self.uid = next(_REGISTRY_IDS)
        self._lock = threading.RLock()
        self._tools: dict[str, Tool] = {}
        self._skipped: dict[str, Skipped] = {}
        self._load_errors: dict[str, str] = {}
        # Origin -> what it asks to add to the system prompt while a tool of it is offered
        # (an MCP server's instructions).
        self._notes: dict[str, str] = {}
        self.generation = 0
        self._gated: tuple[int, tuple[Tool, ...]] = (-1, ())
        self._ordered: tuple[int, tuple[Tool, ...]] = (-1, ())

    def register(self, tool: Tool) -> Tool:
        with self._lock:
            existing = self._tools.get(tool.name)
            if existing is not None:
                raise DuplicateToolError(
                    f"tool '{tool.name}' is defined twice: {existing.origin} and {tool.origin}"
                )
            self._tools[tool.name] = tool
            self._skipped.pop(tool.name, None)
            self.generation += 1
        prepare([tool])
        return tool

    def skip(self, tool: Tool, reason: str) -> None:
        """Remember a tool that layer 1 (``available_if``) kept out, and why."""
        with self._lock:
            self._skipped[tool.name] = Skipped(tool.name, reason, tool.origin)
            self.generation += 1

    def sync_origin(self, origin: str, tools: list[Tool]) -> list[Skipped]:
        """Make the tools of ``origin`` exactly ``tools``: add new ones, replace changed
        ones, drop the rest. A name another origin already holds is skipped, with why."""
        skipped: list[Skipped] = []
        fresh: list[Tool] = []
        with self._lock:
            changed = False
            wanted = {tool.name: tool for tool in tools}
            for name, tool in list(self._tools.items()):
                if tool.origin == origin and name not in wanted:
                    del self._tools[name]
                    changed = True
            for name, tool in wanted.items():
                existing = self._tools.get(name)
                if existing is not None and existing.origin != origin:
                    skipped.append(Skipped(name, f"the name is taken by {existing.origin}", origin))
                    continue
                if existing is not None and _same_tool(existing, tool):
                    continue
                self._tools[name] = tool
                fresh.append(tool)
                changed = True
            if changed:
                self.generation += 1
        prepare(fresh)
        # A server's listing arrives off any turn's path: count its tools now, not on the
        # first turn that resolves them.
        count_ahead(fresh)
        return skipped

    def set_note(self, origin: str, text: str) -> None:
        """Set (or, with ``""``, clear) the system-prompt note of ``origin``; a note that
        is unchanged changes nothing."""
        with self._lock:
            if self._notes.get(origin, "") == text:
                return
            if text:
                self._notes[origin] = text
            else:
                self._notes.pop(origin, None)
            self.generation += 1

    def note(self, origin: str) -> str:
        return self._notes.get(origin, "")

    def touch(self) -> None:
        """Count a change that is not in the tools themselves (a layer-4 gate flipped)."""
        with self._lock:
            self.generation += 1

    def unregister(self, name: str) -> None:
        with self._lock:
            if self._tools.pop(name, None) is not None:
                self.generation += 1

    def record_load_error(self, module: str, reason: str) -> None:
        with self._lock:
            self._load_errors[module] = reason
            self.generation += 1

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def all_tools(self) -> list[Tool]:
        return list(self._in_order())

    def _in_order(self) -> tuple[Tool, ...]:
        with self._lock:
            if self._ordered[0] != self.generation:
                ordered = [tool for tool in self._tools.values() if tool.source != "mcp"]
                ordered += sorted(
                    (tool for tool in self._tools.values() if tool.source == "mcp"),
                    key=lambda tool: tool.name,
                )
                self._ordered = (self.generation, tuple(ordered))
            return self._ordered[1]

    def gated_tools(self) -> tuple[Tool, ...]:
        """Tools with a layer-4 gate (env, check_fn, can_use), kept per generation."""
        with self._lock:
            if self._gated[0] != self.generation:
                gated = tuple(
                    tool
                    for tool in self._tools.values()
                    if tool.requires_env or tool.check_fn is not None or tool.can_use is not None
                )
                self._gated = (self.generation, gated)
            return self._gated[1]

    def names(self) -> list[str]:
        return [tool.name for tool in self._in_order()]

    @property
    def skipped(self) -> list[Skipped]:
        with self._lock:
            return list(self._skipped.values())

    @property
    def load_errors(self) -> dict[str, str]:
        with self._lock:
            return dict(self._load_errors)

    def reset(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._tools.clear()
            self._skipped.clear()
            self._load_errors.clear()
            self.generation += 1

    def snapshot(self) -> tuple[dict[str, Tool], dict[str, Skipped], dict[str, str]]:
        with self._lock:
            return dict(self._tools), dict(self._skipped), dict(self._load_errors)

    def restore(self, state: tuple[dict[str, Tool], dict[str, Skipped], dict[str, str]]) -> None:
        with self._lock:
            tools, skipped, errors = state
            self._tools, self._skipped, self._load_errors = dict(tools), dict(skipped), dict(errors)
            self.generation += 1


def _same_tool(a: Tool, b: Tool) -> bool:
    """Whether swapping ``a`` for ``b`` would change anything a turn or a page shows."""
    return (
        a.wire_json == b.wire_json
        and a.defer == b.defer
        and a.label == b.label
        and a.timeout == b.timeout
        and a.timeout_ceiling == b.timeout_ceiling
        and a.runs_on == b.runs_on
    )


registry = ToolRegistry()


def get(name: str) -> Tool | None:
    return registry.get(name)


def all_tools() -> list[Tool]:
    return registry.all_tools()


def reset() -> None:
    registry.reset()
