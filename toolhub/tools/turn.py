"""``TurnTools``: the tool contract of one turn, frozen at its start.

It answers three questions for the turn runner, whatever the model or a crafted client
sends:

- which tools array goes in each provider request (``provider_tools``): fixed for the
  whole turn under ``call_tool`` and ``native``; under ``promote`` a tool found by
  ``tool_search`` joins from the next request of the same turn;
- which real tool a tool call means (``resolve_call``): ``call_tool {name, arguments}`` is
  unwrapped so approval, hooks and vetoes see the real tool; a name outside the contract
  is refused and never runs, and so is a deferred tool ``tool_search`` has not loaded
  (by ``call_tool`` or by its own name: once loaded, either way runs it);
- which deferred tools are loaded (``loaded``), exported for the session's checkpoint and
  restored only after checking every name against this turn's contract.

Vetoes that can change during the turn (a global disable, ``can_use``) are checked again
at execution time with ``veto_now``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toolhub.tools.context import ToolContext
from toolhub.tools.layers import META_TOOLS, Hidden, Refusal, refusal
from toolhub.tools.resolve import CALL_TOOL, TOOL_SEARCH, ResolvedToolset
from toolhub.tools.search import SearchHits, ToolIndex
from toolhub.tools.tool import Tool
from toolhub.tools.wire import layout_array


@dataclass(frozen=True, slots=True)
class CallTarget:
    """What a tool call resolved to: the real tool, or why it must not run (``error``,
    what the model is told; ``refused``, set when a rule of this turn removed the tool,
    with the person's words)."""

    name: str
    arguments: Mapping[str, Any]
    tool: Tool | None = None
    via: str | None = None
    error: str | None = None
    refused: Refusal | None = None


class TurnTools:
    def __init__(self, resolved: ResolvedToolset, *, loaded: Iterable[str] = ()) -> None:
        self.resolved = resolved
        self.strategy = resolved.strategy
        self._by_name = {tool.name: tool for tool in resolved.offered}
        self._deferred = {tool.name for tool in resolved.deferred}
        self._resident = {tool.name for tool in resolved.resident}
        # Only names this turn still allows survive a restore: a tool disabled since the
        # checkpoint, or now outside the intent, is dropped silently.
        self._loaded: dict[str, None] = {
            name: None for name in loaded if isinstance(name, str) and name in self._deferred
        }
        self._promoted: dict[str, None] = dict(self._loaded) if self.strategy == "promote" else {}
        self.index = _RecordingIndex(resolved.index, loaded=self._loaded, deferred=self._deferred)

    @property
    def loaded(self) -> list[str]:
        return list(self._loaded)

    def provider_tools(self) -> list[dict[str, Any]]:
        """The tools array for the next provider request of this turn."""
        tools: list[dict[str, Any]] = json.loads(self.tools_json())
        return tools

    def tools_json(self) -> str:
        if self.strategy != "promote" or not self._loaded:
            return self.resolved.tools_json
        # Promoted tools join after the resident ones, in registry order, so the cached
        # prefix (the resident array) is unchanged and the array is still deterministic.
        texts = [tool.wire_json for tool in self.resolved.resident]
        texts += [tool.wire_json for tool in self.resolved.deferred if tool.name in self._loaded]
        return "".join(layout_array(texts))

    def resolve_call(self, name: str, arguments: Any) -> CallTarget:
        """Map a model's tool call onto the contract; never raises."""
        via = None
        if name == CALL_TOOL.name and self.strategy == "call_tool" and self._deferred:
            if not isinstance(arguments, Mapping) or not isinstance(arguments.get("name"), str):
                return CallTarget(name, {}, error="call_tool needs {name, arguments}")
            inner = arguments.get("arguments") or {}
            name, arguments, via = arguments["name"], inner, "call_tool"
        if not isinstance(arguments, Mapping):
            return CallTarget(name, {}, via=via, error=f"{name}: arguments must be an object")
        tool = self._by_name.get(name)
        if tool is None:
            # Say which rule removed it, so the model can tell the person (layers.refusal).
            # A name no rule removed is simply unknown: an error, not a veto.
            hidden = self.resolved.reason_for(name)
            refused = refusal(name, hidden)
            return CallTarget(
                name, arguments, via=via, error=refused.told, refused=refused if hidden else None
            )
        # A deferred tool runs once tool_search loaded it, whichever way it is called
        # (call_tool, or its own name) and whatever the strategy (native sends its schema
        # deferred, but the model is shown it only once tool_search references it): the
        # loaded set is what the model was shown.
        if name in self._deferred and name not in self._loaded:
            return CallTarget(
                name,
                arguments,
                via=via,
                error=f"{name} is not loaded: find it with tool_search first, then call it",
            )
        return CallTarget(name, arguments, tool=tool, via=via)

    def veto_now(
        self, tool: Tool, ctx: ToolContext, disabled_now: Mapping[str, str]
    ) -> Refusal | None:
        """Why ``tool`` must not run at this moment, or ``None`` (docs/architecture.md,
        hard line 5)."""
        if tool.name in disabled_now and tool.name not in META_TOOLS:
            return refusal(tool.name, Hidden(tool.name, "L5", disabled_now[tool.name]))
        if tool.can_use is not None and tool.name != TOOL_SEARCH:
            try:
                allowed = tool.can_use(ctx)
                why = "not available in this session"
            except Exception as exc:
                allowed, why = False, f"availability check failed: {type(exc).__name__}"
            if not allowed:
                return refusal(tool.name, Hidden(tool.name, "L4", why))
        return None


class _RecordingIndex:
    """The index tool_search sees: this turn's deferred tools, recording what it loads in
    the turn's ``loaded`` (it holds that, not the turn: no cycle, so reference counting
    frees a finished turn at once)."""

    def __init__(self, index: ToolIndex, *, loaded: dict[str, None], deferred: set[str]) -> None:
        self._index = index
        self._loaded = loaded
        self._deferred = deferred

    def mark(self, names: Iterable[str]) -> None:
        for name in names:
            if name in self._deferred:
                self._loaded.setdefault(name, None)

    @property
    def names(self) -> list[str]:
        return self._index.names

    @property
    def sources(self) -> dict[str, str]:
        return self._index.sources

    def select(self, names: list[str]) -> tuple[list[Tool], list[str]]:
        found, missing = self._index.select(names)
        self.mark(tool.name for tool in found)
        return found, missing

    def search(self, query: str, limit: int = 5) -> SearchHits:
        hits = self._index.search(query, limit)
        self.mark(hit.tool.name for hit in hits)
        return hits
