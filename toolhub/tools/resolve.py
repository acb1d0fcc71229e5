"""Resolution: from intent to the exact tools array a turn sends, deterministically.

``resolve`` combines the session's intent, the agent's intent, a profile, global disables,
the channel, mode and attendance (in ``ctx``) with the live registry, and returns a
``ResolvedToolset``: the offered tools in registry order, the resident/deferred split by
tier, the canonical provider array and its sha256 fingerprint, the catalog block for the
system prompt, and for every registered tool left out, the first layer and why. The steps
live beside it: what the intents select (``intent_selection``), layers 1 to 5
(``layers``), the tiers of layer 6 (``tiers``), and the array and catalog text (``wire``).

Invariants (docs/architecture.md, hard lines 1 and 2):
- Nothing is stored but intent; a tool registered tomorrow reaches every "all tools"
  intent on its next resolution.
- Same inputs, same bytes: order comes from the registry (never a set or dict order),
  and the array is laid out so each tool's piece counts exactly (``wire``).
- If anything is deferred, ``tool_search`` is resident, whatever else would remove it;
  it is never deferred.
- Results are memoized on (registry generation, every input that can change the output),
  so an unchanged turn does not recompute.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolhub.tools.catalog import catalog_pieces, least_pieces
from toolhub.tools.context import ToolContext
from toolhub.tools.decorator import function
from toolhub.tools.intent import ToolIntent
from toolhub.tools.intent_selection import ProfileSpec, intent_selection
from toolhub.tools.layers import Hidden, Selection, agent_tools, availability
from toolhub.tools.registry import ToolRegistry
from toolhub.tools.registry import registry as default_registry
from toolhub.tools.search import ToolIndex
from toolhub.tools.tiers import TierPlan, least_budget, tier_plan
from toolhub.tools.tokens import count_cached
from toolhub.tools.tool import Tool
from toolhub.tools.wire import layout_array, native_json

STRATEGIES = ("call_tool", "promote", "native")
TOOL_SEARCH = "tool_search"
DEFAULT_CONTEXT_WINDOW = 200_000
DEFAULT_BUDGET_SHARE = 0.05
_MEMO_SIZE = 512


def _call_tool_body(name: str, arguments: dict[str, Any] | None = None) -> str:
    """Call a tool that tool_search loaded.

    Args:
        name: The loaded tool's exact name.
        arguments: The tool's arguments, as its schema describes them.
    """
    raise RuntimeError("call_tool is unwrapped by the turn runner, never run")


# The meta tool of the call_tool strategy: never registered, so no layer or veto sees it;
# the turn runner unwraps it and every check applies to the real tool inside.
CALL_TOOL = function(_call_tool_body, name="call_tool", register_globally=False)


@dataclass(frozen=True)
class ResolvedToolset:
    strategy: str
    offered: tuple[Tool, ...]
    resident: tuple[Tool, ...]
    deferred: tuple[Tool, ...]
    tiers: Mapping[str, str]
    hidden: tuple[Hidden, ...]
    plan: TierPlan
    array_pieces: tuple[str, ...]
    array_names: tuple[str, ...]
    catalog_pieces: tuple[str, ...]
    fingerprint: str
    budget_tokens: int
    # (origin, note) of each origin with a note and an offered tool, by origin: the
    # catalog block ends with them, so the catalog's token count includes them.
    notes: tuple[tuple[str, str], ...] = ()

    @functools.cached_property
    def tools_json(self) -> str:
        return "".join(self.array_pieces)

    @functools.cached_property
    def catalog(self) -> str:
        return "".join(self.catalog_pieces)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.offered)

    def reason_for(self, name: str) -> Hidden | None:
        return next((hidden for hidden in self.hidden if hidden.name == name), None)

    @functools.cached_property
    def index(self) -> ToolIndex:
        """tool_search's index over the deferred tools, built once per resolution (and
        resolutions are memoized), never per query."""
        return ToolIndex(self.deferred)


@dataclass(frozen=True, slots=True)
class TokenCost:
    resident: int
    catalog: int
    per_tool: tuple[tuple[str, int], ...]


def token_cost(resolved: ResolvedToolset) -> TokenCost:
    """Tokens of the resident array and of the catalog block, each exactly. Under
    ``native`` the deferred entries travel flagged ``defer_loading`` and are not billed
    until loaded, so the resident half is the array without them."""
    names, pieces = _billed(
        resolved.strategy,
        resolved.array_names,
        resolved.array_pieces,
        resolved.resident,
        deferred=bool(resolved.deferred),
    )
    per_tool = tuple(
        (name, count_cached(piece)) for name, piece in zip(names, pieces[1:], strict=True)
    )
    resident = count_cached(pieces[0]) + sum(tokens for _, tokens in per_tool)
    catalog = sum(count_cached(piece) for piece in resolved.catalog_pieces)
    return TokenCost(resident=resident, catalog=catalog, per_tool=per_tool)


def _billed(
    strategy: str,
    names: tuple[str, ...],
    pieces: tuple[str, ...],
    resident: Sequence[Tool],
    *,
    deferred: bool,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names and pieces of the array the provider bills (``native``: the resident
    tools only, as their own array)."""
    if strategy == "native" and deferred:
        return tuple(tool.name for tool in resident), layout_array(
            [tool.wire_json for tool in resident]
        )
    return names, pieces


class _Memo:
    def __init__(self, size: int) -> None:
        self._entries: OrderedDict[tuple[Any, ...], ResolvedToolset] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> ResolvedToolset | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
            return hit

    def put(self, key: tuple[Any, ...], value: ResolvedToolset) -> None:
        with self._lock:
            self._entries[key] = value
            if len(self._entries) > self._size:
                self._entries.popitem(last=False)


_memo = _Memo(_MEMO_SIZE)


def _gate_state(registry: ToolRegistry, ctx: ToolContext) -> tuple[Any, ...]:
    """Every layer-3/4 outcome that can differ between calls with the same inputs."""
    return (
        ctx.channel,
        ctx.mode,
        ctx.attended,
        ctx.user_id,
        ctx.session_id,
        *(availability(tool, ctx) for tool in registry.gated_tools()),
    )


@dataclass(slots=True)
class _Inputs:
    """Everything one resolution depends on; the memo key is made of the same values.
    Never changed once made, yet not frozen: every call makes one, memo hits included,
    and a frozen dataclass costs several times more to make (bench/resolve.py, memo)."""

    registry: ToolRegistry
    session: ToolIntent
    agent: ToolIntent
    toolset_name: str | None
    profile: ProfileSpec | None
    disabled: dict[str, str]
    ctx: ToolContext
    strategy: str
    plan: TierPlan | None
    usage: Mapping[str, int]
    budget: int

    def key(self) -> tuple[Any, ...]:
        # Every input is a frozen value, so the key is a plain tuple: no serialization here.
        return (
            self.registry.uid,
            self.registry.generation,
            self.session,
            self.agent,
            self.profile,
            tuple(sorted(self.disabled.items())),
            self.strategy,
            self.plan,
            tuple(sorted(self.usage.items())),
            self.budget,
            _gate_state(self.registry, self.ctx),
        )


def resolve(
    registry: ToolRegistry | None = None,
    *,
    intent: Any = None,
    agent_intent: Any = None,
    profile_lookup: Callable[[str], ProfileSpec | None] | None = None,
    disabled: Mapping[str, str] | None = None,
    ctx: ToolContext | None = None,
    strategy: str = "call_tool",
    plan: TierPlan | None = None,
    usage: Mapping[str, int] | None = None,
    context_window_tokens: int = DEFAULT_CONTEXT_WINDOW,
    budget_tokens: int | None = None,
) -> ResolvedToolset:
    """Expand the intents against the live registry into one frozen toolset, ready to count.

    ``plan`` is the tier plan stored with the session (``None`` on its first turn);
    ``usage`` counts past calls per tool, used only when a plan is (re)built. The returned
    ``plan`` is what to store back.
    """
    registry = default_registry if registry is None else registry
    ctx = ctx or ToolContext()
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}")
    session = intent if isinstance(intent, ToolIntent) else ToolIntent.parse(intent)
    agent = agent_intent if isinstance(agent_intent, ToolIntent) else ToolIntent.parse(agent_intent)
    profile = None
    toolset_name = session.toolset or agent.toolset
    if toolset_name is not None and profile_lookup is not None:
        profile = profile_lookup(toolset_name)
    inputs = _Inputs(
        registry=registry,
        session=session,
        agent=agent,
        toolset_name=toolset_name,
        profile=profile,
        disabled=dict(disabled or {}),
        ctx=ctx,
        strategy=strategy,
        plan=plan,
        usage=usage or {},
        budget=budget_tokens or int(context_window_tokens * DEFAULT_BUDGET_SHARE),
    )
    key = inputs.key()
    cached = _memo.get(key)
    if cached is not None:
        return cached
    resolved = _resolve(inputs)
    _memo.put(key, resolved)
    return resolved


def _resolve(inputs: _Inputs) -> ResolvedToolset:
    """Select (L2b to L5, ``layers.agent_tools``), tier (L6, the stored plan or a new one),
    then lay out the array the strategy sends."""
    selection = _selected(inputs)
    candidates = [tool for tool in selection.tools if tool.name != TOOL_SEARCH]
    search_tool = inputs.registry.get(TOOL_SEARCH)
    # The meta tools join the array once anything is deferred: a new plan counts them.
    meta = [search_tool] if search_tool is not None else []
    if inputs.strategy == "call_tool" and meta:
        meta.append(CALL_TOOL)
    budget = max(inputs.budget, least_budget(candidates, meta))
    plan = _tier_plan(inputs, candidates, meta, budget)
    tiers = dict(plan.tiers)
    # A tool registered after the plan was made is not in it: deferred (tiers.py).
    offered_tiers = {tool.name: tiers.get(tool.name, "deferred") for tool in candidates}
    include_search = search_tool is not None and any(
        tier != "core" for tier in offered_tiers.values()
    )
    if include_search:
        offered_tiers[TOOL_SEARCH] = "core"
    # tool_search is decided here, not by the layers: present exactly when something is
    # deferred, whatever a profile picked (no veto applies to a meta tool, layers.py).
    hidden = tuple(hidden for hidden in selection.hidden if hidden.name != TOOL_SEARCH)
    if search_tool is not None and not include_search:
        hidden += (Hidden(TOOL_SEARCH, "L2b", "nothing is deferred, so nothing to search"),)
    return _laid_out(inputs, offered_tiers, hidden=hidden, plan=plan, budget=budget)


def _selected(inputs: _Inputs) -> Selection:
    """Layers L2b to L5 over the registry, from what the intents select and veto."""
    chosen = intent_selection(
        registry=inputs.registry,
        session=inputs.session,
        agent=inputs.agent,
        toolset_name=inputs.toolset_name,
        profile=inputs.profile,
    )
    return agent_tools(
        inputs.registry,
        ctx=inputs.ctx,
        names=chosen.names,
        names_reason=chosen.names_reason,
        exclude=chosen.exclude,
        allow=chosen.allow,
        deny=chosen.deny,
        agent_deny=chosen.agent_deny,
        disabled={**chosen.vetoes, **inputs.disabled},
    )


def _tier_plan(inputs: _Inputs, candidates: list[Tool], meta: list[Tool], budget: int) -> TierPlan:
    """The plan to store, with every candidate's tier (``tiers.tier_plan``)."""
    return tier_plan(
        session=inputs.session,
        agent=inputs.agent,
        toolset_name=inputs.toolset_name,
        budget=budget,
        key_budget=inputs.budget,
        strategy=inputs.strategy,
        stored=inputs.plan,
        usage=inputs.usage,
        candidates=candidates,
        meta=meta,
        notes=dict(_notes(inputs.registry, candidates)),
    )


def _notes(registry: ToolRegistry, tools: Sequence[Tool]) -> tuple[tuple[str, str], ...]:
    """(origin, note) of each origin with a note among ``tools``, by origin."""
    origins = sorted({tool.origin for tool in tools})
    return tuple((origin, registry.note(origin)) for origin in origins if registry.note(origin))


def _laid_out(
    inputs: _Inputs,
    tiers: dict[str, str],
    *,
    hidden: tuple[Hidden, ...],
    plan: TierPlan,
    budget: int,
) -> ResolvedToolset:
    """The offered tools (those with a tier) split by tier, and what the strategy sends."""
    registry, strategy = inputs.registry, inputs.strategy
    # One pass in registry order: both halves keep the order every array is built in.
    offered: list[Tool] = []
    resident: list[Tool] = []
    deferred: list[Tool] = []
    for tool in registry.all_tools():
        tier = tiers.get(tool.name)
        if tier is not None:
            offered.append(tool)
            (resident if tier == "core" else deferred).append(tool)
    sent = _sent(strategy, offered=offered, resident=resident, deferred=deferred)
    names = tuple(name for name, _ in sent)
    pieces = layout_array([text for _, text in sent])
    _, billed = _billed(strategy, names, pieces, resident, deferred=bool(deferred))
    room = budget - sum(count_cached(piece) for piece in billed)
    catalog, notes = _catalog(registry, plan, tiers, offered, deferred, room)
    return ResolvedToolset(
        strategy=strategy,
        offered=tuple(offered),
        resident=tuple(resident),
        deferred=tuple(deferred),
        tiers=tiers,
        hidden=hidden,
        plan=plan,
        array_pieces=pieces,
        array_names=names,
        catalog_pieces=catalog,
        fingerprint=hashlib.sha256("".join(pieces).encode()).hexdigest(),
        budget_tokens=budget,
        notes=notes,
    )


def _catalog(
    registry: ToolRegistry,
    plan: TierPlan,
    tiers: Mapping[str, str],
    offered: Sequence[Tool],
    deferred: Sequence[Tool],
    room: int,
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The catalog block the plan says, and the notes (origin, text) that end it; the
    smallest block instead where that would pass ``room`` (toolhub.tools.catalog)."""
    known = frozenset(name for name, _tier in plan.tiers)
    # Only the sources of tools the plan knows: a server registered later says nothing.
    notes = dict(_notes(registry, [tool for tool in offered if tool.name in known]))
    pieces = catalog_pieces(deferred, tiers, plan.catalog, known, notes)
    for fallback in (notes, {}):
        if sum(count_cached(piece) for piece in pieces) <= room:
            break
        notes = fallback
        pieces = least_pieces(deferred, known, notes, plan.catalog)
    said = tuple((origin, notes[origin]) for origin in plan.catalog.notes if notes.get(origin))
    return pieces, said


def _sent(
    strategy: str, *, offered: Sequence[Tool], resident: Sequence[Tool], deferred: Sequence[Tool]
) -> list[tuple[str, str]]:
    """Each entry of the array as (name, JSON), in order: under ``native`` every offered
    tool, the deferred ones flagged; else the resident ones, and under ``call_tool`` the
    meta tool that calls a loaded one, once anything is deferred."""
    if strategy == "native":
        deferred_names = {tool.name for tool in deferred}
        return [(tool.name, native_json(tool, tool.name in deferred_names)) for tool in offered]
    sent = [(tool.name, tool.wire_json) for tool in resident]
    if strategy == "call_tool" and deferred:
        sent.append((CALL_TOOL.name, CALL_TOOL.wire_json))
    return sent
