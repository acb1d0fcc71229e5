"""The registry's order and memory, presets, and layers 1 to 5 with their reasons."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolhub.tools import (
    DuplicateToolError,
    ToolContext,
    ToolRegistry,
    ToolsetCycleError,
    UnknownToolsetError,
    agent_tools,
    function,
)
from toolhub.tools import presets as presets_module
from toolhub.tools.presets import PRESETS, Toolset, define_toolsets, expand_toolset


def _add(reg: ToolRegistry, name: str, **kwargs):
    def body() -> str:
        return name

    return function(name=name, registry=reg, **kwargs)(body)


@pytest.fixture
def scratch_toolsets():
    saved = dict(PRESETS)
    yield
    PRESETS.clear()
    PRESETS.update(saved)


def test_registration_order_is_kept(reg):
    for name in ("zeta", "alpha", "mid"):
        _add(reg, name)

    assert reg.names() == ["zeta", "alpha", "mid"]
    assert [tool.name for tool in agent_tools(reg).tools] == ["zeta", "alpha", "mid"]


def test_a_duplicate_name_is_an_error_naming_both_definitions(reg):
    _add(reg, "twice")

    with pytest.raises(DuplicateToolError, match=r"twice.*body.*body"):
        _add(reg, "twice")


def test_register_globally_false_builds_without_registering(reg):
    tool = _add(reg, "loose", register_globally=False)

    assert tool.name == "loose"
    assert "loose" not in reg


def test_available_if_false_or_raising_keeps_a_tool_out_with_its_reason(reg):
    _add(reg, "off", available_if=False)

    def explode() -> bool:
        raise ImportError("no libfoo")

    _add(reg, "broken", available_if=explode)
    _add(reg, "on", available_if=lambda: True)

    selection = agent_tools(reg)
    assert reg.names() == ["on"]
    assert selection.reason_for("off").layer == "L1"
    assert "ImportError: no libfoo" in selection.reason_for("broken").reason


def test_expose_false_is_never_offered_but_still_callable(reg):
    tool = _add(reg, "internal", expose=False)

    selection = agent_tools(reg)

    assert "internal" not in selection.names
    assert selection.reason_for("internal").layer == "L2"
    assert tool() == "internal"


def test_toolset_narrows_to_its_members_including_declared_ones(reg):
    _add(reg, "read")
    _add(reg, "bash")
    _add(reg, "extra", toolset=["safe"])

    selection = agent_tools(reg, toolset="safe")

    assert selection.names == ("read", "extra")
    assert selection.reason_for("bash").layer == "L2b"
    assert "'safe'" in selection.reason_for("bash").reason


def test_picked_names_win_over_the_toolset_and_keep_registry_order(reg):
    for name in ("a", "b", "c"):
        _add(reg, name)

    selection = agent_tools(reg, toolset="safe", names=["c", "a", "c"])

    assert selection.names == ("a", "c")


def test_unsafe_in_hides_a_tool_only_in_that_channel_or_mode(reg):
    _add(reg, "writer", unsafe_in=("plan", "api"))

    assert agent_tools(reg, ctx=ToolContext(channel="web")).names == ("writer",)
    api = agent_tools(reg, ctx=ToolContext(channel="api"))
    plan = agent_tools(reg, ctx=ToolContext(mode="plan"))
    assert api.reason_for("writer").reason == "hidden in the api channel"
    assert plan.reason_for("writer").reason == "hidden in plan mode"
    assert plan.reason_for("writer").layer == "L3"


def test_requires_env_names_the_missing_variables(reg):
    _add(reg, "search", requires_env=("BRAVE_API_KEY", "OTHER_KEY"))

    missing = agent_tools(reg, ctx=ToolContext(env={"OTHER_KEY": "x"}))
    present = agent_tools(reg, ctx=ToolContext(env={"BRAVE_API_KEY": "k", "OTHER_KEY": "x"}))

    assert missing.reason_for("search").reason == "needs BRAVE_API_KEY"
    assert missing.reason_for("search").layer == "L4"
    assert present.names == ("search",)


def test_check_fn_and_can_use_gate_at_layer_four_and_can_use_sees_the_context(reg):
    seen = []
    _add(reg, "gated", can_use=lambda ctx: seen.append(ctx.user_id) or ctx.user_id == "ops")
    _add(reg, "down", check_fn=lambda: False)

    for_ops = agent_tools(reg, ctx=ToolContext(user_id="ops"))
    for_guest = agent_tools(reg, ctx=ToolContext(user_id="guest"))

    assert for_ops.names == ("gated",)
    assert for_guest.reason_for("gated").layer == "L4"
    assert for_ops.reason_for("down").reason == "not available right now"
    assert seen == ["ops", "guest"]


def test_deny_beats_allow_and_global_disables_carry_their_reason(reg):
    for name in ("a", "b", "c", "d"):
        _add(reg, name)

    selection = agent_tools(
        reg,
        allow=["a", "b", "c"],
        deny=["b"],
        disabled={"c": "disabled globally by ops@example.com: leaks secrets"},
    )

    assert selection.names == ("a",)
    assert selection.reason_for("b").reason == "removed in this conversation"
    assert selection.reason_for("c").reason == "disabled globally by ops@example.com: leaks secrets"
    assert selection.reason_for("d").reason == "not in the agent's allowed tools"
    assert {hidden.layer for hidden in selection.hidden} == {"L5"}


def test_an_unattended_turn_withholds_ask_user_question(reg):
    _add(reg, "ask_user_question")

    assert agent_tools(reg, ctx=ToolContext(attended=True)).names == ("ask_user_question",)
    unattended = agent_tools(reg, ctx=ToolContext(attended=False))
    assert unattended.reason_for("ask_user_question").layer == "L5"


def test_preset_includes_resolve_recursively(scratch_toolsets):
    define_toolsets(
        Toolset("inner", "x", tools=("a",)),
        Toolset("middle", "x", tools=("b",), includes=("inner",)),
        Toolset("outer", "x", tools=("c",), includes=("middle",)),
    )

    assert expand_toolset("outer") == ("outer", "middle", "inner")
    assert presets_module.toolset_members("outer", ToolRegistry()) == {"a", "b", "c"}


def test_a_preset_cycle_is_an_error_naming_the_cycle_and_changes_nothing(scratch_toolsets):
    before = dict(PRESETS)

    with pytest.raises(ToolsetCycleError, match="one -> two -> three -> one"):
        define_toolsets(
            Toolset("one", "x", includes=("two",)),
            Toolset("two", "x", includes=("three",)),
            Toolset("three", "x", includes=("one",)),
        )
    assert before == PRESETS


def test_unknown_presets_are_errors_never_empty_sets(reg, scratch_toolsets):
    with pytest.raises(UnknownToolsetError, match="nope"):
        agent_tools(reg, toolset="nope")
    with pytest.raises(UnknownToolsetError, match="missing"):
        define_toolsets(Toolset("dangling", "x", includes=("missing",)))
    with pytest.raises(UnknownToolsetError, match="ghost"):
        _add(reg, "member", toolset=["ghost"])


def test_the_builtin_presets_include_safe_and_research_over_the_real_pack():
    from toolhub.tools import registry

    ctx = ToolContext(env={"BRAVE_API_KEY": "k"})
    research = agent_tools(registry, toolset="research", ctx=ctx)

    assert {"safe", "research"} <= set(PRESETS)
    assert "web_fetch" in research.names
    assert "web_search" in research.names
    assert "bash" not in research.names


_NAMES = st.lists(
    st.text(alphabet="abcdefgh_", min_size=1, max_size=6), min_size=0, max_size=25, unique=True
)


_SOME_NAMES = st.lists(st.text("abcdefgh_", max_size=6))


def _reversed(values):
    return None if values is None else list(reversed(values))


@given(
    names=_NAMES,
    allow=st.none() | _SOME_NAMES,
    deny=_SOME_NAMES,
    picked=st.none() | _SOME_NAMES,
)
def test_filtering_is_order_stable_and_duplicate_free(names, allow, deny, picked):
    reg = ToolRegistry()
    for name in names:
        _add(reg, name)

    selection = agent_tools(reg, allow=allow, deny=deny, names=picked)
    again = agent_tools(reg, allow=_reversed(allow), deny=_reversed(deny), names=_reversed(picked))

    assert list(selection.names) == [name for name in names if name in selection.names]
    assert len(set(selection.names)) == len(selection.names)
    assert selection.names == again.names
    assert sorted([*selection.names, *(h.name for h in selection.hidden)]) == sorted(names)
    assert not set(deny) & set(selection.names)


@given(order=st.permutations(["p_one", "p_two", "p_three"]))
def test_the_array_order_does_not_depend_on_the_order_presets_were_defined(order):
    saved = dict(PRESETS)
    try:
        definitions = {
            "p_one": Toolset("p_one", "x", tools=("t3", "t1")),
            "p_two": Toolset("p_two", "x", tools=("t2",), includes=("p_one",)),
            "p_three": Toolset("p_three", "x", includes=("p_two",)),
        }
        define_toolsets(*(definitions[name] for name in order))
        reg = ToolRegistry()
        for name in ("t1", "t2", "t3", "t4"):
            _add(reg, name)

        assert agent_tools(reg, toolset="p_three").names == ("t1", "t2", "t3")
    finally:
        PRESETS.clear()
        PRESETS.update(saved)


def test_function_refuses_an_option_it_does_not_know_and_passes_the_rest_to_the_tool(reg):
    with pytest.raises(TypeError, match="unexpected keyword arguments: tiemout"):
        function(tiemout=5)

    def probe(query: str) -> str:
        """Probe something."""
        return query

    tool = function(probe, timeout=7, requires_env=["PROBE_KEY"], label="Probe it", registry=reg)

    assert (tool.timeout, tool.requires_env, tool.label) == (7, ("PROBE_KEY",), "Probe it")
    assert reg.get("probe") is tool
