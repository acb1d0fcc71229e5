"""What the tools array costs, out of the box and with 240 MCP tools deferred.

First the default install: the built-in pack as shipped (every tool available: a
workspace and every interface present), the rarely used built-ins deferred, under the
default ``call_tool`` strategy; printed beside the same pack with nothing deferred.
Then the built-in pack with the 240 corpus tools as deferred MCP-style tools. Each for a
200,000-token window: resident tokens, catalog tokens, their sum, the all-resident figure
(the same tools, nothing deferred) and the cut against it. Targets: resident <= 5% of the
window, and at least an 85% cut against all-resident with the corpus.

Last, the registry at scale: 50, 500, 5,000 and 10,000 tools (the built-in pack and
corpus tools cycled over MCP servers named by their prefix, a server per copy, about six
tools each), one line each: ``tokens-bench tools=N tool_tokens_per_turn=T`` (the resident
array plus the catalog, as a turn sends them), with the catalog's form and the share of
the window. Target: at most 5% of the window at every size (docs/accounting.md).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpus import corpus

from toolhub.tools import ToolContext, ToolRegistry, ToolServices, function, registry
from toolhub.tools.resolve import resolve, token_cost

WINDOW = 200_000


class _Everything:
    """Stands in for every app interface, so availability does not hide built-ins."""

    def __getattr__(self, name: str) -> object:
        raise AttributeError(name)


def _builtins(*, defer: bool) -> ToolRegistry:
    """The pack as shipped, or (``defer=False``) with nothing deferred."""
    pack = ToolRegistry()
    for tool in registry.all_tools():
        pack.register(tool if defer else dataclasses.replace(tool, defer=False))
    return pack


def _registry(*, defer: bool) -> ToolRegistry:
    combined = _builtins(defer=True)
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
    shipped = resolve(_builtins(defer=True), ctx=ctx, context_window_tokens=WINDOW)
    undeferred = resolve(_builtins(defer=False), ctx=ctx, context_window_tokens=WINDOW)
    _report("tokens-bench default_install", shipped, token_cost(undeferred).resident)

    deferred = resolve(_registry(defer=True), ctx=ctx, context_window_tokens=WINDOW)
    all_resident = resolve(
        _registry(defer=False), ctx=ctx, context_window_tokens=WINDOW, budget_tokens=10**9
    )
    _report("tokens-bench", deferred, token_cost(all_resident).resident)
    scale(ctx)


SCALES = (50, 500, 5_000, 10_000)


def _scaled(size: int) -> ToolRegistry:
    """``size`` tools: the built-in pack, then corpus tools as deferred MCP tools, each on
    the server its prefix names (``repo``, ``chat``…), a new server per copy of the corpus."""
    combined = _builtins(defer=True)
    items = corpus()
    for number in range(max(size - len(combined.names()), 0)):
        item = items[number % len(items)]
        copy = number // len(items)
        prefix, _, rest = item["name"].partition("_")
        server = f"{prefix}{copy or ''}"

        def body(**kwargs):
            return kwargs

        body.__qualname__ = f"mcp:{server}:{rest}"
        tool = function(
            body,
            name=f"{server}__{rest}",
            description=item["description"],
            parameters=item["parameters"],
            register_globally=False,
            defer=True,
            source="mcp",
        )
        combined.register(dataclasses.replace(tool, origin=f"mcp:{server}"))
    return combined


def scale(ctx: ToolContext) -> None:
    for size in SCALES:
        registry = _scaled(size)
        resolved = resolve(registry, ctx=ctx, context_window_tokens=WINDOW)
        figures = token_cost(resolved)
        total = figures.resident + figures.catalog
        print(
            f"tokens-bench tools={len(registry.names())} tool_tokens_per_turn={total} "
            f"resident={figures.resident} catalog={figures.catalog} "
            f"form={getattr(resolved.plan, 'catalog', None) and resolved.plan.catalog.form} "
            f"share={total / WINDOW * 100:.2f}%"
        )


def _report(label: str, resolved, everything_resident: int) -> None:
    figures = token_cost(resolved)
    share = figures.resident / WINDOW * 100
    cut = (1 - (figures.resident + figures.catalog) / everything_resident) * 100
    print(
        f"{label} resident_tools={len(resolved.resident)} deferred_tools={len(resolved.deferred)}"
    )
    print(f"{label} resident_tokens {figures.resident} ({share:.2f}% of {WINDOW:,})")
    print(f"{label} catalog_tokens {figures.catalog}")
    print(f"{label} total_tokens {figures.resident + figures.catalog}")
    print(f"{label} all_resident_tokens {everything_resident}")
    print(f"{label} cut_vs_all_resident {cut:.1f}%")


if __name__ == "__main__":
    main()
