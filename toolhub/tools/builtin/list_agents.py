"""``list_agents``: the agents this person can use."""

from __future__ import annotations

from typing import Any

from toolhub.tools.context import ToolContext, present
from toolhub.tools.decorator import function


def _has_directory(ctx: ToolContext) -> bool:
    return ctx.services.agents is not None and ctx.user_id is not None


@function(can_use=_has_directory, defer=True, label="List agents")
def list_agents(*, ctx: ToolContext) -> list[dict[str, Any]]:
    """List the agents available to this person: name, model and what each is for."""
    directory = present(ctx.services.agents, "the agent directory")
    return directory.list(user_id=present(ctx.user_id, "a person"))
