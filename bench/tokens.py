"""What the tools array costs: the built-in pack resident, 240 corpus tools deferred.

Registers the built-in pack (every tool available: a workspace and every interface
present) and the 240 corpus tools as deferred MCP-style tools, resolves for a
200,000-token window, and prints resident tokens, catalog tokens, their sum, and the
all-resident figure (the same tools, nothing deferred) for comparison. Targets: resident
<= 5% of the window, and at least an 85% cut against all-resident.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpus import corpus

from toolhub.tools import ToolContext, ToolRegistry, ToolServices, function, registry
from toolhub.tools.resolve import price, resolve

WINDOW = 200_000


class _Everything:
    """Stands in for every app interface, so availability does not hide built-ins."""

    def __getattr__(self, name: str) -> object:
        raise AttributeError(name)


def _registry(*, defer: bool) -> ToolRegistry:
    combined = ToolRegistry()
    for tool in registry.all_tools():
        combined.register(tool)
    for item in corpus():

        def body(**kwargs):
            return kwargs

        function(
            body,
            name=f"mcp__{item['name']}",
            description=item["description"],
            parameters=item["parameters"],
            registry=combined,
            defer=defer,
            source="mcp",
        )
    return combined


def main() -> None:
    everything = _Everything()
    services = ToolServices(
        notes=everything,
        messenger=everything,
        agents=everything,
        asker=everything,
        plan_mode=everything,
        tool_index=everything,
    )
    ctx = ToolContext(
        user_id="u",
        session_id="s",
        workspace=Path(tempfile.gettempdir()),
        services=services,
        env={"BRAVE_API_KEY": "k"},
    )
    deferred = resolve(_registry(defer=True), ctx=ctx, context_window_tokens=WINDOW)
    figures = price(deferred)
    all_resident = resolve(
        _registry(defer=False), ctx=ctx, context_window_tokens=WINDOW, budget_tokens=10**9
    )
    everything_resident = price(all_resident).resident
    share = figures.resident / WINDOW * 100
    cut = (1 - (figures.resident + figures.catalog) / everything_resident) * 100
    print(
        f"tokens-bench resident_tools={len(deferred.resident)} "
        f"deferred_tools={len(deferred.deferred)}"
    )
    print(f"tokens-bench resident_tokens {figures.resident} ({share:.2f}% of {WINDOW:,})")
    print(f"tokens-bench catalog_tokens {figures.catalog}")
    print(f"tokens-bench total_tokens {figures.resident + figures.catalog}")
    print(f"tokens-bench all_resident_tokens {everything_resident}")
    print(f"tokens-bench cut_vs_all_resident {cut:.1f}%")


if __name__ == "__main__":
    main()
