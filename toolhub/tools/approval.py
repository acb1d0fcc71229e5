"""Approval policies: whether a call runs without asking (``auto``), asks the person first
(``ask``), or never runs (``deny``), and who decided (docs/security.md, "Approval
policies").

Four voices, in this order of strength:

1. the **operator**: a global disable is their ``deny`` and always wins (it is a veto,
   ``TurnTools.veto_now``); their ``auto`` or ``ask`` replaces the author's default for
   everybody, and their ``ask`` is a floor nobody below may lift;
2. the **person's profile** (the chat's toolset): ``deny`` removes the tool; ``ask``
   asks every time; ``auto`` lifts the author's ``ask`` only where the operator set no
   ``ask``;
3. **"allow for this chat"**: a name the person allowed in this conversation runs without
   asking, where only the author asked (an operator's or a profile's ``ask`` asks every
   time);
4. the tool's **author**: ``requires_approval`` (a rule of the arguments asks when it says
   so, or when it raises).

The decision is pure: callers pass what they read *now* (hard line 5), so the same inputs
give the same decision in the prompt's assembly and at the call.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from toolhub.tools.context import ToolContext
from toolhub.tools.tool import Tool

AUTO, ASK, DENY = "auto", "ask", "deny"
POLICIES = (AUTO, ASK, DENY)
# What an operator sets here; their deny is a global disable (a reason, the audit log).
OPERATOR_POLICIES = (AUTO, ASK)
_STRENGTH = {AUTO: 0, ASK: 1, DENY: 2}

AUTHOR, OPERATOR, PROFILE, CHAT = "author", "operator", "profile", "chat"


@dataclass(frozen=True, slots=True)
class OperatorPolicy:
    """An operator's ``auto`` or ``ask`` for one tool, for everybody."""

    policy: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """What a call does (``policy``), which voice decided it (``by``) and, in a person's
    words, why. ``chat_allowable``: an ``ask`` the person may lift for the rest of the
    chat (only the author's: an operator's or a profile's asks every time)."""

    policy: str
    by: str
    why: str
    chat_allowable: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "by": self.by, "why": self.why}


def stricter(a: str, b: str) -> str:
    return a if _STRENGTH[a] >= _STRENGTH[b] else b


def author_policy(tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
    return ASK if tool.needs_approval(arguments, ctx) else AUTO


def decide(
    tool: Tool,
    arguments: Mapping[str, Any],
    ctx: ToolContext,
    *,
    operator: Mapping[str, OperatorPolicy],
    profile: Mapping[str, str],
    profile_name: str = "",
    chat_allowed: Collection[str] = (),
) -> Decision:
    """The policy of one call (a global disable is checked before, as a veto)."""
    name = tool.name
    set_by_operator = operator.get(name)
    if set_by_operator is not None:
        why = f"an operator set {name} to {_said(set_by_operator.policy)}"
        if set_by_operator.reason:
            why += f": {set_by_operator.reason}"
        decision = Decision(set_by_operator.policy, OPERATOR, why)
    else:
        policy = author_policy(tool, arguments, ctx)
        decision = Decision(policy, AUTHOR, f"{name} {_author_words(policy)}")
    chosen = profile.get(name)
    where = f"the profile '{profile_name}'" if profile_name else "this chat's profile"
    if chosen == DENY:
        return Decision(DENY, PROFILE, f"{where} never runs {name}")
    floor = set_by_operator.policy if set_by_operator is not None else AUTO
    if chosen in (AUTO, ASK):
        # A person narrows what the operator allows, never lifts it; where both say the
        # same, the operator is named (theirs holds for everybody).
        within_floor = stricter(chosen, floor) == chosen
        operator_said_it = decision.by == OPERATOR and chosen == decision.policy
        if within_floor and not operator_said_it:
            decision = Decision(chosen, PROFILE, f"{where} set {name} to {_said(chosen)}")
    if decision.policy == ASK and decision.by == AUTHOR:
        if name in chat_allowed:
            return Decision(AUTO, CHAT, f"you allowed {name} for this chat")
        return Decision(ASK, decision.by, decision.why, chat_allowable=True)
    return decision


def _said(policy: str) -> str:
    return {AUTO: "run without asking", ASK: "ask every time", DENY: "never run"}[policy]


def _author_words(policy: str) -> str:
    return "asks before it runs" if policy == ASK else "runs without asking"
