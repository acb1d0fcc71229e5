"""Layer 6: which offered tool is resident, listed in the catalog, or only named there.

A tool is ``core`` (its schema in the array), ``listed`` (a catalog line with its first
description line) or ``deferred`` (a catalog line with its name). The decision is a
``TierPlan``, made once and kept with the session, so the array of a running conversation
does not change under it from turn to turn.

Invariants:
- A plan is kept while its key holds (the intents, toolset, budget and strategy); any
  change to those makes a new one from the usage counts.
- A new plan keeps the whole array within the budget: its brackets and the meta tools
  that join it once anything is deferred count too. Over budget, the least-used tools go
  first, ties by name, so the same inputs give the same plan.
- A tool registered after the plan was made starts deferred.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolhub.tools.intent import ToolIntent
from toolhub.tools.schema import canonical_json
from toolhub.tools.tool import Tool
from toolhub.tools.wire import array_frame_tokens, tool_tokens

TIERS = ("core", "listed", "deferred")
# A schema this large stays out of the array until asked for, unless it has been used.
BIG_TOOL_TOKENS = 1_500


@dataclass(frozen=True, slots=True)
class TierPlan:
    """Which tier each tool is in, decided once and kept with the session."""

    key: str
    tiers: tuple[tuple[str, str], ...]

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "tiers": dict(self.tiers)}

    @classmethod
    def from_json(cls, data: Any) -> TierPlan | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("tiers"), Mapping):
            return None
        tiers = tuple((str(name), tier) for name, tier in data["tiers"].items() if tier in TIERS)
        return cls(key=str(data.get("key", "")), tiers=tiers)


def tier_plan(
    *,
    session: ToolIntent,
    agent: ToolIntent,
    toolset_name: str | None,
    budget: int,
    strategy: str,
    stored: TierPlan | None,
    usage: Mapping[str, int],
    candidates: Sequence[Tool],
    meta: Sequence[Tool],
) -> TierPlan:
    """Each candidate's tier, as the plan to store: the ``stored`` one while its key holds,
    else a new one from the usage counts (``meta``: the tools that join the array once
    anything is deferred)."""
    plan_key = hashlib.sha256(
        canonical_json(
            [session.to_json(), agent.to_json(), toolset_name, budget, strategy]
        ).encode()
    ).hexdigest()[:32]
    if stored is None or stored.key != plan_key:
        tiers = build_tiers(candidates, usage, budget, meta)
    else:
        kept = dict(stored.tiers)
        # A tool registered after the plan was made starts deferred: the array of a
        # running conversation does not grow by itself.
        tiers = {tool.name: kept.get(tool.name, "deferred") for tool in candidates}
        tiers.update({name: tier for name, tier in kept.items() if name not in tiers})
    # Registry order (deterministic already): no sort on this path.
    return TierPlan(key=plan_key, tiers=tuple(tiers.items()))


def build_tiers(
    candidates: Sequence[Tool], usage: Mapping[str, int], budget: int, meta: Sequence[Tool]
) -> dict[str, str]:
    """Tiers within ``budget``: the whole array counts, its brackets and the ``meta`` tools
    that join it once anything is deferred (tool_search, and call_tool under that
    strategy) included, so the array counted afterwards stays within the budget."""
    tiers: dict[str, str] = {}
    # Only a tool that may be resident is counted: one declared deferred never is.
    cost = {tool.name: tool_tokens(tool) for tool in candidates if not tool.defer}
    core: list[Tool] = []
    for tool in candidates:
        if tool.defer or (cost[tool.name] > BIG_TOOL_TOKENS and not usage.get(tool.name)):
            tiers[tool.name] = "deferred"
        else:
            core.append(tool)
    spent = array_frame_tokens() + sum(cost[tool.name] for tool in core)
    if meta and (spent > budget or tiers):
        # Anything deferred brings the meta tools into the array: they count too.
        spent += sum(tool_tokens(tool) for tool in meta)
    if spent > budget:
        # Over budget, the least-used go first; ties by name, so the plan is reproducible.
        for _, name in sorted((usage.get(tool.name, 0), tool.name) for tool in core):
            if spent <= budget:
                break
            tiers[name] = "listed"
            spent -= cost[name]
    for tool in core:
        tiers.setdefault(tool.name, "core")
    return tiers
