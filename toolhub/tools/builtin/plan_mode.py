"""``enter_plan_mode`` and ``exit_plan_mode``: switch the session into and out of planning.

In plan mode the tools that change things are hidden (their ``unsafe_in`` names ``plan``);
leaving it presents the plan and needs the person's approval.
"""

from __future__ import annotations

from toolhub.tools.context import ToolContext, present
from toolhub.tools.decorator import function

PLAN = "plan"


def _has_switch(ctx: ToolContext) -> bool:
    return ctx.services.plan_mode is not None and ctx.session_id is not None


def _in_plan_mode(ctx: ToolContext) -> bool:
    return _has_switch(ctx) and ctx.mode == PLAN


@function(can_use=_has_switch, unsafe_in=(PLAN,), defer=True, label="Enter plan mode")
def enter_plan_mode(*, ctx: ToolContext) -> str:
    """Switch to plan mode: explore and propose a plan before changing anything."""
    switch = present(ctx.services.plan_mode, "plan mode")
    switch.set_plan_mode(session_id=present(ctx.session_id, "a session"), on=True)
    return "Plan mode is on from the next turn: tools that change things are hidden."


@function(can_use=_in_plan_mode, requires_approval=True, label="Exit plan mode")
def exit_plan_mode(plan: str, *, ctx: ToolContext) -> str:
    """Present the plan to the person and, once they approve, leave plan mode.

    Args:
        plan: The plan, in Markdown.
    """
    switch = present(ctx.services.plan_mode, "plan mode")
    switch.set_plan_mode(session_id=present(ctx.session_id, "a session"), on=False, plan=plan)
    return "The person approved the plan; plan mode is off from the next turn."
