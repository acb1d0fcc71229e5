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

Invariants:
- The form and the tools it names are decided when the tier plan is made and kept with
  it (``CatalogPlan``): a tool registered later is neither named nor counted until the
  plan is made again, so the block does not change under a running conversation; only a
  tool that goes away leaves it.
- Every piece ends in a newline and none starts with white space, so the block's tokens
  are the sum of its pieces' (cl100k never joins across such a boundary), and the choice
  counts exactly what will be sent.
- Same inputs, same bytes: sources and names are sorted; "most used" is by usage count,
  ties by name, and a tool never used is never "most used".
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    'Load one with tool_search (query "select:<name>", "select:<source>__*" for a '
    "source's tools, or describe what you need) before calling it.\n"
)
MOST_USED = "The most used:\n"
# The group of a tool that did not come from an MCP server.
BUILT_IN = "built-in"


@dataclass(frozen=True, slots=True)
class CatalogPlan:
    """The catalog's form and, unless it is ``names``, the tools it names (by name)."""

    form: str = "names"
    named: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"form": self.form, "named": list(self.named)}

    @classmethod
    def from_json(cls, data: Any) -> CatalogPlan:
        if not isinstance(data, Mapping) or data.get("form") not in FORMS:
            return NAMES
        named = data.get("named")
        names = tuple(str(name) for name in named) if isinstance(named, list) else ()
        return cls(form=str(data["form"]), named=names)


# A catalog that names every deferred tool: what a plan made before the catalog had a
# budget (or a plan read without one) sends.
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
    deferred: Sequence[Tool], tiers: Mapping[str, str], plan: CatalogPlan, known: Collection[str]
) -> tuple[str, ...]:
    """The block for ``deferred`` (the turn's deferred tools) as ``plan`` says: only those
    ``known`` to the tier plan are named or counted. Empty when nothing is deferred."""
    if not deferred:
        return ()
    told = sorted((tool for tool in deferred if tool.name in known), key=lambda tool: tool.name)
    if plan.form == "names":
        return (CATALOG_HEADER, *(_names_line(tool, tiers) for tool in told))
    named = frozenset(plan.named)
    if plan.form == "grouped":
        return _grouped(told, [tool for tool in told if tool.name in named])
    return _counts(told, [tool for tool in told if tool.name in named])


def catalog_plan(
    deferred: Sequence[Tool], tiers: Mapping[str, str], usage: Mapping[str, int], room: int
) -> CatalogPlan:
    """The most telling form whose block fits in ``room`` tokens, naming as many of the
    most used tools as fit; ``counts`` when nothing else does (the smallest there is)."""
    if _names_fit(deferred, tiers, room):
        return NAMES
    told = sorted(deferred, key=lambda tool: tool.name)
    used = sorted(
        (tool for tool in deferred if usage.get(tool.name, 0) > 0),
        key=lambda tool: (-usage[tool.name], tool.name),
    )
    grouped = _tokens(_grouped(told, []))
    if grouped <= room:
        counts = Counter(group_of(tool) for tool in told)
        return _naming("grouped", used, room - grouped, counts)
    return _naming("counts", used, room - _tokens(_counts(told, [])), Counter())


def _names_fit(deferred: Sequence[Tool], tiers: Mapping[str, str], room: int) -> bool:
    """Whether the ``names`` form fits in ``room``: counted line by line, and given up as
    soon as it does not (at thousands of tools, after a few hundred lines)."""
    room -= count_cached(CATALOG_HEADER)
    for tool in deferred:
        room -= count_cached(_names_line(tool, tiers))
        if room < 0:
            return False
    return True


def _naming(form: str, used: Sequence[Tool], room: int, counts: Counter[str]) -> CatalogPlan:
    """``form`` naming the most used tools while they fit in ``room`` more tokens, each
    costed exactly: its line, and what naming the first of a source (``grouped``) or the
    first at all (``counts``) adds."""
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
    return CatalogPlan(form=form, named=tuple(sorted(named)))


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
        '"select:<name>", or "select:<source>__*" for a source\'s tools) before you call one.\n'
    )
    if not named:
        return (head,)
    return (head, MOST_USED, *(f"- {tool.name}\n" for tool in named))


def _tools(count: int) -> str:
    return f"{count:,} tool{'s' if count != 1 else ''}"
