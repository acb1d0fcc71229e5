"""Resolution and the turn contract: live expansion, determinism, deferral, tiers, the
catalog, exact token halves, and what a turn lets a tool call do."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.unit.conftest import synthetic_tools
from toolhub.tools import ToolContext, ToolRegistry, function, get
from toolhub.tools.catalog import (
    CATALOG_HEADER,
    GROUPED_HEADER,
    catalog_line,
    listed_line,
    smallest_tokens,
)
from toolhub.tools.intent_selection import ProfileSpec
from toolhub.tools.resolve import CALL_TOOL, resolve, token_cost
from toolhub.tools.schema import canonical_json
from toolhub.tools.tiers import TierPlan
from toolhub.tools.tokens import count
from toolhub.tools.turn import TurnTools
from toolhub.tools.wire import array_frame_tokens, tool_tokens

KEYED = ToolContext(env={"BRAVE_API_KEY": "k"})


def _add(reg, name, description="Does a thing.", **kwargs):
    def body(query: str = "") -> str:
        return name

    return function(body, name=name, description=description, registry=reg, **kwargs)


@pytest.fixture
def reg() -> ToolRegistry:
    reg = ToolRegistry()
    for name in ("alpha", "beta", "gamma"):
        _add(reg, name)
    reg.register(get("web_search"))
    reg.register(get("tool_search"))
    _add(reg, "mcp_weather", "Weather forecasts from an MCP server.", defer=True)
    _add(reg, "mcp_stocks", "Stock quotes from an MCP server.", defer=True)
    return reg


def test_an_all_tools_intent_expands_live_and_reaches_a_tool_registered_later(reg):
    before = resolve(reg, intent={"enabled": True}, ctx=KEYED)
    _add(reg, "delta")
    after = resolve(reg, intent={"enabled": True}, ctx=KEYED)

    assert "delta" not in before.names
    assert "delta" in after.names
    assert after.fingerprint != before.fingerprint


def test_deferred_tools_are_in_the_catalog_not_the_array_and_bring_tool_search(reg):
    resolved = resolve(reg, ctx=KEYED)
    array = [tool["name"] for tool in json.loads(resolved.tools_json)]

    assert array == ["alpha", "beta", "gamma", "web_search", "tool_search", "call_tool"]
    assert resolved.catalog == CATALOG_HEADER + "- mcp_stocks\n- mcp_weather\n"
    assert [tool.name for tool in resolved.deferred] == ["mcp_weather", "mcp_stocks"]


def test_with_nothing_deferred_there_is_no_tool_search_and_no_catalog(reg):
    resolved = resolve(reg, intent={"disabled": ["mcp_weather", "mcp_stocks"]}, ctx=KEYED)

    assert resolved.names == ("alpha", "beta", "gamma", "web_search")
    assert resolved.catalog == ""
    assert resolved.reason_for("tool_search").reason.startswith("nothing is deferred")


def test_tool_search_stays_while_anything_is_deferred_even_if_disabled_globally(reg):
    resolved = resolve(reg, disabled={"tool_search": "disabled globally by ops: noisy"}, ctx=KEYED)

    assert "tool_search" in [tool.name for tool in resolved.resident]
    assert resolved.tiers["tool_search"] == "core"


@pytest.mark.parametrize(
    ("intent", "has_web", "others"),
    [
        ({}, True, True),
        ({"web_search": True}, True, True),
        ({"web_search": False}, False, True),
        ({"enabled": False}, False, False),
        ({"enabled": False, "web_search": True}, True, False),
        ({"picked": ["alpha"]}, False, True),
        ({"picked": ["alpha"], "web_search": True}, True, True),
        ({"toolset": "files"}, False, False),
        ({"toolset": "files", "web_search": True}, True, False),
        ({"disabled": ["web_search"], "web_search": True}, False, True),
    ],
)
def test_web_search_layers_on_top_of_whatever_the_rest_gives(reg, intent, has_web, others):
    resolved = resolve(reg, intent=intent, ctx=KEYED)

    assert ("web_search" in resolved.names) is has_web
    assert ("alpha" in resolved.names) is (others and intent.get("toolset") is None)


def test_web_search_is_not_layered_past_a_veto_or_a_missing_key(reg):
    vetoed = resolve(
        reg, intent={"web_search": True}, disabled={"web_search": "off by ops"}, ctx=KEYED
    )
    keyless = resolve(reg, intent={"web_search": True}, ctx=ToolContext(env={}))

    assert "web_search" not in vetoed.names
    assert vetoed.reason_for("web_search").reason == "off by ops"
    assert keyless.reason_for("web_search").reason == "needs BRAVE_API_KEY"


def test_disabled_tools_and_the_agent_intent_narrow_with_reasons(reg):
    resolved = resolve(
        reg,
        intent={"disabled": ["alpha"]},
        agent_intent={"disabled": ["beta"], "allowed": ["alpha", "beta", "gamma"]},
        ctx=KEYED,
    )

    assert resolved.names == ("gamma",)
    assert resolved.reason_for("alpha").reason == "removed in this conversation"
    assert resolved.reason_for("beta").reason == "removed by the agent"
    assert resolved.reason_for("web_search").reason == "not in the agent's allowed tools"


def test_profiles_resolve_in_all_except_and_only_modes(reg):
    profiles = {
        "mine": ProfileSpec("mine", "all_except", ("beta", "gone_tool")),
        "tight": ProfileSpec("tight", "only", ("alpha", "gone_tool")),
    }

    all_except = resolve(reg, intent={"toolset": "mine"}, profile_lookup=profiles.get, ctx=KEYED)
    only = resolve(reg, intent={"toolset": "tight"}, profile_lookup=profiles.get, ctx=KEYED)

    assert "beta" not in all_except.names
    assert {"alpha", "gamma", "web_search"} <= set(all_except.names)
    assert all_except.reason_for("beta").reason == "removed from the profile 'mine'"
    assert only.names == ("alpha",)
    assert only.reason_for("gamma").reason == "not in the profile 'tight'"


def test_the_agent_toolset_applies_when_the_session_names_none(reg):
    resolved = resolve(reg, agent_intent={"toolset": "files"}, ctx=KEYED)

    assert resolved.names == ()


def test_an_unchanged_turn_is_served_from_the_memo(reg):
    first = resolve(reg, intent={"web_search": True}, ctx=KEYED)
    second = resolve(reg, intent={"web_search": True}, ctx=KEYED)

    assert second is first


def test_the_budget_demotes_the_least_used_first_ties_by_name():
    reg = ToolRegistry()
    # Each tool about as big as the two meta tools together, so not all five fit.
    body = "Same size description.\n" + "It does the same sized thing. " * 30
    for name in ("e_tool", "d_tool", "c_tool", "b_tool", "a_tool"):
        _add(reg, name, body)
    reg.register(get("tool_search"))
    # Room for the array's frame, two tools, and tool_search and call_tool, which join as soon
    # as anything is deferred, and for the catalog after them: the three others listed, or
    # the least it could be, which the array must leave it.
    listed = [reg.get(name) for name in ("a_tool", "b_tool", "e_tool")]
    catalog = count(CATALOG_HEADER) + sum(count(catalog_line(t, listed=True)) for t in listed)
    everything = [reg.get(name) for name in ("a_tool", "b_tool", "c_tool", "d_tool", "e_tool")]
    budget = (
        array_frame_tokens()
        + tool_tokens(reg.get("a_tool")) * 2
        + tool_tokens(reg.get("tool_search"))
        + tool_tokens(CALL_TOOL)
        + max(catalog, smallest_tokens(everything))
    )

    resolved = resolve(
        reg, usage={"d_tool": 5, "c_tool": 1}, budget_tokens=budget, ctx=ToolContext()
    )

    assert resolved.tiers == {
        "e_tool": "listed",
        "d_tool": "core",
        "c_tool": "core",
        "b_tool": "listed",
        "a_tool": "listed",
        "tool_search": "core",
    }
    assert "- a_tool: Same size description.\n" in resolved.catalog
    cost = token_cost(resolved)
    assert cost.resident + cost.catalog <= budget


@pytest.mark.parametrize("strategy", ["call_tool", "promote"])
def test_the_array_sent_never_costs_more_than_the_budget_meta_tools_included(strategy):
    registry = _synthetic_registry()
    for budget in range(500, 4_000, 53):
        resolved = resolve(
            registry, strategy=strategy, budget_tokens=budget, ctx=ToolContext(), usage={}
        )
        assert resolved.deferred

        # What the provider is sent, counted exactly, call_tool and tool_search included.
        assert token_cost(resolved).resident <= budget, (budget, resolved.array_names)


def test_the_tier_plan_is_stable_and_a_later_tool_starts_deferred(reg):
    first = resolve(reg, ctx=KEYED)
    plan = TierPlan.from_json(json.loads(json.dumps(first.plan.to_json())))
    _add(reg, "late_tool")

    later = resolve(reg, plan=plan, usage={"late_tool": 99}, ctx=KEYED)
    rebuilt = resolve(reg, plan=plan, intent={"web_search": True}, ctx=KEYED)
    reset = resolve(reg, plan=None, ctx=KEYED)

    assert later.tiers["late_tool"] == "deferred"
    assert later.tiers["alpha"] == first.tiers["alpha"] == "core"
    assert rebuilt.tiers["late_tool"] == "core"
    assert reset.tiers["late_tool"] == "core"


def test_a_listed_line_is_cut_at_120_bytes_without_splitting_a_character():
    reg = ToolRegistry()
    tool = _add(reg, "wide", "é" * 59 + "日本語のテキスト" + "\nsecond line")

    line = listed_line(tool)

    assert len(line.encode()) <= 120
    assert line.startswith("é" * 59)
    assert line.encode().decode() == line
    assert "second" not in line


def _synthetic_registry() -> ToolRegistry:
    reg = ToolRegistry()
    for item in synthetic_tools(150):

        def body(**kwargs):
            return kwargs

        function(
            body,
            name=item["name"],
            description=item["description"],
            parameters=item["parameters"],
            registry=reg,
            defer=item["defer"],
        )
    reg.register(get("tool_search"))
    return reg


@pytest.mark.parametrize("strategy", ["call_tool", "promote", "native"])
def test_token_halves_equal_the_tokenization_of_the_real_payload_parts(strategy):
    resolved = resolve(
        _synthetic_registry(), strategy=strategy, budget_tokens=6_000, ctx=ToolContext()
    )

    cost = token_cost(resolved)

    assert resolved.deferred
    sent = json.loads(resolved.tools_json)
    # Under native the deferred entries travel flagged and are not billed until loaded.
    billed = [tool for tool in sent if not tool.get("defer_loading")]
    assert len(billed) == len(resolved.resident) + (strategy == "call_tool")
    billed_text = "[\n" + ",\n".join(canonical_json(tool) for tool in billed) + "\n]"
    assert cost.resident == count(billed_text)
    if strategy != "native":
        assert billed_text == resolved.tools_json
    assert cost.catalog == count(resolved.catalog)
    assert sum(tokens for _, tokens in cost.per_tool) + count("[\n") == cost.resident


_DETERMINISM = """
import json, random, sys
from tests.unit.conftest import synthetic_tools
from toolhub.tools import ToolRegistry, function, get
from toolhub.tools.presets import Toolset, define_toolsets
from toolhub.tools.resolve import resolve
corpus = synthetic_tools(200)
names = [item["name"] for item in corpus]
rng = random.Random(int(sys.argv[1]))
sets = [Toolset(f"p{i}", "x", tools=tuple(names[i::4])) for i in range(4)]
sets.append(Toolset("all_p", "x", includes=tuple(s.name for s in sets)))
rng.shuffle(sets)
define_toolsets(*sets)
reg = ToolRegistry()
for item in corpus:
    def body(**kwargs):
        return kwargs
    function(body, name=item["name"], description=item["description"],
             parameters=dict(sorted(item["parameters"].items(), key=lambda _: rng.random())),
             registry=reg, defer=item["defer"])
reg.register(get("tool_search"))
print(resolve(reg, intent={"toolset": "all_p", "disabled": names[:3]}).fingerprint)
"""


@pytest.mark.slow
@pytest.mark.processes
def test_the_fingerprint_is_identical_across_hash_seeds_and_preset_orders():
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _DETERMINISM, str(seed)],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            stdout=subprocess.PIPE,
            text=True,
        )
        # Three seeds prove what twenty did: any dependence on set or dict order shows as
        # a second fingerprint among them (the presets are shuffled by the same seed).
        for seed in (0, 1, 4242)
    ]
    fingerprints = {process.communicate(timeout=120)[0].strip() for process in processes}

    assert len(fingerprints) == 1
    assert len(fingerprints.pop()) == 64


def _turn(reg, strategy, **kwargs):
    return TurnTools(resolve(reg, strategy=strategy, ctx=KEYED, **kwargs))


def test_call_tool_never_changes_the_array_and_unwraps_to_the_real_tool(reg):
    turn = _turn(reg, "call_tool")
    before = turn.tools_json()

    turn.index.select(["mcp_weather"])
    target = turn.resolve_call("call_tool", {"name": "mcp_weather", "arguments": {"query": "x"}})

    assert turn.tools_json() == before
    assert target.tool.name == "mcp_weather"
    assert target.via == "call_tool"
    assert target.arguments == {"query": "x"}
    assert turn.loaded == ["mcp_weather"]


def test_promote_adds_a_found_tool_to_the_next_request_of_the_turn(reg):
    turn = _turn(reg, "promote")
    before = [tool["name"] for tool in turn.provider_tools()]

    refused = turn.resolve_call("mcp_stocks", {})
    hits = turn.index.search("stock quotes", 1)
    after = [tool["name"] for tool in turn.provider_tools()]

    assert "mcp_stocks" not in before
    assert refused.error.startswith("mcp_stocks is not loaded: find it with tool_search first")
    assert hits[0].tool.name == "mcp_stocks"
    assert after == [*before, "mcp_stocks"]
    assert turn.resolve_call("mcp_stocks", {}).tool.name == "mcp_stocks"


@pytest.mark.parametrize(
    ("strategy", "called"),
    [
        ("call_tool", "through call_tool"),
        ("call_tool", "by its own name"),
        ("promote", "by its own name"),
        ("native", "by its own name"),
    ],
)
def test_a_deferred_tool_runs_only_once_tool_search_loaded_it(reg, strategy, called):
    """Every strategy agrees: the loaded set is what the model was shown."""
    turn = _turn(reg, strategy)

    def call(name: str):
        if called == "by its own name":
            return turn.resolve_call(name, {"query": "x"})
        return turn.resolve_call("call_tool", {"name": name, "arguments": {"query": "x"}})

    before = call("mcp_weather")
    turn.index.select(["mcp_weather"])
    after = call("mcp_weather")

    assert before.tool is None
    assert "tool_search first" in before.error
    assert after.error is None
    assert after.tool.name == "mcp_weather"
    # Loading one tool loads only that one.
    assert call("mcp_stocks").tool is None


def test_native_sends_every_tool_with_deferred_ones_flagged(reg):
    turn = _turn(reg, "native")

    flagged = {tool["name"]: tool.get("defer_loading", False) for tool in turn.provider_tools()}

    assert flagged["mcp_weather"] is True
    assert flagged["alpha"] is False
    # Flagged, not shown: the model meets it through tool_search's reference first.
    assert turn.resolve_call("mcp_weather", {}).tool is None


def test_select_reports_unknown_names_without_failing(reg):
    turn = _turn(reg, "call_tool")

    found, missing = turn.index.select(["mcp_weather", "no_such_tool"])

    assert [tool.name for tool in found] == ["mcp_weather"]
    assert missing == ["no_such_tool"]


def test_a_vetoed_tool_is_invisible_to_search_and_refused_through_call_tool(reg):
    turn = _turn(reg, "call_tool", disabled={"mcp_stocks": "disabled globally by ops: leaks"})

    hits = turn.index.search("stock quotes", 5)
    _, missing = turn.index.select(["mcp_stocks"])
    target = turn.resolve_call("call_tool", {"name": "mcp_stocks", "arguments": {}})

    assert "mcp_stocks" not in [hit.tool.name for hit in hits]
    assert missing == ["mcp_stocks"]
    assert target.tool is None
    assert target.error == "mcp_stocks is turned off by an operator: leaks"


def test_a_call_to_a_name_outside_the_contract_is_refused(reg):
    turn = _turn(reg, "call_tool", intent={"disabled": ["alpha"]})

    removed, unknown = turn.resolve_call("alpha", {}), turn.resolve_call("rm_rf", {})

    assert (removed.tool, unknown.tool) == (None, None)
    assert removed.error == "alpha is not available: removed in this conversation"
    assert removed.refused.reason == "removed in this conversation"
    assert unknown.error == "there is no tool named rm_rf here"
    assert unknown.refused is None
    assert turn.resolve_call("call_tool_x", {}).error == "there is no tool named call_tool_x here"


def test_a_refused_call_tells_the_model_which_rule_removed_the_tool(reg):
    """Every rule that can take a tool out of a turn, in the words the model receives."""
    _add(reg, "keyed", requires_env=("SECRET_KEY_X",))
    _add(reg, "writer", unsafe_in=frozenset({"plan"}))
    plan = ToolContext(env={"BRAVE_API_KEY": "k"}, mode="plan")
    cases = {
        "off": (resolve(reg, intent={"enabled": False}, ctx=KEYED), "alpha"),
        "picked": (resolve(reg, intent={"picked": ["beta"]}, ctx=KEYED), "alpha"),
        "preset": (resolve(reg, intent={"toolset": "safe"}, ctx=KEYED), "alpha"),
        "plan": (resolve(reg, ctx=plan), "writer"),
        "key": (resolve(reg, ctx=KEYED), "keyed"),
        "agent": (resolve(reg, agent_intent={"disabled": ["alpha"]}, ctx=KEYED), "alpha"),
        "web": (resolve(reg, intent={"web_search": False}, ctx=KEYED), "web_search"),
        "operator": (
            resolve(reg, disabled={"alpha": "disabled globally by ann@example.com: quota"}),
            "alpha",
        ),
    }
    told = {
        case: TurnTools(resolved).resolve_call(name, {}) for case, (resolved, name) in cases.items()
    }

    assert {case: target.error for case, target in told.items()} == {
        "off": "alpha is not offered in this chat: tools are off in this conversation",
        "picked": "alpha is not offered in this chat: not among the picked tools",
        "preset": "alpha is not offered in this chat: not in the 'safe' toolset",
        "plan": "writer is hidden in plan mode",
        "key": "keyed is unavailable right now: needs SECRET_KEY_X",
        "agent": "alpha is not available: removed by the agent",
        "web": "web_search is not available: web search is off in this conversation",
        "operator": "alpha is turned off by an operator: quota",
    }
    # The operator's name reaches the person's card, never the model.
    assert told["operator"].refused.reason == "turned off by an operator (ann@example.com): quota"
    assert all(target.tool is None and target.refused for target in told.values())


def test_malformed_call_tool_arguments_are_an_error_not_a_crash(reg):
    turn = _turn(reg, "call_tool")

    assert turn.resolve_call("call_tool", {"arguments": {}}).error
    assert turn.resolve_call("call_tool", "not an object").error
    assert turn.resolve_call("call_tool", {"name": "alpha", "arguments": [1]}).error


def test_a_checkpoint_restores_only_names_the_turn_still_allows(reg):
    first = _turn(reg, "promote")
    first.index.select(["mcp_weather", "mcp_stocks"])
    checkpoint = first.loaded

    later = TurnTools(
        resolve(reg, strategy="promote", intent={"disabled": ["mcp_stocks"]}, ctx=KEYED),
        loaded=[*checkpoint, "alpha", 42],
    )

    assert later.loaded == ["mcp_weather"]


def test_a_global_disable_made_during_the_turn_vetoes_at_execution(reg):
    turn = _turn(reg, "call_tool")
    tool = turn.resolve_call("alpha", {}).tool

    veto = turn.veto_now(tool, KEYED, {"alpha": "disabled globally by ops@example.com: now"})

    assert turn.veto_now(tool, KEYED, {}) is None
    assert veto.told == "alpha is turned off by an operator: now"
    assert veto.reason == "turned off by an operator (ops@example.com): now"


async def test_the_tool_search_tool_loads_through_the_turn_index_under_promote(reg):
    from toolhub.tools import ToolServices

    turn = _turn(reg, "promote")
    ctx = ToolContext(services=ToolServices(tool_index=turn.index))

    result = await get("tool_search").execute({"query": "select:mcp_weather"}, ctx)

    assert json.loads(result.content)["name"] == "mcp_weather"
    assert [tool["name"] for tool in turn.provider_tools()][-1] == "mcp_weather"


def test_the_search_index_is_built_once_per_resolution_not_per_turn(reg):
    first = _turn(reg, "call_tool")
    second = _turn(reg, "call_tool")

    assert first.resolved is second.resolved
    assert first.resolved.index is second.resolved.index


def test_no_removal_of_a_meta_tool_is_ever_reported_or_enforced(reg):
    vetoes = {"tool_search": "disabled globally by ops: noisy", "call_tool": "ops: noisy"}
    meta = {"disabled": ["tool_search", "call_tool"]}

    idle = resolve(
        reg,
        intent={**meta, "disabled": ["mcp_weather", "mcp_stocks", *meta["disabled"]]},
        disabled=vetoes,
        ctx=KEYED,
    )
    deferring = resolve(reg, intent=meta, disabled=vetoes, ctx=KEYED, strategy="call_tool")

    assert idle.reason_for("tool_search").layer == "L2b"
    assert idle.reason_for("tool_search").reason == "nothing is deferred, so nothing to search"
    assert deferring.deferred
    assert deferring.reason_for("tool_search") is None
    assert {"tool_search", "call_tool"} <= set(deferring.array_names)


def test_the_first_resolution_after_a_server_lists_its_tools_tokenizes_nothing(monkeypatch):
    from toolhub.tools import tokens

    registry = ToolRegistry()
    registry.register(get("tool_search"))
    listed = []
    for n, spec in enumerate(synthetic_tools(60, seed=23)):
        listed.append(
            function(
                lambda **kwargs: kwargs,
                name=f"{spec['name']}_{n}_listed",
                description=spec["description"],
                parameters=spec["parameters"],
                register_globally=False,
                defer=n % 3 == 0,
            )
        )
    # What every process counts once (the array's frame, the catalog's header, the
    # built-in tool_search) is counted by a resolution before the server lists.
    token_cost(resolve(registry, intent={"enabled": True}, ctx=KEYED))
    registry.sync_origin("mcp:synthetic", listed)
    tokenized = []
    real = tokens.count
    monkeypatch.setattr(tokens, "count", lambda text: tokenized.append(text) or real(text))

    # A budget that lists some tools and keeps others: both catalog forms are sent.
    resolved = resolve(registry, intent={"enabled": True}, ctx=KEYED, budget_tokens=3_000)
    cost = token_cost(resolved)

    assert {"core", "listed", "deferred"} <= set(resolved.tiers.values())
    # At most the array's last piece, which ends the array instead of a separator, the
    # grouped form's header (once per process, the first time a catalog takes that form:
    # whether an earlier test did depends on the order tests run in), and the lines of the
    # catalog's smaller forms that say how many tools there are (weighed when the plan is
    # made), never a tool's own text.
    counted = re.compile(r"\b[\d,]+ tools?\b")
    once = {resolved.array_pieces[-1], GROUPED_HEADER}
    assert all(text in once or counted.search(text) for text in tokenized)
    assert cost.resident == count("".join(resolved.array_pieces))
    assert cost.catalog == count("".join(resolved.catalog_pieces))
