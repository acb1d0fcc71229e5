"""Registering 5,000 generated tools, and one layer 1-5 filtering pass over them.

Registration includes deriving each schema from signature and docstring and compiling its
validator. The filtering pass runs with a toolset-free intent, an allow-list, a deny list
and global disables, so every layer's check runs. Printed as µs per tool; never asserted.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toolhub.tools import ToolContext, ToolRegistry, agent_tools, function

COUNT = 5_000
ROUNDS = 5


def search(query: str, limit: int = 10, exact: bool = False) -> str:
    """Search something.

    Args:
        query: What to look for.
        limit: Most results.
        exact: Match exactly.
    """
    return query


def convert(amount: float, unit: Literal["m", "ft", "in"], precision: int | None = None) -> str:
    """Convert a length.

    Args:
        amount: How much.
        unit: Target unit.
        precision: Digits after the point.
    """
    return str(amount)


def bulk(items: list[dict], tags: list[str] | None = None, options: dict | None = None) -> str:
    """Process many items at once."""
    return str(len(items))


TEMPLATES = (search, convert, bulk)


def _register(registry: ToolRegistry) -> None:
    for index in range(COUNT):
        template = TEMPLATES[index % len(TEMPLATES)]
        function(
            template,
            name=f"tool_{index:05d}",
            registry=registry,
            unsafe_in=("plan",) if index % 7 == 0 else (),
            requires_env=("BENCH_KEY",) if index % 11 == 0 else (),
            expose=index % 97 != 0,
        )


def main() -> None:
    register_us, filter_us = [], []
    for _ in range(ROUNDS):
        registry = ToolRegistry()
        started = time.perf_counter()
        _register(registry)
        register_us.append((time.perf_counter() - started) * 1e6 / COUNT)

        names = registry.names()
        allow = names[: COUNT // 2]
        deny = names[::13]
        disabled = dict.fromkeys(names[::17], "disabled globally by bench: noise")
        ctx = ToolContext(env={"BENCH_KEY": "1"} if _ % 2 else {}, attended=False)
        started = time.perf_counter()
        selection = agent_tools(registry, ctx=ctx, allow=allow, deny=deny, disabled=disabled)
        filter_us.append((time.perf_counter() - started) * 1e6 / COUNT)
    print(
        f"registry-bench register n={COUNT} median={statistics.median(register_us):.1f}µs/tool "
        f"min={min(register_us):.1f}µs/tool"
    )
    print(
        f"registry-bench filter   n={COUNT} median={statistics.median(filter_us):.2f}µs/tool "
        f"min={min(filter_us):.2f}µs/tool offered={len(selection.tools)} "
        f"hidden={len(selection.hidden)}"
    )


if __name__ == "__main__":
    main()
