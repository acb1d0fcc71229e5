"""The starter prompts an empty chat offers: what its tools can do, in a person's words.

A starter names the tool it shows and is offered only when this chat's next turn offers
that tool: an operator's disable, a profile without it, Tools off or plan mode hides it,
so a starter never leads to a refusal. Its text works with a real model and with the
offline demo model, which calls a tool it is asked to "use" (agent_app/providers/demo.py).
A tool that loads when needed (deferred) says so under its starter: pressing it shows the
model finding and loading a tool it was not sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles_app.services import global_disables, profile_lookup_preloaded
from sessions_app.models import ChatSession
from sessions_app.services import session_context
from toolhub.tools import ToolIntent, UnknownToolsetError, resolve


@dataclass(frozen=True, slots=True)
class Starter:
    label: str
    text: str
    tool: str
    # Set when the tool is deferred in this chat.
    note: str = ""


STARTERS = (
    Starter("What time is it?", "What time is it right now? Use current_time.", "current_time"),
    Starter("Work out 17% of 2,340", "Use calculate: 0.17 * 2340", "calculate"),
    Starter("List the files in my workspace", "Use glob: **/*", "glob"),
    Starter("Remember that I like teal", "Use remember: my favourite colour is teal", "remember"),
)
LOADS_WHEN_NEEDED = "Its tool is not sent up front: the model loads it when needed."


def chat_starters(*, session: ChatSession) -> list[Starter]:
    """The starters this chat's next turn can carry out, in ``STARTERS``' order."""
    agent = session.agent
    try:
        resolved = resolve(
            intent=ToolIntent.parse(session.tool_intent),
            agent_intent=ToolIntent.parse(agent.tool_intent),
            profile_lookup=profile_lookup_preloaded(session.owner_id),
            disabled=global_disables(),
            ctx=session_context(session=session),
            strategy=agent.strategy,
        )
    except UnknownToolsetError:
        # The chat's profile is gone: the inspector says so; nothing to start with.
        return []
    offered = set(resolved.names)
    deferred = {tool.name for tool in resolved.deferred}
    return [
        Starter(s.label, s.text, s.tool, LOADS_WHEN_NEEDED if s.tool in deferred else "")
        for s in STARTERS
        if s.tool in offered
    ]
