"""Whether a tool call may run, decided without a socket, a database or a model
(agent_app/turns/decide.py): each check in its order, and the re-check after the person's
yes, against a real registry, a real frozen contract and the real approval policies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_app.turns.decide import CallChecks, CallOutcome, Cleared, call_decision
from sessions_app.services import CallRules
from toolhub.tools import ToolContext, ToolRegistry, function
from toolhub.tools.approval import ASK, AUTO, DENY, OperatorPolicy, decide
from toolhub.tools.resolve import resolve
from toolhub.tools.turn import TurnTools

CTX = ToolContext(env={})


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    def echo(text: str = "") -> str:
        return text

    def wipe(path: str = "") -> str:
        return path

    function(echo, name="echo", description="Says it back.", registry=reg)
    function(wipe, name="wipe", description="Deletes a path.", registry=reg, requires_approval=True)
    return reg


class World:
    """What the checks read, as a test changes it: the disables, the operator's
    policies, the person's answer (and what changes while they think)."""

    def __init__(self) -> None:
        self.disables: dict[str, str] = {}
        self.operator: dict[str, OperatorPolicy] = {}
        self.reads: list[str] = []
        self.asked: list[str] = []
        self.answer: bool | str = True
        self.meanwhile: Any = None
        self.cancelled = False

    def checks(self, *, attended: bool = True) -> CallChecks:
        async def rules(tool, arguments, ctx):
            self.reads.append("rules")
            decision = decide(tool, arguments, ctx, operator=self.operator, profile={})
            return CallRules(disables=dict(self.disables), decision=decision)

        async def approve(call, decision):
            self.asked.append(call["name"])
            if self.meanwhile is not None:
                self.meanwhile(self)
            return self.answer

        return CallChecks(
            rules=rules,
            approve=approve if attended else None,
            cancelled=lambda: self.cancelled,
        )


def _decide(world: World, name: str, *, attended: bool = True) -> CallOutcome | Cleared:
    turn = TurnTools(resolve(_registry(), ctx=CTX))
    target = turn.resolve_call(name, {})
    call = {"call_id": "c1", "name": target.name, "arguments": {}}
    return asyncio.run(
        call_decision(
            call=call, target=target, turn=turn, ctx=CTX, checks=world.checks(attended=attended)
        )
    )


def test_a_tool_outside_the_turns_contract_is_an_error_and_nothing_is_read_or_asked():
    world = World()
    outcome = _decide(world, "rm_rf")

    assert isinstance(outcome, CallOutcome)
    assert outcome.status == "error"
    assert world.reads == []
    assert world.asked == []


def test_a_tool_that_asks_nobody_is_cleared_after_one_read_of_the_rules():
    world = World()
    outcome = _decide(world, "echo")

    assert isinstance(outcome, Cleared)
    assert outcome.tool.name == "echo"
    assert outcome.policy.policy == AUTO
    assert world.reads == ["rules"]
    assert world.asked == []


def test_a_disabled_tool_is_vetoed_in_the_operators_words_whatever_its_policy():
    world = World()
    world.disables["wipe"] = "it leaked a key"
    outcome = _decide(world, "wipe")

    assert isinstance(outcome, CallOutcome)
    assert outcome.status == "vetoed"
    assert "it leaked a key" in outcome.content
    # Vetoed before anybody is asked, though its own rule asks first.
    assert world.asked == []


def test_an_operators_deny_is_a_veto_that_names_the_policy():
    world = World()
    world.operator["echo"] = OperatorPolicy(DENY, "not here")
    outcome = _decide(world, "echo")

    assert isinstance(outcome, CallOutcome)
    assert outcome.status == "vetoed"
    assert outcome.policy is not None
    assert outcome.policy.policy == DENY


def test_a_call_that_asks_first_runs_after_the_persons_yes_and_the_rules_are_read_again():
    world = World()
    outcome = _decide(world, "wipe")

    assert isinstance(outcome, Cleared)
    assert outcome.policy.policy == ASK
    assert world.asked == ["wipe"]
    assert world.reads == ["rules", "rules"]


def test_a_disable_made_while_the_person_thought_vetoes_the_call_they_allowed():
    world = World()
    world.meanwhile = lambda w: w.disables.update(wipe="disabled during the approval")
    outcome = _decide(world, "wipe")

    assert isinstance(outcome, CallOutcome)
    assert outcome.status == "vetoed"
    assert "disabled during the approval" in outcome.content
    # The card still says which policy the person answered.
    assert outcome.policy is not None
    assert outcome.policy.policy == ASK


def test_a_deny_made_while_the_person_thought_vetoes_the_call_with_the_new_policy():
    world = World()
    world.meanwhile = lambda w: w.operator.update(wipe=OperatorPolicy(DENY, "frozen"))
    outcome = _decide(world, "wipe")

    assert isinstance(outcome, CallOutcome)
    assert outcome.status == "vetoed"
    assert outcome.policy is not None
    assert outcome.policy.policy == DENY


@pytest.mark.parametrize(
    ("answer", "reason"),
    [(False, "the person denied it"), ("no answer within 300 s", "no answer within 300 s")],
)
def test_a_person_who_says_no_or_nothing_gets_a_denied_call_with_their_reason(answer, reason):
    world = World()
    world.answer = answer
    outcome = _decide(world, "wipe")

    assert isinstance(outcome, CallOutcome)
    assert (outcome.status, outcome.reason) == ("denied", reason)
    assert outcome.content == f"wipe did not run: {reason}"


def test_an_unattended_call_that_asks_first_is_denied_without_asking_anybody():
    world = World()
    outcome = _decide(world, "wipe", attended=False)

    assert isinstance(outcome, CallOutcome)
    assert outcome.status == "denied"
    assert "nobody is watching" in outcome.reason
    assert world.asked == []


def test_a_stop_while_waiting_for_approval_cancels_the_call_and_a_stop_before_skips_it():
    world = World()
    world.answer = "cancelled"
    world.meanwhile = lambda w: setattr(w, "cancelled", True)
    during = _decide(world, "wipe")
    before = _decide(world, "echo")

    assert isinstance(during, CallOutcome)
    assert during.status == "cancelled"
    assert during.content == "Cancelled while waiting for approval."
    assert isinstance(before, CallOutcome)
    assert before.status == "cancelled"
    assert before.content == "Cancelled before it ran."


def test_a_result_event_carries_what_the_card_shows_and_nothing_it_does_not():
    outcome = CallOutcome(status="denied", content="wipe did not run: no", reason="no")
    event = outcome.to_event({"call_id": "c1", "name": "wipe", "arguments": {}, "via": "call_tool"})

    assert event == {
        "call_id": "c1",
        "name": "wipe",
        "via": "call_tool",
        "status": "denied",
        "content": "wipe did not run: no",
        "reason": "no",
    }
