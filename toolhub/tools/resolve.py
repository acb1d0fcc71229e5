"""Resolution: from intent to the exact tools array a turn sends, deterministically.

``resolve`` combines the session's intent, the agent's intent, a profile, global disables,
the channel, mode and attendance (in ``ctx``) with the live registry, and returns a
``ResolvedToolset``: the offered tools in registry order, the resident/deferred split by
tier, the canonical provider array and its sha256 fingerprint, the catalog block for the
system prompt, and for every registered tool left out, the first layer and why.

Invariants (docs/architecture.md, hard lines 1 and 2):
- Nothing is stored but intent; a tool registered tomorrow reaches every "all tools"
  intent on its next resolution.
- Same inputs, same bytes: order comes from the registry (never a set or dict order),
  JSON is canonical, and the array is laid out as ``[\\n`` + pieces joined by ``,\\n`` +
  ``\\n]`` so each tool's piece ends on a tokenizer boundary and counts exactly.
- If anything is deferred, ``tool_search`` is resident, whatever else would remove it;
  it is never deferred.
- Results are memoized on (registry generation, every input that can change the output),
  so an unchanged turn does not recompute.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolhub.tools.approval import DENY
from toolhub.tools.context import ToolContext
from toolhub.tools.intent import ToolIntent
from toolhub.tools.layers import Hidden, agent_tools, availability
from toolhub.tools.presets import TOOLSETS, UnknownToolsetError, toolset_members
from toolhub.tools.registry import ToolRegistry
from toolhub.tools.registry import registry as default_registry
from toolhub.tools.schema import canonical_json
from toolhub.tools.search import ToolIndex
from toolhub.tools.tokens import count_cached
from toolhub.tools.tool import Tool, function

STRATEGIES = ("call_tool", "promote", "native")
TIERS = ("core", "listed", "deferred")
TOOL_SEARCH = "tool_search"
WEB_SEARCH = "web_search"
DEFAULT_CONTEXT_WINDOW = 200_000
DEFAULT_BUDGET_SHARE = 0.05
# A schema this large stays out of the array until asked for, unless it has been used.
BIG_TOOL_TOKENS = 1_500
LISTED_LINE_BYTES = 120
ARRAY_HEAD = "[\n"
CATALOG_HEADER = (
    "Deferred tools: available, but their schemas are not loaded. Load one with "
    'tool_search (query "select:<name>", or describe what you need) before calling it.\n'
)
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


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    """A tool profile as the apps store it: intent, never an expansion."""

    name: str
    mode: str  # "all_except" | "only"
    tools: tuple[str, ...] = ()
    # Tool -> auto | ask | deny, as the person set it (toolhub.tools.approval), by name.
    approvals: tuple[tuple[str, str], ...] = ()


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


@functools.lru_cache(maxsize=65_536)
def listed_line(tool: Tool) -> str:
    """The first description line, cut at 120 UTF-8 bytes without splitting a character."""
    first = " ".join(tool.first_line.split())
    return first.encode()[:LISTED_LINE_BYTES].decode("utf-8", errors="ignore").rstrip()


def layout_array(texts: list[str]) -> tuple[str, ...]:
    """``[\n`` + each tool's JSON ending in ``,\n`` (the last in ``\n]``)."""
    if not texts:
        return ("[]",)
    return (ARRAY_HEAD, *(text + ",\n" for text in texts[:-1]), texts[-1] + "\n]")


def native_json(tool: Tool, deferred: bool) -> str:
    if not deferred:
        return tool.wire_json
    return canonical_json({**tool.provider_schema(), "defer_loading": True})


def token_cost(resolved: ResolvedToolset) -> TokenCost:
    """Tokens of the resident array and of the catalog block, each exactly. Under
    ``native`` the deferred entries travel flagged ``defer_loading`` and are not billed
    until loaded, so the resident half is the array without them."""
    pieces, names = resolved.array_pieces, resolved.array_names
    if resolved.strategy == "native" and resolved.deferred:
        names = tuple(tool.name for tool in resolved.resident)
        pieces = layout_array([tool.wire_json for tool in resolved.resident])
    per_tool = tuple(
        (name, count_cached(piece)) for name, piece in zip(names, pieces[1:], strict=True)
    )
    resident = count_cached(pieces[0]) + sum(tokens for _, tokens in per_tool)
    catalog = sum(count_cached(piece) for piece in resolved.catalog_pieces)
    return TokenCost(resident=resident, catalog=catalog, per_tool=per_tool)


def array_frame_tokens() -> int:
    """What an array costs beyond its tools' pieces: the head, and what the last tool's
    closing costs over a separator (every tool's JSON ends in "}", so it is the same)."""
    return count_cached(ARRAY_HEAD) + count_cached("}\n]") - count_cached("},\n")


def tool_tokens(tool: Tool) -> int:
    """What a tool costs resident: its piece of the array (tools are immutable)."""
    return tool.wire_tokens


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
    budget = budget_tokens or int(context_window_tokens * DEFAULT_BUDGET_SHARE)
    profile = None
    toolset_name = session.toolset or agent.toolset
    if toolset_name is not None and profile_lookup is not None:
        profile = profile_lookup(toolset_name)
    disabled = dict(disabled or {})

    # Every input is a frozen value, so the key is a plain tuple: no serialization here.
    key = (
        registry.uid,
        registry.generation,
        session,
        agent,
        profile,
        tuple(sorted(disabled.items())),
        strategy,
        plan,
        tuple(sorted((usage or {}).items())),
        budget,
        _gate_state(registry, ctx),
    )
    cached = _memo.get(key)
    if cached is not None:
        return cached
    resolved = _resolve(
        _Inputs(
            registry=registry,
            session=session,
            agent=agent,
            toolset_name=toolset_name,
            profile=profile,
            disabled=disabled,
            ctx=ctx,
            strategy=strategy,
            plan=plan,
            usage=usage or {},
            budget=budget,
        )
    )
    _memo.put(key, resolved)
    return resolved


@dataclass(frozen=True, slots=True)
class _Inputs:
    """Everything one resolution depends on (the memo key is made of the same values)."""

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


def _selection(
    registry: ToolRegistry,
    session: ToolIntent,
    agent: ToolIntent,
    toolset_name: str | None,
    profile: ProfileSpec | None,
) -> IntentSelection:
    enabled = next((v for v in (session.enabled, agent.enabled) if v is not None), True)
    picked = session.picked if session.picked is not None else agent.picked
    web = session.web_search if session.web_search is not None else agent.web_search
    names: frozenset[str] | None = None
    reason = "not among the picked tools"
    exclude: dict[str, str] = {}
    if not enabled:
        names, reason = frozenset(), "tools are off in this conversation"
    elif picked is not None:
        names = frozenset(picked)
    elif toolset_name is not None:
        if profile is not None and profile.mode == "only":
            names, reason = frozenset(profile.tools), f"not in the profile '{profile.name}'"
        elif profile is not None:
            exclude = dict.fromkeys(profile.tools, f"removed from the profile '{profile.name}'")
        elif toolset_name in TOOLSETS:
            names = toolset_members(toolset_name, registry)
            reason = f"not in the '{toolset_name}' toolset"
        else:
            raise UnknownToolsetError(f"no profile or preset named '{toolset_name}'")
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
        names_reason=reason,
        exclude=exclude,
        allow=allowed,
        deny=tuple(session.disabled),
        agent_deny=tuple(agent.disabled),
        vetoes=vetoes,
    )


def _build_tiers(
    candidates: list[Tool], usage: Mapping[str, int], budget: int, meta: Sequence[Tool]
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


def _resolve(inputs: _Inputs) -> ResolvedToolset:
    """Select (L2b to L5, ``layers.agent_tools``), tier (L6, the stored plan or a new one),
    then lay out the array the strategy sends."""
    registry, strategy = inputs.registry, inputs.strategy
    chosen = _selection(registry, inputs.session, inputs.agent, inputs.toolset_name, inputs.profile)
    selection = agent_tools(
        registry,
        ctx=inputs.ctx,
        names=chosen.names,
        names_reason=chosen.names_reason,
        exclude=chosen.exclude,
        allow=chosen.allow,
        deny=chosen.deny,
        agent_deny=chosen.agent_deny,
        disabled={**chosen.vetoes, **inputs.disabled},
    )
    candidates = [tool for tool in selection.tools if tool.name != TOOL_SEARCH]
    search_tool = registry.get(TOOL_SEARCH)
    tiers, new_plan = _tier_plan(inputs, candidates, search_tool)

    offered_tiers = {tool.name: tiers[tool.name] for tool in candidates}
    include_search = search_tool is not None and any(
        tier != "core" for tier in offered_tiers.values()
    )
    if include_search:
        offered_tiers[TOOL_SEARCH] = "core"
    # One pass in registry order: both halves keep the order every array is built in.
    offered: list[Tool] = []
    resident: list[Tool] = []
    deferred: list[Tool] = []
    for tool in registry.all_tools():
        tier = offered_tiers.get(tool.name)
        if tier is not None:
            offered.append(tool)
            (resident if tier == "core" else deferred).append(tool)
    deferred_names = {tool.name for tool in deferred}
    # tool_search is decided here, not by the layers: present exactly when something is
    # deferred, whatever a profile picked (no veto applies to a meta tool, layers.py).
    hidden = tuple(hidden for hidden in selection.hidden if hidden.name != TOOL_SEARCH)
    if search_tool is not None and not include_search:
        hidden += (Hidden(TOOL_SEARCH, "L2b", "nothing is deferred, so nothing to search"),)

    if strategy == "native":
        sent = [(tool.name, native_json(tool, tool.name in deferred_names)) for tool in offered]
    else:
        sent = [(tool.name, tool.wire_json) for tool in resident]
        if strategy == "call_tool" and deferred:
            sent.append((CALL_TOOL.name, CALL_TOOL.wire_json))
    pieces = layout_array([text for _, text in sent])
    fingerprint = hashlib.sha256("".join(pieces).encode()).hexdigest()
    origins = sorted({tool.origin for tool in offered})
    notes = tuple((origin, registry.note(origin)) for origin in origins if registry.note(origin))
    return ResolvedToolset(
        strategy=strategy,
        offered=tuple(offered),
        resident=tuple(resident),
        deferred=tuple(deferred),
        tiers=offered_tiers,
        hidden=hidden,
        plan=new_plan,
        array_pieces=pieces,
        array_names=tuple(name for name, _ in sent),
        catalog_pieces=_catalog_pieces(deferred, offered_tiers)
        + tuple(text for _origin, text in notes),
        fingerprint=fingerprint,
        budget_tokens=inputs.budget,
        notes=notes,
    )


def _tier_plan(
    inputs: _Inputs, candidates: list[Tool], search_tool: Tool | None
) -> tuple[dict[str, str], TierPlan]:
    """Each candidate's tier, and the plan to store: the stored one while its key (the
    intents, toolset, budget and strategy) holds, else a new one from the usage counts."""
    plan_key = hashlib.sha256(
        canonical_json(
            [
                inputs.session.to_json(),
                inputs.agent.to_json(),
                inputs.toolset_name,
                inputs.budget,
                inputs.strategy,
            ]
        ).encode()
    ).hexdigest()[:32]
    plan = inputs.plan
    if plan is None or plan.key != plan_key:
        meta = [search_tool] if search_tool is not None else []
        if inputs.strategy == "call_tool" and meta:
            meta.append(CALL_TOOL)
        tiers = _build_tiers(candidates, inputs.usage, inputs.budget, meta)
    else:
        kept = dict(plan.tiers)
        # A tool registered after the plan was made starts deferred: the array of a
        # running conversation does not grow by itself.
        tiers = {tool.name: kept.get(tool.name, "deferred") for tool in candidates}
        tiers.update({name: tier for name, tier in kept.items() if name not in tiers})
    # Registry order (deterministic already): no sort on this path.
    return tiers, TierPlan(key=plan_key, tiers=tuple(tiers.items()))


def _catalog_pieces(deferred: list[Tool], tiers: Mapping[str, str]) -> tuple[str, ...]:
    if not deferred:
        return ()
    by_name = {tool.name: tool for tool in deferred}
    return (
        CATALOG_HEADER,
        *(_catalog_line(by_name[name], listed=tiers[name] == "listed") for name in sorted(by_name)),
    )


def _catalog_line(tool: Tool, *, listed: bool) -> str:
    line = listed_line(tool) if listed else ""
    return f"- {tool.name}: {line}\n" if line else f"- {tool.name}\n"


def count_ahead(tools: Iterable[Tool]) -> int:
    """Count now every piece a resolution may send of each tool: its array piece where it
    may be resident (never for one declared deferred), and its catalog line in either
    form. Tools are immutable and counts are kept by text, so the first resolution after
    tools register only looks them up. Returns how many tools were counted."""
    counted = 0
    for tool in tools:
        count_cached(_catalog_line(tool, listed=False))
        if not tool.defer:
            _ = tool.wire_tokens
            count_cached(_catalog_line(tool, listed=True))
        counted += 1
    return counted


_stop_counting = threading.Event()
_counting: list[threading.Thread] = []
# How long exit waits for a count in progress (one takes microseconds; loading the
# encoding, about a second): a native call must not be torn down under it.
_EXIT_WAIT_SECONDS = 5.0


def count_ahead_in_background(tools: Iterable[Tool]) -> threading.Thread:
    """``count_ahead`` on a daemon thread: a server starting up counts its registered
    tools while it waits for its first request."""
    todo = list(tools)

    def run() -> None:
        for tool in todo:
            if _stop_counting.is_set():
                return
            count_ahead([tool])

    thread = threading.Thread(target=run, name="toolhub-token-counts", daemon=True)
    _counting.append(thread)
    thread.start()
    return thread


@atexit.register
def _stop_counting_ahead() -> None:
    _stop_counting.set()
    for thread in _counting:
        thread.join(timeout=_EXIT_WAIT_SECONDS)
