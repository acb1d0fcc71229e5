"""Shared by the benchmarks: realistic tools from ../shared/bench/tool_corpus.json."""

from __future__ import annotations

import json
from pathlib import Path

from toolhub.tools import ToolRegistry, function, get

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "bench"


def corpus() -> list[dict]:
    return json.loads((SHARED / "tool_corpus.json").read_text())


def corpus_registry(size: int, *, defer_every: int = 0, deferred_all: bool = False) -> ToolRegistry:
    """``size`` tools cycled from the corpus (suffixed past 240), plus tool_search."""
    items = corpus()
    registry = ToolRegistry()
    for index in range(size):
        item = items[index % len(items)]
        suffix = "" if index < len(items) else f"_{index // len(items)}"

        def body(**kwargs):
            return kwargs

        function(
            body,
            name=item["name"] + suffix,
            description=item["description"],
            parameters=item["parameters"],
            registry=registry,
            defer=deferred_all or bool(defer_every and index % defer_every == 0),
        )
    registry.register(get("tool_search"))
    return registry
