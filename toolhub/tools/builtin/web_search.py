"""``web_search``: search the web through the Brave Search API.

The key comes from ``BRAVE_API_KEY``; without it the tool is unavailable (layer 4) with
that reason. The endpoint is ``RuntimeSettings.search_url`` (Brave's by default).
API: https://api-dashboard.search.brave.com/app/documentation/web-search
"""

from __future__ import annotations

import httpx

from toolhub.tools.context import ToolContext
from toolhub.tools.decorator import function

API_KEY_ENV = "BRAVE_API_KEY"


@function(requires_env=(API_KEY_ENV,), cache=True, cache_ttl=600, label="Web search")
async def web_search(query: str, count: int = 5, *, ctx: ToolContext) -> str:
    """Search the web and return the top results: title, address and snippet.

    Args:
        query: What to search for.
        count: How many results (1 to 20).
    """
    count = min(max(count, 1), 20)
    async with httpx.AsyncClient(timeout=ctx.settings.fetch_timeout, trust_env=False) as client:
        response = await client.get(
            ctx.settings.search_url,
            params={"q": query, "count": count},
            headers={"X-Subscription-Token": ctx.env[API_KEY_ENV], "Accept": "application/json"},
        )
    if response.status_code != 200:
        raise RuntimeError(f"search provider answered {response.status_code}")
    results = response.json().get("web", {}).get("results", [])[:count]
    if not results:
        return f"no results for {query!r}"
    return "\n\n".join(
        f"{index}. {item.get('title', '').strip()}\n{item.get('url', '')}\n"
        f"{item.get('description', '').strip()}"
        for index, item in enumerate(results, 1)
    )
