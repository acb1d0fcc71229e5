"""Approval policies decide who has the last word: an operator's ask is a floor, a
profile's deny removes, a person lifts an author's ask only where the operator allows."""

from __future__ import annotations

import itertools

import pytest

from toolhub.tools import ToolContext, function
from toolhub.tools.approval import ASK, AUTO, DENY, OperatorPolicy, decide


def _act(target: str = "") -> str:
    """Act.

    Args:
        target: On what.
    """
    return target


def _tool(requires_approval=False):
    return function(_act, name="act", requires_approval=requires_approval, register_globally=False)


def _decide(author=AUTO, operator=None, profile=None, chat=False, arguments=None):
    return decide(
        _tool(author == ASK),
        arguments or {},
        ToolContext(),
        operator={"act": OperatorPolicy(operator, "house rule")} if operator else {},
        profile={"act": profile} if profile else {},
        profile_name="work",
        chat_allowed={"act"} if chat else set(),
    )


@pytest.mark.parametrize(
    ("author", "operator", "profile", "chat", "policy", "by"),
    [
        (AUTO, None, None, False, AUTO, "author"),
        (ASK, None, None, False, ASK, "author"),
        (ASK, AUTO, None, False, AUTO, "operator"),
        (AUTO, ASK, None, False, ASK, "operator"),
        (AUTO, AUTO, DENY, False, DENY, "profile"),
        (ASK, None, AUTO, False, AUTO, "profile"),
        (AUTO, ASK, AUTO, False, ASK, "operator"),
        (AUTO, AUTO, ASK, False, ASK, "profile"),
        (ASK, None, None, True, AUTO, "chat"),
        (AUTO, ASK, None, True, ASK, "operator"),
        (AUTO, None, ASK, True, ASK, "profile"),
        (ASK, AUTO, ASK, True, ASK, "profile"),
        (ASK, None, DENY, True, DENY, "profile"),
    ],
)
def test_each_voice_decides_in_its_order(author, operator, profile, chat, policy, by):
    decision = _decide(author, operator, profile, chat)
    assert (decision.policy, decision.by) == (policy, by)


def test_no_combination_lets_a_person_lift_an_operators_or_a_profiles_ask_or_deny():
    for author, operator, profile, chat in itertools.product(
        (AUTO, ASK), (None, AUTO, ASK), (None, AUTO, ASK, DENY), (False, True)
    ):
        decision = _decide(author, operator, profile, chat)
        if profile == DENY:
            assert decision.policy == DENY
        elif operator == ASK or profile == ASK:
            assert decision.policy == ASK
        if decision.policy == ASK:
            # Only the author's ask can be lifted for the chat, and then it was not yet.
            assert decision.chat_allowable == (decision.by == "author")
            assert not (chat and decision.by == "author")


def test_the_operators_ask_says_who_and_why_and_cannot_be_allowed_for_the_chat():
    decision = _decide(AUTO, ASK, None, True)
    assert decision.why == "an operator set act to ask every time: house rule"
    assert decision.to_json() == {"policy": ASK, "by": "operator", "why": decision.why}
    assert decision.chat_allowable is False


def test_an_authors_rule_that_raises_asks_to_be_safe():
    def rule(arguments, ctx):
        raise RuntimeError("broken rule")

    decision = decide(_tool(rule), {}, ToolContext(), operator={}, profile={})
    assert (decision.policy, decision.by) == (ASK, "author")


def test_an_authors_rule_of_the_arguments_asks_only_when_it_says_so():
    tool = _tool(lambda arguments, ctx: arguments.get("target") == "prod")
    assert decide(tool, {"target": "dev"}, ToolContext(), operator={}, profile={}).policy == AUTO
    assert decide(tool, {"target": "prod"}, ToolContext(), operator={}, profile={}).policy == ASK


def test_a_profiles_deny_hides_the_tool_at_layer_5_and_an_operators_reason_comes_first():
    from toolhub.tools import ProfileSpec, ToolRegistry, resolve

    registry = ToolRegistry()
    registry.register(_tool())
    spec = ProfileSpec("work", "all_except", (), (("act", DENY),))

    resolved = resolve(registry, intent={"toolset": "work"}, profile_lookup=lambda name: spec)
    assert "act" not in resolved.names
    hidden = resolved.reason_for("act")
    assert (hidden.layer, hidden.reason) == ("L5", "the profile 'work' never runs it")

    disabled = resolve(
        registry,
        intent={"toolset": "work"},
        profile_lookup=lambda name: spec,
        disabled={"act": "disabled globally by ops: leaks"},
    )
    assert disabled.reason_for("act").reason == "disabled globally by ops: leaks"

    picked = resolve(
        registry, intent={"toolset": "work", "picked": ["act"]}, profile_lookup=lambda name: spec
    )
    assert "act" in picked.names


def test_a_policy_value_that_is_not_one_is_ignored_not_obeyed():
    decision = _decide(ASK, None, "sometimes", True)
    assert (decision.policy, decision.by) == (AUTO, "chat")
    assert _decide(ASK, None, "sometimes", False).policy == ASK
