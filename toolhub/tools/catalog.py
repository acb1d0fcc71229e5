"""The catalog block: how a turn tells the model of its deferred tools, within a budget.

The catalog follows the tools array at the head of every request, so its bytes decide
what the provider's prompt cache can keep, and at thousands of tools a line per tool
would cost more than the array it replaces (about 8 tokens a tool: 72,000 at 10,000).
It therefore takes one of three forms, the most telling that fits the room the budget
leaves after the array (docs/accounting.md, "The catalog at scale"):

- ``names``: a line per deferred tool, by name, with its first description line when its
  tier is ``listed``;
- ``grouped``: a line per source (an MCP server, or the built-in tools) with how many
  tools it has, and the most used tools named under their source;
- ``counts``: one sentence saying how many tools there are from how many sources and that
  ``tool_search`` finds them, then the most used by name.

What MCP servers say about their tools (their instructions) ends the block: those of the
most used sources, within a ``NOTES_SHARE``th of the budget.

Invariants:
- The form, the tools it names and the sources whose notes it sends are decided when the
  tier plan is made and kept with it (``CatalogPlan``): a tool or server registered later
  is neither named, counted nor quoted until the plan is made again, so the block does
  not change under a running conversation; only a tool that goes away leaves it.
- Every piece ends in a newline and none starts with white space, so the block's tokens
  are the sum of its pieces' (cl100k never joins across such a boundary), and the choice
  counts exactly what will be sent.
- The array and the block never pass the budget: where a kept plan's block would (a
  server's instructions grown since, a stored plan read back wrong), the turn sends the
  smallest block instead (``least_pieces``), and the budget is never below what that and
  the meta tools cost (``toolhub.tools.tiers.least_budget``).
- Same inputs, same bytes: sources are sorted, and so are names, but for the most used,
  which go most used first; "most used" is by usage count, ties by name, and a tool never
  used is never "most used".
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from toolhub.tools.tokens import count_cached
from toolhub.tools.tool import Tool

FORMS = ("names", "grouped", "counts")
LISTED_LINE_BYTES = 120
CATALOG_HEADER = (
    "Deferred tools: available, but their schemas are not loaded. Load one with "
    'tool_search (query "select:<name>", or describe what you need) before calling it.\n'
)
GROUPED_HEADER = (
    "Deferred tools: available, but their schemas are not loaded, and they are too many "
    "to name each. Below: how many tools each source has, and the most used by name. "
    'Load one with tool_search (query "select:<name>", "select:<source>" for up to 20 of '
    "a source's tools, or describe what you need) before calling it.\n"
)
MOST_USED = "The most used:\n"
# The source of the tools that did not come from an MCP server: capitalised, so no MCP
# server (lower-case names only, toolhub.tools.mcp.config.SERVER_NAME) can be counted
# with them.
BUILT_IN = "Built-in"
# At most this share of the budget goes to what MCP servers say about their tools
# (their instructions end the block), so a few verbose servers cannot crowd out the rest.
NOTES_SHARE = 4


@dataclass(frozen=True, slots=True)
class CatalogPlan:
    """The catalog's form; unless it is ``names``, the tools it names (most used first);
    and the sources whose instructions end it (by origin)."""

    form: str = "names"
    named: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"form": self.form, "named": list(self.named), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, data: Any) -> CatalogPlan | None:
        """The plan as stored, or ``None`` when it is not one this version wrote (its tier
        plan is then made again, never guessed at)."""
        if not isinstance(data, Mapping) or data.get("form") not in FORMS:
            return None
        named, notes = data.get("named"), data.get("notes", [])
        if not (_strings(named) and _strings(notes)):
            return None
        return cls(form=data["form"], named=tuple(named), notes=tuple(notes))


def _strings(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


# A catalog that names every deferred tool: the most telling form.
NAMES = CatalogPlan()


@functools.lru_cache(maxsize=65_536)
def group_of(tool: Tool) -> str:
    """The source a tool is counted under: its MCP server, else the built-in tools."""
    kind, _, server = tool.origin.partition(":")
    return server if tool.source == "mcp" and kind == "mcp" and server else BUILT_IN


@functools.lru_cache(maxsize=65_536)
def listed_line(tool: Tool) -> str:
    """The first description line, cut at 120 UTF-8 bytes without splitting a character."""
    first = " ".join(tool.first_line.split())
    return first.encode()[:LISTED_LINE_BYTES].decode("utf-8", errors="ignore").rstrip()


def catalog_line(tool: Tool, *, listed: bool) -> str:
    line = listed_line(tool) if listed else ""
    return f"- {tool.name}: {line}\n" if line else f"- {tool.name}\n"


def catalog_pieces(
    deferred: Sequence[Tool],
    tiers: Mapping[str, str],
    plan: CatalogPlan,
    known: Collection[str],
    notes: Mapping[str, str],
) -> tuple[str, ...]:
    """The block as ``plan`` says: ``deferred`` (the turn's deferred tools) told of, only
    those ``known`` to the tier plan named or counted, then the ``notes`` (origin: text)
    of the sources the plan chose. Empty when there is nothing to say."""
    told = sorted((tool for tool in deferred if tool.name in known), key=lambda tool: tool.name)
    said = tuple(notes[origin] for origin in plan.notes if notes.get(origin))
    if not deferred:
        return said
    if plan.form == "names":
        return (CATALOG_HEADER, *(_names_line(tool, tiers) for tool in told), *said)
    by_name = {tool.name: tool for tool in told}
    named = [by_name[name] for name in plan.named if name in by_name]
    render = _grouped if plan.form == "grouped" else _counts
    return (*render(told, named), *said)


def least_pieces(
    deferred: Sequence[Tool], known: Collection[str], notes: Mapping[str, str], plan: CatalogPlan
) -> tuple[str, ...]:
    """The smallest block there is for these tools: the ``counts`` form naming none, with
    the notes ``plan`` chose or, where ``notes`` is empty, without. What a turn sends
    instead of its plan's block when that would pass the budget: a stored plan read back
    wrong, or a server's instructions grown since the plan was made."""
    counted = CatalogPlan(form="counts", notes=plan.notes if notes else ())
    return catalog_pieces(deferred, {}, counted, known, notes)


def catalog_plan(
    deferred: Sequence[Tool],
    tiers: Mapping[str, str],
    usage: Mapping[str, int],
    room: int,
    notes: tuple[str, ...] = (),
) -> CatalogPlan:
    """The most telling form whose block fits in ``room`` tokens (the chosen ``notes``
    apart), naming as many of the most used tools as fit; ``counts`` when nothing else
    does (the smallest there is)."""
    if _names_fit(deferred, tiers, room):
        return CatalogPlan(notes=notes)
    told = sorted(deferred, key=lambda tool: tool.name)
    used = sorted(
        (tool for tool in deferred if usage.get(tool.name, 0) > 0),
        key=lambda tool: (-usage[tool.name], tool.name),
    )
    grouped = _tokens(_grouped(told, []))
    if grouped <= room:
        counts = Counter(group_of(tool) for tool in told)
        named = _naming("grouped", used, room - grouped, counts)
        return CatalogPlan(form="grouped", named=named, notes=notes)
    named = _naming("counts", used, room - _tokens(_counts(told, [])), Counter())
    return CatalogPlan(form="counts", named=named, notes=notes)


def chosen_notes(
    notes: Mapping[str, str], tools: Sequence[Tool], usage: Mapping[str, int], budget: int
) -> tuple[str, ...]:
    """The origins whose ``notes`` a new plan sends: those of the sources used most first
    (then by origin), while they fit in a ``NOTES_SHARE``th of the ``budget``."""
    used: Counter[str] = Counter()
    for tool in tools:
        used[tool.origin] += max(usage.get(tool.name, 0), 0)
    room = budget // NOTES_SHARE
    chosen = []
    for origin in sorted(notes, key=lambda origin: (-used[origin], origin)):
        cost = count_cached(notes[origin])
        if cost <= room:
            room -= cost
            chosen.append(origin)
    return tuple(chosen)


def _names_fit(deferred: Sequence[Tool], tiers: Mapping[str, str], room: int) -> bool:
    """Whether the ``names`` form fits in ``room``: counted line by line, and given up as
    soon as it does not (at thousands of tools, after a few hundred lines)."""
    room -= count_cached(CATALOG_HEADER)
    for tool in deferred:
        room -= count_cached(_names_line(tool, tiers))
        if room < 0:
            return False
    return True


def _naming(form: str, used: Sequence[Tool], room: int, counts: Counter[str]) -> tuple[str, ...]:
    """The most used tools ``form`` names, most used first, while they fit in ``room``
    more tokens, each costed exactly: its line, and what naming the first of a source
    (``grouped``) or the first at all (``counts``) adds."""
    named: list[str] = []
    opened: set[str] = set()
    for tool in used:
        cost = count_cached(f"- {tool.name}\n")
        group = group_of(tool)
        if form == "grouped" and group not in opened:
            cost += count_cached(_group_line(group, counts[group], listed=True))
            cost -= count_cached(_group_line(group, counts[group], listed=False))
        elif form == "counts" and not named:
            cost += count_cached(MOST_USED)
        if cost > room:
            break
        room -= cost
        opened.add(group)
        named.append(tool.name)
    return tuple(named)


def smallest_tokens(deferred: Sequence[Tool]) -> int:
    """What the ``counts`` form costs for these tools, naming none: the form chosen when
    no other fits, so a new plan keeps this much of the budget free once anything is
    deferred, and the catalog always fits."""
    return _tokens(_counts(deferred, []))


def _tokens(pieces: Sequence[str]) -> int:
    return sum(count_cached(piece) for piece in pieces)


def _names_line(tool: Tool, tiers: Mapping[str, str]) -> str:
    return catalog_line(tool, listed=tiers.get(tool.name) == "listed")


def _grouped(told: Sequence[Tool], named: Sequence[Tool]) -> tuple[str, ...]:
    counts = Counter(group_of(tool) for tool in told)
    by_group: dict[str, list[Tool]] = {}
    for tool in named:
        by_group.setdefault(group_of(tool), []).append(tool)
    pieces = [GROUPED_HEADER]
    for group in sorted(counts):
        listed = by_group.get(group, [])
        pieces.append(_group_line(group, counts[group], listed=bool(listed)))
        pieces.extend(f"- {tool.name}\n" for tool in listed)
    return tuple(pieces)


def _group_line(group: str, count: int, *, listed: bool) -> str:
    return (
        f"{group}: {_tools(count)}, the most used:\n" if listed else f"{group}: {_tools(count)}\n"
    )


def _counts(told: Sequence[Tool], named: Sequence[Tool]) -> tuple[str, ...]:
    sources = len({group_of(tool) for tool in told})
    head = (
        f"Deferred tools: {_tools(len(told))} from {sources:,} source{'s' if sources != 1 else ''} "
        "are available, but their schemas are not loaded and they are too many to list. "
        "Describe what you need to tool_search and it loads the best matches (or query "
        '"select:<name>", or "select:<source>" for up to 20 of a source\'s tools) before you '
        "call one.\n"
    )
    if not named:
        return (head,)
    return (head, MOST_USED, *(f"- {tool.name}\n" for tool in named))


def _tools(count: int) -> str:
    return f"{count:,} tool{'s' if count != 1 else ''}"
