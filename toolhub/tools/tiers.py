"""Layer 6: which offered tool is resident, listed in the catalog, or only named there.

A tool is ``core`` (its schema in the array), ``listed`` (a catalog line with its first
description line) or ``deferred`` (a catalog line with its name, or only a count when
the catalog is too long for that: ``toolhub.tools.catalog``). The decision is a
``TierPlan``, made once and kept with the session with the catalog's form, so neither
the array nor the catalog of a running conversation changes under it from turn to turn.

Invariants:
- A plan is kept while its key holds (the intents, toolset, budget and strategy); any
  change to those makes a new one from the usage counts.
- A new plan keeps the whole array and the catalog within the budget: the array's
  brackets, the meta tools that join it once anything is deferred, and the server notes
  that end the catalog count too. Over budget, the least-used tools go first, ties by
  name, so the same inputs give the same plan; the catalog gets what the array leaves,
  and the array leaves it at least the catalog's smallest form.
- A tool registered after the plan was made starts deferred, and is not in the plan: the
  catalog neither names nor counts it until a new plan is made.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolhub.tools.catalog import (
    NAMES,
    CatalogPlan,
    catalog_plan,
    chosen_notes,
    smallest_tokens,
)
from toolhub.tools.intent import ToolIntent
from toolhub.tools.schema import canonical_json
from toolhub.tools.tokens import count_cached
from toolhub.tools.tool import Tool
from toolhub.tools.wire import array_frame_tokens, tool_tokens

TIERS = ("core", "listed", "deferred")
# Part of every plan's key: a plan made before the catalog had a budget is made again.
_PLAN_VERSION = 2
# A schema this large stays out of the array until asked for, unless it has been used.
BIG_TOOL_TOKENS = 1_500


@dataclass(frozen=True, slots=True)
class TierPlan:
    """Which tier each tool is in, decided once and kept with the session."""

    key: str
    tiers: tuple[tuple[str, str], ...]
    catalog: CatalogPlan = NAMES

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "tiers": dict(self.tiers), "catalog": self.catalog.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> TierPlan | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("tiers"), Mapping):
            return None
        tiers = tuple((str(name), tier) for name, tier in data["tiers"].items() if tier in TIERS)
        catalog = CatalogPlan.from_json(data.get("catalog"))
        if catalog is None:
            # Not a plan this version wrote: made again from the usage counts.
            return None
        return cls(key=str(data.get("key", "")), tiers=tiers, catalog=catalog)


def tier_plan(
    *,
    session: ToolIntent,
    agent: ToolIntent,
    toolset_name: str | None,
    budget: int,
    key_budget: int,
    strategy: str,
    stored: TierPlan | None,
    usage: Mapping[str, int],
    candidates: Sequence[Tool],
    meta: Sequence[Tool],
    notes: Mapping[str, str],
) -> TierPlan:
    """Each candidate's tier and the catalog's form, as the plan to store: the ``stored``
    one while its key holds, else a new one from the usage counts (``meta``: the tools that
    join the array once anything is deferred; ``notes``: what the candidates' sources say
    about their tools, by origin, which ends the catalog). ``budget`` is the one to keep,
    at least ``least_budget``; the plan's key is made with the one asked for
    (``key_budget``), so tools coming and going do not make a plan again."""
    plan_key = hashlib.sha256(
        canonical_json(
            [_PLAN_VERSION, session.to_json(), agent.to_json(), toolset_name, key_budget, strategy]
        ).encode()
    ).hexdigest()[:32]
    if stored is not None and stored.key == plan_key:
        # A tool registered after the plan was made is left out of it: it is deferred
        # (the array of a running conversation does not grow by itself), and the catalog
        # does not name or count it until a new plan is made.
        return stored
    said = chosen_notes(notes, candidates, usage, budget)
    room = budget - sum(count_cached(notes[origin]) for origin in said)
    tiers, spent = build_tiers(candidates, usage, room, meta)
    deferred = [tool for tool in candidates if tiers[tool.name] != "core"]
    catalog = catalog_plan(deferred, tiers, usage, room - spent, said)
    # Registry order (deterministic already): no sort on this path.
    return TierPlan(key=plan_key, tiers=tuple(tiers.items()), catalog=catalog)


def build_tiers(
    candidates: Sequence[Tool], usage: Mapping[str, int], budget: int, meta: Sequence[Tool]
) -> tuple[dict[str, str], int]:
    """Tiers within ``budget``, and the tokens the array spends: the whole array counts,
    its brackets and the ``meta`` tools that join it once anything is deferred (tool_search,
    and call_tool under that strategy) included, and once anything is deferred the
    catalog's smallest form is kept room for, so the array and the catalog counted
    afterwards stay within the budget."""
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
        # Anything deferred brings the meta tools into the array, and the catalog after
        # it: they count too (the catalog at its smallest, for every candidate, a bound).
        spent += sum(tool_tokens(tool) for tool in meta)
        budget -= smallest_tokens(candidates)
    if spent > budget:
        # Over budget, the least-used go first; ties by name, so the plan is reproducible.
        for _, name in sorted((usage.get(tool.name, 0), tool.name) for tool in core):
            if spent <= budget:
                break
            tiers[name] = "listed"
            spent -= cost[name]
    for tool in core:
        tiers.setdefault(tool.name, "core")
    return tiers, spent


def least_budget(candidates: Sequence[Tool], meta: Sequence[Tool]) -> int:
    """The least budget a turn with these candidates can keep once anything is deferred:
    the array's frame, the meta tools and the catalog at its smallest. A smaller budget (a
    tiny context window's 5%) is raised to it rather than broken."""
    if not meta:
        return 0
    return array_frame_tokens() + sum(tool_tokens(t) for t in meta) + smallest_tokens(candidates)
