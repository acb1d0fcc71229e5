"""``tool_search``: load deferred tools by exact name or by query.

It searches only the index the turn provides (``ToolServices.tool_index``), which holds
just the tools that turn's resolution allows, so it never escalates past a veto. Without
an index (nothing is deferred) it is unavailable. An empty result says what can be found,
so a model is never dead-ended.
"""

from __future__ import annotations

from toolhub.tools.context import ToolContext
from toolhub.tools.schema import canonical_json
from toolhub.tools.tool import function

SELECT_PREFIX = "select:"


def _has_index(ctx: ToolContext) -> bool:
    return ctx.services.tool_index is not None


@function(can_use=_has_index, label="Find tools")
def tool_search(query: str, limit: int = 5, ctx: ToolContext | None = None) -> str:
    """Find tools that are available but not loaded yet, and load their full schemas.

    Use "select:name_a,name_b" to load exact tools, or describe what you need.

    Args:
        query: "select:" followed by comma-separated names, or keywords.
        limit: Most tools to return for a keyword query.
    """
    index = ctx.services.tool_index
    if query.strip().lower().startswith(SELECT_PREFIX):
        found, missing = index.select(query.strip()[len(SELECT_PREFIX) :].split(","))
    else:
        found, missing = [hit.tool for hit in index.search(query, limit)], []
    if not found:
        return (
            f"No tool matched {query!r}. Searchable tools: {', '.join(index.names)}. "
            'Try other words, or load one by name with "select:<name>".'
        )
    lines = [canonical_json(tool.provider_schema()) for tool in found]
    if missing:
        lines.append("Not available: " + ", ".join(missing))
    return "\n".join(lines)
