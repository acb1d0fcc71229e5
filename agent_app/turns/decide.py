"""Whether one tool call may run: every check in order, each in one place.

``call_decision`` decides a call the model finished, before anything of it runs:

1. the turn was cancelled: it does not start;
2. the frozen contract (``TurnTools.resolve_call`` made the target): a name outside it is
   an error the model reads, a tool a rule of this turn removed is vetoed in the
   person's words;
3. the vetoes as they stand *now* (a global disable, ``can_use``), then the approval
   policy as stored now, both read at once (``CallRules``) and applied in
   ``_allowed_now``: ``deny`` is a veto, ``ask`` goes to the person;
4. after the person's yes, step 3 again: a disable or a stricter policy made while they
   thought still holds (docs/architecture.md, hard line 5).

The answer is either a ``CallOutcome`` (the call does not run; what its result says) or
``Cleared`` (the tool, and the policy that let it run). What the decision reads from
outside comes in ``CallChecks``: the rules as stored (``CallRules``) and the person's
answer, so it is decided the same way with or without a socket (the runner passes the
database's and the chat card's; tests/unit/test_call_decision.py its own).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sessions_app.services import CallRules
from toolhub.tools import ToolContext
from toolhub.tools.approval import ASK, DENY, Decision
from toolhub.tools.files import ToolFile
from toolhub.tools.images import ToolImage
from toolhub.tools.tool import Tool
from toolhub.tools.turn import CallTarget, TurnTools

CANCELLED = "the turn was cancelled"


@dataclass(frozen=True, slots=True, kw_only=True)
class CallOutcome:
    """What became of one call: the ``tool_result`` event's status, content and reason,
    the deferred tools it loaded, and whether it came from the person's result cache."""

    status: str
    content: str
    reason: str = ""
    references: tuple[str, ...] = ()
    cached: bool = False
    # Where the whole result is kept when the model got it cut (a tool's persist_full).
    full_ref: str = ""
    # The approval policy that decided the call (toolhub.tools.approval), when one did.
    policy: Decision | None = None
    # Images the tool returned beside its text (toolhub/tools/images.py).
    images: tuple[ToolImage, ...] = ()
    # A tool's structured result, JSON as the tool gave it.
    structured: Any = None
    # Files for the person (toolhub/tools/files.py), stored when the result is.
    files: tuple[ToolFile, ...] = ()

    def to_event(self, call: Mapping[str, Any]) -> dict[str, Any]:
        """The ``tool_result`` event's data for ``call`` (its ``tool_call`` data)."""
        result: dict[str, Any] = {"call_id": call["call_id"], "name": call["name"]}
        if call.get("via"):
            result["via"] = call["via"]
        result.update(status=self.status, content=self.content)
        if self.reason:
            result["reason"] = self.reason
        if self.references:
            result["references"] = list(self.references)
        if self.cached:
            # Served from the person's result cache: it did not run again.
            result["cached"] = True
        if self.full_ref:
            result["full_ref"] = self.full_ref
        if self.policy is not None:
            result["policy"] = self.policy.to_json()
        if self.images:
            result["images"] = [image.to_json() for image in self.images]
        if self.structured is not None:
            result["structured"] = self.structured
        return result


@dataclass(frozen=True, slots=True, kw_only=True)
class Cleared:
    """The call may run: its tool, and the policy that let it (``auto`` or an ``ask``
    the person allowed)."""

    tool: Tool
    policy: Decision


# The person's answer to an approval: True (allowed) or the words of a no.
Approve = Callable[[Mapping[str, Any], Decision], Awaitable[bool | str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class CallChecks:
    """What a decision reads from outside, each read when the decision needs it."""

    # The global disables and this call's approval policy, as stored now.
    rules: Callable[[Tool, Mapping[str, Any], ToolContext], Awaitable[CallRules]]
    # Asks the person (``call`` as its tool_call event said it); ``None`` when nobody
    # watches the turn, and a call that asks first then does not run.
    approve: Approve | None
    # Whether the turn was cancelled (read again after the person answered).
    cancelled: Callable[[], bool]


async def call_decision(
    *,
    call: Mapping[str, Any],
    target: CallTarget,
    turn: TurnTools,
    ctx: ToolContext,
    checks: CallChecks,
) -> CallOutcome | Cleared:
    """Decide ``call`` (its ``tool_call`` event's data), resolved to ``target`` by
    ``turn``'s frozen contract: why it does not run, or that it may."""
    if checks.cancelled():
        return CallOutcome(status="cancelled", content="Cancelled before it ran.", reason=CANCELLED)
    if target.refused is not None:
        return CallOutcome(
            status="vetoed", content=target.refused.told, reason=target.refused.reason
        )
    if target.error or target.tool is None:
        return CallOutcome(status="error", content=target.error or "No such tool.")
    tool, arguments = target.tool, call["arguments"]
    first = await _allowed_now(tool, arguments, turn, ctx, checks)
    if isinstance(first, CallOutcome) or first.policy != ASK:
        return first if isinstance(first, CallOutcome) else Cleared(tool=tool, policy=first)
    refused = await _approved(tool, call, first, checks)
    if refused is not None:
        return refused
    again = await _allowed_now(tool, arguments, turn, ctx, checks)
    if isinstance(again, CallOutcome):
        # A veto names no policy of its own: the one the person answered stays on the card.
        return again if again.policy is not None else _with_policy(again, first)
    return Cleared(tool=tool, policy=first)


async def _allowed_now(
    tool: Tool,
    arguments: Mapping[str, Any],
    turn: TurnTools,
    ctx: ToolContext,
    checks: CallChecks,
) -> CallOutcome | Decision:
    """The vetoes and the approval policy as they stand now: a refusal, or the policy
    (``auto`` or ``ask``)."""
    rules = await checks.rules(tool, arguments, ctx)
    veto = turn.veto_now(tool, ctx, rules.disables)
    if veto:
        return CallOutcome(status="vetoed", content=veto.told, reason=veto.reason)
    decision = rules.decision
    if decision.policy == DENY:
        return CallOutcome(
            status="vetoed",
            content=f"{tool.name} is not allowed: {decision.why}",
            reason=decision.why,
            policy=decision,
        )
    return decision


async def _approved(
    tool: Tool, call: Mapping[str, Any], decision: Decision, checks: CallChecks
) -> CallOutcome | None:
    """Ask the person; ``None`` when they allowed it."""
    if checks.approve is None:
        reason = "it asks a person first, and nobody is watching this turn"
        return _denied(tool, reason, decision)
    verdict = await checks.approve(call, decision)
    if verdict is True:
        return None
    if checks.cancelled():
        return CallOutcome(
            status="cancelled",
            content="Cancelled while waiting for approval.",
            reason=CANCELLED,
            policy=decision,
        )
    return _denied(tool, verdict or "the person denied it", decision)


def _denied(tool: Tool, reason: str, decision: Decision) -> CallOutcome:
    return CallOutcome(
        status="denied",
        content=f"{tool.name} did not run: {reason}",
        reason=reason,
        policy=decision,
    )


def _with_policy(outcome: CallOutcome, policy: Decision) -> CallOutcome:
    return CallOutcome(
        status=outcome.status, content=outcome.content, reason=outcome.reason, policy=policy
    )
