"""``tool_search``: load deferred tools by exact name or by query.

It searches only the index the turn provides (``ToolServices.tool_index``), which holds
just the tools that turn's resolution allows, so it never escalates past a veto. Without
an index (nothing is deferred) it is unavailable. It loads exactly the tools its result
carries schemas for: exact names for ``select:``, else the search's hits. A query that
clears no relevance floor (``toolhub.tools.search``) loads nothing and says so, naming
the nearest tools; an empty result always says what can be found, so a model is never
dead-ended.
"""

from __future__ import annotations

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


def _has_index(ctx: ToolContext) -> bool:
    return ctx.services.tool_index is not None


@function(can_use=_has_index, label="Find tools")
def tool_search(query: str, limit: int = 5, *, ctx: ToolContext) -> str:
    """Find tools that are available but not loaded yet, and load their full schemas.

    Use "select:name_a,name_b" to load exact tools, or describe what you need.

    Args:
        query: "select:" followed by comma-separated names, or keywords.
        limit: Most tools to return for a keyword query.
    """
    index = present(ctx.services.tool_index, "the turn's tool index")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(
            f"the query is {len(query):,} characters; at most {MAX_QUERY_CHARS:,}: describe "
            'the tool in a few words, or name it with "select:<name>"'
        )
    if query.strip().lower().startswith(SELECT_PREFIX):
        found, missing = index.select(query.strip()[len(SELECT_PREFIX) :].split(","))
        if not found:
            return (
                f"No tool matched {query!r}. Searchable tools: {', '.join(index.names)}. "
                'Try other words, or load one by name with "select:<name>".'
            )
    else:
        hits = index.search(query, limit)
        if not hits:
            return _no_match(query, hits.nearest, index.names)
        found, missing = [hit.tool for hit in hits], []
    lines = [canonical_json(tool.provider_schema()) for tool in found]
    if missing:
        lines.append("Not available: " + ", ".join(missing))
    return "\n".join(lines)


def _no_match(query: str, nearest: tuple[str, ...], names: list[str]) -> str:
    text = f"No tool matched {query!r}, so none was loaded."
    if nearest:
        text += f" Nearest: {', '.join(nearest)}."
    if len(names) <= _LIST_ALL_UP_TO:
        text += f" Searchable tools: {', '.join(names)}."
    return text + ' Load one by name with "select:<name>", or describe the task in other words.'
