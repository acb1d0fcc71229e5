"""``ask_user_question``: ask the person watching and wait for the answer.

Withheld from unattended turns (layer 5): nobody would answer.
"""

from __future__ import annotations

from toolhub.tools.context import ToolContext, present
from toolhub.tools.decorator import function


def _can_ask(ctx: ToolContext) -> bool:
    return ctx.services.asker is not None


@function(can_use=_can_ask, timeout=None, label="Ask the user")
async def ask_user_question(
    question: str, options: list[str] | None = None, *, ctx: ToolContext
) -> str:
    """Ask the person a question and wait for their answer.

    Args:
        question: The question, in one or two sentences.
        options: Suggested answers the person can pick from.
    """
    asker = present(ctx.services.asker, "a person to ask")
    answer = await asker.ask(question=question, options=list(options or []))
    return f"The person answered: {answer}"
