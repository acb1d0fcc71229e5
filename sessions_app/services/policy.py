"""What a chat's calls are allowed to do: the person's "Allow for this chat" and the call
policy that decides ask, allow or deny for each call.

- An allowance is a tool name kept on the chat (``allowed_tools``): revoked, the tool asks
  again from its next call; an operator's "ask every time" outranks it.
- The policy is decided per call, at execution time, from the operators' policies, the
  chat's allowances and the tool's own rule (``toolhub.tools.approval.decide``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import F

from profiles_app.services import (
    clean_tools,
    global_disables,
    operator_policies,
    profile_lookup_for,
)
from sessions_app.models import ChatSession
from sessions_app.services.chats import sessions_of
from toolhub.lib.errors import NotFound
from toolhub.tools import (
    ProfileSpec,
    Tool,
    ToolContext,
    ToolIntent,
)
from toolhub.tools.approval import Decision, decide
from toolhub.tools.intent import MAX_NAMES


def session_allow_for_chat(*, session_id: Any, tool: str) -> None:
    """ "Allow for this chat": ``tool`` runs without asking in this chat from now on, where
    the policies let a person lift the ask (toolhub.tools.approval)."""
    (tool,) = clean_tools([tool], "tool")
    with transaction.atomic():
        row = ChatSession.objects.select_for_update().only("allowed_tools").get(pk=session_id)
        if tool not in row.allowed_tools:
            # At most MAX_NAMES: the oldest allowance goes first (it asks again).
            allowed = [*row.allowed_tools, tool][-MAX_NAMES:]
            ChatSession.objects.filter(pk=session_id).update(
                allowed_tools=allowed, version=F("version") + 1
            )


def session_allowed_revoke(*, user: Any, session: ChatSession, tool: str) -> ChatSession:
    """Take ``tool`` off the chat's allowed list: its next call asks again. Revoking a name
    that is not there changes nothing (two tabs may both revoke)."""
    with transaction.atomic():
        row = sessions_of(user).select_for_update().filter(pk=session.pk).first()
        if row is None:
            raise NotFound("no such session")
        if tool in row.allowed_tools:
            sessions_of(user).filter(pk=session.pk).update(
                allowed_tools=[name for name in row.allowed_tools if name != tool],
                version=F("version") + 1,
            )
    session.refresh_from_db()
    return session


@dataclass(frozen=True, slots=True, kw_only=True)
class CallRules:
    """The rules one call is decided by, as stored now: the global disables (tool → the
    operator's reason; a veto) and the call's approval policy."""

    disables: Mapping[str, str]
    decision: Decision


def session_call_rules(
    *, session_id: UUID, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext
) -> CallRules:
    """The global disables and whether this call of ``tool`` runs, asks or is refused, all
    as stored *now*: the operator's policies, the chat's profile's and the chat's own
    allowances (hard line 5). Read in one call, so a turn's check is one trip to its
    database thread (the chat's row, and the operators' rules, which each process keeps
    until their generation token changes); the caller applies the disables first (a
    disabled tool is vetoed whatever its policy)."""
    row = (
        ChatSession.objects.select_related("agent")
        .only("owner_id", "tool_intent", "allowed_tools", "agent__tool_intent")
        .get(pk=session_id)
    )
    profile = chat_profile(session=row)
    decision = decide(
        tool,
        arguments,
        ctx,
        operator=operator_policies(),
        profile=dict(profile.approvals) if profile is not None else {},
        profile_name=profile.name if profile is not None else "",
        chat_allowed=frozenset(row.allowed_tools or ()),
    )
    return CallRules(disables=global_disables(), decision=decision)


def chat_profile(*, session: ChatSession) -> ProfileSpec | None:
    """The stored profile a chat's tools come from, if its toolset names one (hand-picked
    tools or a preset: none), as resolution picks it."""
    intent = ToolIntent.parse(session.tool_intent)
    agent = ToolIntent.parse(session.agent.tool_intent)
    enabled = next((v for v in (intent.enabled, agent.enabled) if v is not None), True)
    picked = intent.picked if intent.picked is not None else agent.picked
    if not enabled or picked is not None:
        return None
    name = intent.toolset or agent.toolset
    if name is None:
        return None
    return profile_lookup_for(session.owner_id)(name)
