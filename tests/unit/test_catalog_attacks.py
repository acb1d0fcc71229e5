"""Attacks on the catalog at scale (docs/accounting.md, "The catalog at scale") and on
tool_search's bounds: odd names and sources, tiny budgets, server notes, crafted stored
plans, registration order and hash seeds, and select: patterns that cost CPU.

A test marked ``xfail(strict=True)`` is a bug found: its reason says why it fails."""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import fnmatch
import json
import os
import subprocess
import sys

import pytest

from tests.catalogs import mcp_tool, server_tools, tool_name
from tests.conftest import ROOT
from toolhub.tools import ToolContext, ToolRegistry, ToolServices, function, get
from toolhub.tools.builtin.tool_search import SEARCH_MAX, SELECT_MAX
from toolhub.tools.catalog import BUILT_IN, CatalogPlan, group_of
from toolhub.tools.mcp.config import MAX_INSTRUCTIONS_CHARS, instructions_note
from toolhub.tools.resolve import resolve, token_cost
from toolhub.tools.search import ToolIndex
from toolhub.tools.tiers import TierPlan
from toolhub.tools.tokens import count

CTX = ToolContext(env={})


def _registry(tools) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(get("tool_search"))
    for tool in tools:
        registry.register(tool)
    return registry


def _built_in(name: str) -> object:
    def body(**kwargs):
        return kwargs

    return function(
        body,
        name=name,
        description=f"Do {name.replace('_', ' ')}.",
        parameters={"type": "object", "properties": {}},
        register_globally=False,
        defer=True,
    )


def _within(resolved) -> tuple[int, int]:
    cost = token_cost(resolved)
    return cost.resident + cost.catalog, resolved.budget_tokens


def _search(tools, query: str) -> str:
    ctx = ToolContext(services=ToolServices(tool_index=ToolIndex(tools)))
    return asyncio.run(get("tool_search").execute({"query": query}, ctx)).content


def _loaded(content: str) -> list[str]:
    return [json.loads(line)["name"] for line in content.splitlines() if line.startswith("{")]


def _stored(resolved) -> TierPlan:
    return TierPlan.from_json(json.loads(json.dumps(resolved.plan.to_json())))


def _note(server: str, words: int = 10) -> str:
    return instructions_note(
        server, ("Call its tools with care. " * words)[:MAX_INSTRUCTIONS_CHARS]
    )


# --- The budget and exact counting: what held -------------------------------------------


@pytest.mark.parametrize(
    ("size", "per_server", "budget"),
    [
        (1, 1, 400),
        (30, 1, 400),
        (500, 1, 600),
        (500, 500, 400),
        (3_000, 1, 1_000),
        (3_000, 8, 1_000),
        (3_000, 3_000, 400),
    ],
)
def test_any_registry_shape_under_any_budget_over_the_floor_stays_within_it_counted_exactly(
    size, per_server, budget
):
    resolved = resolve(
        _registry(server_tools(size, per_server=per_server)), ctx=CTX, budget_tokens=budget
    )

    spent, allowed = _within(resolved)
    assert spent <= allowed
    assert token_cost(resolved).catalog == count(resolved.catalog)


def test_odd_names_and_sources_do_not_merge_tokens_across_the_catalogs_pieces():
    # Server names may start with a digit; tool names may start with "-" or a digit, or
    # be one character; an "mcp" tool may have no server, or an origin that is not mcp.
    odd = [
        mcp_tool("3d", "print"),
        mcp_tool("x", "-dash"),
        mcp_tool("0", "0"),
        mcp_tool("a-b", "_under"),
        dataclasses.replace(mcp_tool("gone", "orphan"), origin="mcp:"),
        dataclasses.replace(mcp_tool("other", "code_origin"), origin="plugin:other"),
        _built_in("-"),
        _built_in("9"),
    ]
    usage = {tool.name: 5 for tool in odd}
    registry = _registry([*odd, *server_tools(3_000, per_server=1)])

    for budget in (500, 2_000, 30_000):
        resolved = resolve(registry, usage=usage, ctx=CTX, budget_tokens=budget)
        assert token_cost(resolved).catalog == count(resolved.catalog), budget
        spent, allowed = _within(resolved)
        assert spent <= allowed, budget
    assert group_of(odd[4]) == BUILT_IN
    assert group_of(odd[5]) == BUILT_IN


def test_usage_of_unknown_tools_negative_or_huge_counts_names_only_used_tools_in_the_budget():
    registry = _registry(server_tools(3_000))
    real = f"srv0__{tool_name(0)}"
    usage = {
        "no_such_tool": 10**12,
        real: 10**18,
        f"srv1__{tool_name(8)}": -5,
        f"srv2__{tool_name(16)}": 0,
    }

    resolved = resolve(registry, usage=usage, ctx=CTX)

    assert resolved.plan.catalog.named == (real,)
    assert "no_such_tool" not in resolved.catalog
    spent, allowed = _within(resolved)
    assert spent <= allowed


def test_a_named_tool_removed_later_leaves_the_catalog_and_nothing_else_moves():
    registry = _registry(server_tools(3_000))
    used = f"srv7__{tool_name(58)}"
    first = resolve(registry, usage={used: 3}, ctx=CTX)
    stored = _stored(first)
    registry.unregister(used)

    later = resolve(registry, plan=stored, usage={used: 3}, ctx=CTX)

    assert used in first.catalog
    assert used not in later.catalog
    assert "srv7: 7 tools\n" in later.catalog
    assert later.catalog.replace("srv7: 7 tools\n", "") == first.catalog.replace(
        f"srv7: 8 tools, the most used:\n- {used}\n", ""
    )


_BYTES = """
import hashlib, json, sys
sys.path.insert(0, {root!r})
from tests.catalogs import server_tools, tool_name
from toolhub.tools import ToolContext, ToolRegistry, get
from toolhub.tools.resolve import resolve
import toolhub
assert toolhub.__file__.startswith({root!r}), toolhub.__file__
tools = server_tools(1_200, per_server=int(sys.argv[1]))
# Ties in usage, across servers: the order must come from the names alone.
usage = {{tool.name: 2 for tool in tools[::97]}}
if sys.argv[2] == "reversed":
    tools.reverse()
registry = ToolRegistry()
registry.register(get("tool_search"))
for tool in tools:
    registry.register(tool)
resolved = resolve(registry, usage=usage, ctx=ToolContext(env={{}}), budget_tokens=int(sys.argv[3]))
plan = resolved.plan.to_json()
plan["tiers"] = sorted(plan["tiers"].items())
print(resolved.plan.catalog.form, hashlib.sha256(
    (resolved.catalog + json.dumps(plan, sort_keys=True)).encode()).hexdigest())
"""


@pytest.mark.processes
@pytest.mark.parametrize(("per_server", "budget"), [(8, 1_500), (1, 1_000)])
def test_the_catalog_is_the_same_bytes_across_processes_hash_seeds_and_registration_orders(
    per_server, budget
):
    script = _BYTES.format(root=str(ROOT))
    outputs = set()
    for seed, order in (("0", "forward"), ("4242", "reversed")):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", script, str(per_server), order, str(budget)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout.strip())

    assert len(outputs) == 1, outputs
    (output,) = outputs
    assert output.split()[0] == ("grouped" if per_server == 8 else "counts")


# --- Stored plans: what held --------------------------------------------------------------


@pytest.mark.parametrize(
    "catalog",
    [
        None,
        "counts",
        {"form": "counts", "named": "srv0__create_issue_0"},
        {"form": "counts", "named": {"a": 1}},
        {"form": "counts", "named": [None, 1, {"x": []}, "srv0__create_issue_0"]},
        {"form": "counts", "named": [], "notes": "mcp:srv0"},
        {"form": ["counts"], "named": []},
        {"form": "tiny", "named": []},
    ],
)
def test_a_crafted_catalog_in_a_plan_is_not_trusted_and_the_plan_is_made_again(catalog):
    data = {"key": "k", "tiers": {"a": "core"}, "catalog": catalog}

    assert TierPlan.from_json(data) is None


def test_a_stored_plan_naming_a_hundred_thousand_strangers_names_none_of_them():
    registry = _registry(server_tools(3_000))
    good = resolve(registry, ctx=CTX)
    data = good.plan.to_json()
    data["catalog"]["named"] = [f"nobody_{n}" for n in range(100_000)]

    resolved = resolve(registry, plan=TierPlan.from_json(data), ctx=CTX)

    assert "nobody_" not in resolved.catalog
    assert resolved.catalog == good.catalog


def test_a_plan_stored_with_a_crafted_key_of_an_old_version_is_made_again():
    registry = _registry(server_tools(3_000))
    current = resolve(registry, ctx=CTX)
    old = current.plan.to_json()
    old["catalog"] = {"form": "names", "named": []}
    old["key"] = "0" * 32

    again = resolve(registry, plan=TierPlan.from_json(old), ctx=CTX)

    assert again.plan == current.plan


# --- Stored plans and server notes: bugs --------------------------------------------------


@pytest.mark.parametrize("crafted", ["unknown form", "missing catalog", "everything named"])
def test_a_stored_plan_with_a_corrupt_catalog_still_keeps_the_turn_within_its_budget(crafted):
    registry = _registry(server_tools(3_000))
    good = resolve(registry, ctx=CTX)
    data = good.plan.to_json()
    if crafted == "unknown form":
        data["catalog"] = {"form": "tiny", "named": []}
    elif crafted == "missing catalog":
        del data["catalog"]
    else:
        data["catalog"] = {"form": "grouped", "named": sorted(data["tiers"])}

    resolved = resolve(registry, plan=TierPlan.from_json(data), ctx=CTX)

    spent, allowed = _within(resolved)
    assert spent <= allowed


def test_server_instructions_after_the_catalog_are_counted_exactly_as_the_whole_block():
    registry = _registry(server_tools(40))
    registry.set_note("mcp:srv0", _note("srv0", 1))
    registry.set_note("mcp:srv1", _note("srv1", 1))

    resolved = resolve(registry, ctx=CTX)

    assert token_cost(resolved).catalog == count(resolved.catalog)


def test_a_server_registered_later_with_instructions_changes_no_byte_of_the_catalog():
    registry = _registry(server_tools(3_000))
    first = resolve(registry, ctx=CTX)
    stored = _stored(first)
    registry.register(mcp_tool("late", "lookup"))
    registry.set_note("mcp:late", _note("late"))

    later = resolve(registry, plan=stored, ctx=CTX)

    assert later.catalog == first.catalog


def test_servers_registered_later_with_instructions_do_not_push_a_kept_plan_over_budget():
    registry = _registry(server_tools(3_000))
    budget = 3_000
    first = resolve(registry, ctx=CTX, budget_tokens=budget)
    assert _within(first)[0] <= budget
    stored = _stored(first)
    for n in range(5):
        registry.register(mcp_tool(f"late{n}", "lookup"))
        registry.set_note(f"mcp:late{n}", _note(f"late{n}", 200))

    later = resolve(registry, plan=stored, ctx=CTX, budget_tokens=budget)

    spent, allowed = _within(later)
    assert spent <= allowed


def test_server_instructions_larger_than_the_budget_are_kept_within_it():
    servers = [f"srv{n}" for n in range(4)]
    registry = _registry(server_tools(32))
    for server in servers:
        registry.set_note(f"mcp:{server}", _note(server, 200))

    resolved = resolve(registry, ctx=CTX, budget_tokens=1_000)

    spent, allowed = _within(resolved)
    assert spent <= allowed


@pytest.mark.parametrize("window", [1_000, 4_000])
def test_the_smallest_window_an_agent_may_have_still_gets_a_budget_the_turn_keeps(window):
    resolved = resolve(_registry(server_tools(100)), ctx=CTX, context_window_tokens=window)

    spent, allowed = _within(resolved)
    assert spent <= allowed


# --- tool_search: what held ---------------------------------------------------------------

MANY = server_tools(2_000)


@pytest.mark.parametrize(
    "query",
    [
        "select:*",
        "select:**",
        "select:*__*",
        "select:[!a]*",
        "select:srv1*",
        "SELECT:SRV1*",
        "select:srv0__*,srv1__*,srv2__*",
        "select:" + ",".join(tool.name for tool in MANY[:15]) + ",srv5",
    ],
)
def test_a_pattern_or_a_mix_past_twenty_loads_nothing_and_answers_briefly(query):
    content = _search(MANY, query)

    assert _loaded(content) == []
    assert "none was loaded" in content
    assert len(content) < 2_000


@pytest.mark.parametrize(
    "query",
    ["select:[", "select:]", "select:,,,,", "select:", "select: , ,", "select:__", "select:?"],
)
def test_a_malformed_or_empty_select_loads_nothing_and_never_lists_the_registry(query):
    content = _search(MANY, query)

    assert _loaded(content) == []
    assert len(content) < 1_000


def test_a_keyword_search_returns_at_most_ten_whatever_the_limit():
    # 200 tools: more than ten related to the query, and few enough to encode quickly.
    ctx = ToolContext(services=ToolServices(tool_index=ToolIndex(MANY[:200])))
    for limit in (-5, 0, 11, 10**9):
        result = asyncio.run(
            get("tool_search").execute({"query": "create issue", "limit": limit}, ctx)
        )
        assert 1 <= len(_loaded(result.content)) <= SEARCH_MAX


def test_no_pattern_name_or_source_loads_a_disabled_tool():
    github = [mcp_tool("github", name) for name in ("create_issue", "delete_repo", "list_issues")]
    registry = _registry([*github, *server_tools(40)])
    resolved = resolve(registry, ctx=CTX, disabled={"github__delete_repo": "too dangerous"})
    assert "github__delete_repo" not in resolved.index.names

    ctx = ToolContext(services=ToolServices(tool_index=resolved.index))
    for query in (
        "select:github__delete_repo",
        "select:github",
        "select:github__",
        "select:github__*",
        "select:*delete*",
        "select:GITHUB__DELETE_*",
        "select:github__delete_rep?",
        "select:github__[d]elete_repo",
        "delete repo",
        "github__delete_repo",
    ):
        content = asyncio.run(get("tool_search").execute({"query": query}, ctx)).content
        assert "github__delete_repo" not in _loaded(content), query
        assert len(_loaded(content)) <= SELECT_MAX


def test_exact_names_and_a_source_together_load_up_to_twenty_in_name_order():
    slack = [mcp_tool("slack", f"tool_{n:02}") for n in range(5)]
    tools = [*MANY, *slack]
    exact = [tool.name for tool in MANY[:15]]

    content = _search(tools, "select:" + ",".join([*exact, "slack", exact[0]]))

    assert _loaded(content) == [*exact, *sorted(tool.name for tool in slack)]


# --- tool_search: bugs ----------------------------------------------------------------------


def test_a_select_of_hundreds_of_patterns_costs_at_most_a_few_passes_over_the_names(
    monkeypatch,
):
    calls = 0
    real = fnmatch.fnmatchcase

    def counting(name, pattern):
        nonlocal calls
        calls += 1
        return real(name, pattern)

    monkeypatch.setattr(fnmatch, "fnmatchcase", counting)
    query = "select:" + ",".join(["?"] * 496)
    assert len(query) <= 1_000

    content = _search(MANY, query)

    assert _loaded(content) == []
    assert calls <= SELECT_MAX * len(MANY)


def test_a_select_of_twenty_misspelt_names_compares_them_with_the_registry_a_few_times(
    monkeypatch,
):
    compared = 0

    def counting(word, possibilities, n=3, cutoff=0.6):
        nonlocal compared
        compared += len(list(possibilities))
        return []

    monkeypatch.setattr(difflib, "get_close_matches", counting)
    query = "select:" + ",".join(f"srv{n}__creat_isue_{n}" for n in range(SELECT_MAX))

    content = _search(MANY, query)

    assert _loaded(content) == []
    assert compared <= 2 * len(MANY)


def test_the_built_in_source_the_catalog_names_can_be_loaded_by_its_name():
    built_ins = [_built_in(name) for name in ("alpha_tool", "beta_tool", "gamma_tool")]
    registry = _registry([*built_ins, *server_tools(3_000)])
    resolved = resolve(registry, ctx=CTX)
    assert resolved.plan.catalog.form == "grouped"
    assert f"{BUILT_IN}: 3 tools\n" in resolved.catalog

    ctx = ToolContext(services=ToolServices(tool_index=resolved.index))
    by_name = asyncio.run(get("tool_search").execute({"query": f"select:{BUILT_IN}"}, ctx))
    lower = asyncio.run(get("tool_search").execute({"query": "select:built-in"}, ctx))

    assert sorted(_loaded(by_name.content)) == ["alpha_tool", "beta_tool", "gamma_tool"]
    assert _loaded(lower.content) == _loaded(by_name.content)


def test_an_mcp_server_named_built_in_is_not_counted_with_the_built_in_tools():
    built_ins = [_built_in(name) for name in ("alpha_tool", "beta_tool")]
    # A valid MCP server name (lower case), which the built-in source's name is not.
    server = [mcp_tool("built-in", f"tool_{n}") for n in range(3)]
    registry = _registry([*built_ins, *server, *server_tools(3_000)])

    resolved = resolve(registry, ctx=CTX)

    assert resolved.plan.catalog.form == "grouped"
    assert f"{BUILT_IN}: 2 tools\n" in resolved.catalog
    assert "built-in: 3 tools\n" in resolved.catalog


def test_a_sources_name_in_other_case_loads_its_tools_as_its_glob_does():
    slack = [mcp_tool("slack", name) for name in ("post_message", "list_channels")]

    by_glob = _search([*slack, *MANY[:50]], "select:Slack__*")
    by_name = _search([*slack, *MANY[:50]], "select:Slack")

    assert _loaded(by_glob) == ["slack__list_channels", "slack__post_message"]
    assert _loaded(by_name) == _loaded(by_glob)


# --- The plan's catalog round trip: what held -------------------------------------------


def test_a_catalog_plan_round_trips_through_json_unchanged():
    plan = CatalogPlan(form="counts", named=("a", "b"))

    assert CatalogPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
