"""The catalog at scale: the array and the catalog together stay within the budget at any
registry size, the catalog says less as tools grow (names, then sources with counts, then
counts alone) but keeps the most used by name, and a tool registered later changes none
of its bytes until the plan is made again (docs/accounting.md, "The catalog at scale")."""

from __future__ import annotations

import json

import pytest

from tests.catalogs import mcp_tool, server_tools, tool_name
from toolhub.tools import ToolContext, ToolRegistry, get
from toolhub.tools.catalog import CATALOG_HEADER, GROUPED_HEADER
from toolhub.tools.resolve import resolve, token_cost
from toolhub.tools.tiers import TierPlan
from toolhub.tools.tokens import count

CTX = ToolContext(env={})


def _registry(size: int, *, per_server: int = 8) -> ToolRegistry:
    """The built-in pack's tool_search and ``size`` deferred MCP tools, ``per_server`` a
    server."""
    registry = ToolRegistry()
    registry.register(get("tool_search"))
    for tool in server_tools(size, per_server=per_server):
        registry.register(tool)
    return registry


@pytest.mark.parametrize(
    ("size", "window"), [(50, 200_000), (600, 32_000), (5_000, 200_000), (10_000, 128_000)]
)
def test_the_array_and_the_catalog_stay_within_five_percent_of_the_window_at_any_size(size, window):
    resolved = resolve(_registry(size), ctx=CTX, context_window_tokens=window)
    cost = token_cost(resolved)

    assert len(resolved.deferred) == size
    assert cost.resident + cost.catalog <= window * 0.05
    # Counted exactly: the pieces' counts are the whole block's.
    assert cost.catalog == count(resolved.catalog)


def test_the_catalog_says_less_as_tools_grow_names_then_sources_then_counts():
    small = resolve(_registry(40), ctx=CTX)
    grouped = resolve(_registry(3_000), ctx=CTX)
    counted = resolve(_registry(3_000, per_server=1), ctx=CTX)

    assert small.plan.catalog.form == "names"
    assert small.catalog.startswith(CATALOG_HEADER)
    assert "- srv0__create_issue_0\n" in small.catalog

    # 375 servers of 8 tools: a line each, saying how many.
    assert grouped.plan.catalog.form == "grouped"
    assert grouped.catalog.startswith(GROUPED_HEADER)
    assert "srv0: 8 tools\n" in grouped.catalog
    assert "srv374: 8 tools\n" in grouped.catalog
    assert "- srv0__create_issue_0" not in grouped.catalog

    # 3,000 servers of one tool each: too many sources to list, so one sentence.
    assert counted.plan.catalog.form == "counts"
    assert counted.catalog.startswith("Deferred tools: 3,000 tools from 3,000 sources")
    assert "tool_search" in counted.catalog
    assert count(counted.catalog) < 100


def test_the_most_used_tools_stay_named_in_the_smaller_forms_most_used_first():
    registry = _registry(3_000)
    most, second, third = (f"srv{n // 8}__{tool_name(n)}" for n in (58, 2401, 20))
    usage = {most: 40, second: 12, third: 3}

    grouped = resolve(registry, usage=usage, ctx=CTX)
    few = resolve(registry, usage=usage, ctx=CTX, budget_tokens=_just_over_grouped(registry, most))

    # Most used first, as the catalog lists them.
    assert grouped.plan.catalog.named == (most, second, third)
    assert f"srv7: 8 tools, the most used:\n- {most}\n" in grouped.catalog
    assert f"srv300: 8 tools, the most used:\n- {second}\n" in grouped.catalog
    assert f"srv2: 8 tools, the most used:\n- {third}\n" in grouped.catalog
    # Room for one more line only: the most used is the one named.
    assert few.plan.catalog.named == (most,)
    cost = token_cost(few)
    assert cost.resident + cost.catalog <= few.budget_tokens


def _just_over_grouped(registry: ToolRegistry, most: str) -> int:
    """A budget that holds the array, the grouped catalog naming nobody, and one more
    named tool's lines."""
    bare = resolve(registry, ctx=CTX, budget_tokens=10_000)
    cost = token_cost(bare)
    first = count("srv7: 8 tools, the most used:\n") - count("srv7: 8 tools\n")
    return cost.resident + cost.catalog + first + count(f"- {most}\n") + 2


def test_a_tool_registered_later_changes_no_byte_of_the_catalog_until_the_plan_is_remade():
    registry = _registry(3_000)
    first = resolve(registry, ctx=CTX)
    stored = TierPlan.from_json(json.loads(json.dumps(first.plan.to_json())))
    registry.register(mcp_tool("srv0", "late_tool"))
    registry.register(mcp_tool("brand_new", "late_tool"))

    later = resolve(registry, plan=stored, ctx=CTX)
    remade = resolve(registry, plan=None, ctx=CTX)

    assert later.catalog == first.catalog
    assert later.fingerprint == first.fingerprint
    # Still found by tool_search, and deferred.
    assert later.tiers["srv0__late_tool"] == "deferred"
    assert "srv0__late_tool" in later.index.names
    # A plan made again counts it.
    assert "srv0: 9 tools\n" in remade.catalog
    assert "brand_new: 1 tool\n" in remade.catalog


def test_the_same_tools_registered_in_another_order_give_the_same_catalog_bytes():
    forward = _registry(3_000)
    backward = ToolRegistry()
    for tool in reversed(forward.all_tools()):
        backward.register(tool)
    usage = {f"srv9__{tool_name(77)}": 2, f"srv1__{tool_name(11)}": 2}

    one = resolve(forward, usage=usage, ctx=CTX)
    other = resolve(backward, usage=usage, ctx=CTX)

    assert one.catalog == other.catalog


def test_a_plan_stored_before_the_catalog_had_a_budget_is_made_again_once():
    registry = _registry(3_000)
    current = resolve(registry, ctx=CTX)
    old = current.plan.to_json()
    del old["catalog"]
    old["key"] = "made-by-an-earlier-version"

    again = resolve(registry, plan=TierPlan.from_json(old), ctx=CTX)

    assert again.plan == current.plan
    assert again.plan.catalog.form == "grouped"
