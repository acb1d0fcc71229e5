"""``tool_search``: load deferred tools by exact name, by pattern or by query.

It searches only the index the turn provides (``ToolServices.tool_index``), which holds
just the tools that turn's resolution allows, so it never escalates past a veto. Without
an index (nothing is deferred) it is unavailable. It loads exactly the tools its result
carries schemas for: for ``select:``, exact names, a glob (``github__*``) or a source's
name (``github``, its ``github__`` tools); else the search's hits. A query that clears no
relevance floor (``toolhub.tools.search``) loads nothing and says so, naming the nearest
tools; an empty result always says what can be found, so a model is never dead-ended.

Invariant: what one call answers is bounded whatever the registry's size: at most
``SELECT_MAX`` schemas for ``select:`` (a pattern matching more loads nothing and says how
to narrow it), at most ``SEARCH_MAX`` hits for a query, and a miss names at most
``_LIST_ALL_UP_TO`` tools.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools

from toolhub.tools.context import ToolContext, present
from toolhub.tools.decorator import function
from toolhub.tools.schema import canonical_json

SELECT_PREFIX = "select:"
# A query is a few words or a list of names: anything longer is refused before it costs
# the process a search (a 1 MB query took seconds of the web process's CPU).
MAX_QUERY_CHARS = 1_000
# Up to this many searchable tools, a query that matched nothing lists them all: cheaper
# than a retry. Past it, the nearest names are enough and the whole list would be noise.
_LIST_ALL_UP_TO = 20
# What one call may load: each schema joins the conversation, so a pattern matching a
# large server's hundreds of tools would flood the context (docs/tool-search.md).
SELECT_MAX = 20
SEARCH_MAX = 10
# Tool names of an MCP server start with its name and this (toolhub.tools.mcp.config).
_SOURCE_SEPARATOR = "__"
_GLOB = frozenset("*?[")
# A missed select: suggests names for this many of its misses, each from this many alike.
_NEAR_MISSES = 3
_NEAR_POOL = 500


def _has_index(ctx: ToolContext) -> bool:
    return ctx.services.tool_index is not None


@function(can_use=_has_index, label="Find tools")
def tool_search(query: str, limit: int = 5, *, ctx: ToolContext) -> str:
    """Find tools that are available but not loaded yet, and load their full schemas.

    Use "select:name_a,name_b" to load exact tools ("select:github__*" for a source's
    tools, up to 20 at once), or describe what you need.

    Args:
        query: "select:" followed by comma-separated names or patterns, or keywords.
        limit: Most tools to return for a keyword query (at most 10).
    """
    index = present(ctx.services.tool_index, "the turn's tool index")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(
            f"the query is {len(query):,} characters; at most {MAX_QUERY_CHARS:,}: describe "
            'the tool in a few words, or name it with "select:<name>"'
        )
    if query.strip().lower().startswith(SELECT_PREFIX):
        asked = query.strip()[len(SELECT_PREFIX) :].split(",")
        names, refusal = _selected(asked, index.names, index.sources)
        if refusal:
            return refusal
        found, missing = index.select(names)
        if not found:
            return _no_select(query, missing, index.names)
    else:
        hits = index.search(query, min(max(limit, 1), SEARCH_MAX))
        if not hits:
            return _no_match(query, hits.nearest, index.names)
        found, missing = [hit.tool for hit in hits], []
    lines = [canonical_json(tool.provider_schema()) for tool in found]
    if missing:
        lines.append("Not available: " + ", ".join(missing))
    return "\n".join(lines)


class _Names:
    """An index's names as ``select:`` matches them, each view made once per call."""

    def __init__(self, names: list[str], sources: dict[str, str]) -> None:
        self.names = names
        self.exact = frozenset(names)
        self.sources = sources

    @functools.cached_property
    def lowered(self) -> list[tuple[str, str]]:
        # Tool names are case-sensitive, but a model writing a pattern means the letters.
        return [(name.lower(), name) for name in self.names]

    @functools.cached_property
    def by_source(self) -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = {}
        for name in self.names:
            grouped.setdefault(self.sources.get(name, "").lower(), []).append(name)
        return grouped


def _selected(asked: list[str], names: list[str], sources: dict[str, str]) -> tuple[list[str], str]:
    """The exact names ``asked`` stands for (a pattern or a source's name expanded, in
    name order), or a refusal when they are more than one call loads."""
    items = list(dict.fromkeys(item.strip() for item in asked if item.strip()))
    if len(items) > SELECT_MAX:
        return [], (
            f"That asks for {len(items):,} names or patterns, more than the {SELECT_MAX} one "
            "call loads, so none was loaded. Load fewer at a time."
        )
    view = _Names(names, sources)
    wanted: dict[str, None] = {}
    for item in items:
        matches = None if item in view.exact else _pattern_matches(item, view)
        if matches is None:
            wanted[item] = None
        elif len(matches) > SELECT_MAX:
            return [], _too_many(item, matches)
        else:
            wanted.update(dict.fromkeys(matches))
    if len(wanted) > SELECT_MAX:
        return [], (
            f"That names {len(wanted):,} tools, more than the {SELECT_MAX} one call loads, "
            "so none was loaded. Load fewer at a time."
        )
    return list(wanted), ""


def _too_many(item: str, matches: list[str]) -> str:
    sample = ", ".join(matches[:_LIST_ALL_UP_TO])
    return (
        f"{item!r} matches {len(matches):,} tools, more than the {SELECT_MAX} one call "
        f"loads, so none was loaded. Narrow the pattern (such as {_stem(item)}issue*), name "
        f"the tools you need, or describe the task as a query. The first of them: {sample}."
    )


def _pattern_matches(item: str, view: _Names) -> list[str] | None:
    """The names ``item`` matches, in order, when it is a glob (``github__*issue*``) or a
    source's name in any case (``github``, ``github__``, ``Built-in``: the tools the
    catalog counts under it); ``None`` for anything else, which is taken as an exact name."""
    if _GLOB & set(item):
        pattern = item.lower()
        return sorted(
            name for lowered, name in view.lowered if fnmatch.fnmatchcase(lowered, pattern)
        )
    source = item.lower().removesuffix(_SOURCE_SEPARATOR)
    return sorted(view.by_source.get(source, [])) or None


def _stem(item: str) -> str:
    """What a narrower pattern starts with: a glob before its first wildcard, or a
    source's tools' prefix."""
    if _GLOB & set(item):
        return item[: min(item.index(c) for c in _GLOB if c in item)]
    return item if item.endswith(_SOURCE_SEPARATOR) else item + _SOURCE_SEPARATOR


def _no_select(query: str, missing: list[str], names: list[str]) -> str:
    if len(names) <= _LIST_ALL_UP_TO:
        known = f"Searchable tools: {', '.join(names)}."
    else:
        close = {near for name in missing[:_NEAR_MISSES] for near in _near(name, names)}
        known = f"Nearest names: {', '.join(sorted(close))}." if close else ""
    text = f"No tool matched {query[:200]!r}, so none was loaded. {known}".rstrip()
    return text + ' Try other words, or load one by name with "select:<name>".'


def _near(name: str, names: list[str]) -> list[str]:
    """Up to three names like ``name``, compared with those of its source (the part before
    ``__``) or sharing its first letters, never the whole registry: a fuzzy comparison
    with each of 10,000 names took a third of a second."""
    source, separator, _ = name.partition(_SOURCE_SEPARATOR)
    start = source + separator if separator else name[:3]
    alike = [other for other in names if other.startswith(start)][:_NEAR_POOL]
    return difflib.get_close_matches(name, alike, n=3, cutoff=0.6)


def _no_match(query: str, nearest: tuple[str, ...], names: list[str]) -> str:
    text = f"No tool matched {query!r}, so none was loaded."
    if nearest:
        text += f" Nearest: {', '.join(nearest)}."
    if len(names) <= _LIST_ALL_UP_TO:
        text += f" Searchable tools: {', '.join(names)}."
    return text + ' Load one by name with "select:<name>", or describe the task in other words.'
