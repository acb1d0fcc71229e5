"""Agent profiles: who may read and edit them, their writes, and the directory the
``list_agents`` tool reads.

Agents store a tool intent, validated by the runtime's ``ToolIntent``. Shared agents (no
owner) are readable by all and written by staff, with every change in the admin log.
"""

from __future__ import annotations

import threading
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from profiles_app.models import DEFAULT_AGENT, Agent
from profiles_app.services.connections import provider_known
from profiles_app.services.profiles import toolset_check_exists
from profiles_app.services.rules import (
    audit_write,
    check_operator,
    clean_name,
    clean_tools,
    refuse_meta_tool,
)
from toolhub.lib.errors import Conflict, Forbidden, Invalid, NotFound, Stale
from toolhub.lib.versioned import versioned_update
from toolhub.tools import IntentError, ToolIntent
from toolhub.tools.resolve import STRATEGIES

EDITABLE = (
    "name",
    "description",
    "system_prompt",
    "provider",
    "model",
    "context_window",
    "tool_intent",
    "strategy",
    "tier_budget",
    "plan_mode",
)


_TEXT_LIMITS = {"system_prompt": 20_000, "model": 100, "description": 500}
# Agents a turn used lately, checked against their stamp on every use.
_AGENT_CACHE_SIZE = 256
_agents: dict[int, Agent] = {}
_agents_lock = threading.Lock()


def agents_visible_to(user: Any) -> QuerySet[Agent]:
    return Agent.objects.filter(Q(owner=user) | Q(owner__isnull=True))


def shared_first(agents: Any) -> list[Agent]:
    """Agents as the pickers list them: the shared ones, then the person's, by name."""
    return sorted(agents, key=lambda agent: (not agent.is_shared, agent.name, agent.pk))


def agent_current(*, agent_id: int, version: int, updated: Any) -> Agent:
    """The agent as stored now, given its ``version`` and ``updated`` read with the row
    that names it: a service edit bumps the version, an admin save the timestamp, so a
    cached copy is used only while both match."""
    with _agents_lock:
        cached = _agents.get(agent_id)
    if cached is not None and cached.version == version and cached.updated == updated:
        return cached
    agent = Agent.objects.get(pk=agent_id)
    with _agents_lock:
        if len(_agents) >= _AGENT_CACHE_SIZE:
            _agents.clear()
        _agents[agent_id] = agent
    return agent


def agent_get_for_user(*, user: Any, agent_id: int) -> Agent:
    agent = agents_visible_to(user).filter(pk=agent_id).first()
    if agent is None:
        raise NotFound("no such agent")
    return agent


def default_agent() -> Agent:
    agent, _ = Agent.objects.get_or_create(name=DEFAULT_AGENT, owner=None)
    return agent


def _clean(fields: dict[str, Any], user: Any, *, shared: bool) -> dict[str, Any]:
    cleaned: dict[str, Any] = {}
    for key, value in fields.items():
        if key not in EDITABLE:
            raise Invalid(f"unknown field {key}", fields={key: ["unknown"]})
        if key == "name":
            value = clean_name(value)
        elif key == "tool_intent":
            try:
                intent = ToolIntent.parse(value)
            except IntentError as exc:
                raise Invalid(str(exc), fields={"tool_intent": [str(exc)]}) from None
            for name in intent.disabled:
                refuse_meta_tool(name, "tool_intent", "removed from an agent")
            toolset_check_exists(user=user, name=intent.toolset, field="tool_intent", shared=shared)
            value = intent.to_json()
        elif key == "strategy" and value not in STRATEGIES:
            # The value is not echoed: it may not even be encodable (a lone surrogate).
            raise Invalid("unknown strategy", fields={"strategy": ["unknown"]})
        elif key == "provider" and not provider_known(value):
            raise Invalid("unknown provider", fields={"provider": ["unknown"]})
        elif (
            key in ("context_window", "tier_budget")
            and value is not None
            and (
                not isinstance(value, int) or isinstance(value, bool) or not 1_000 <= value <= 10**7
            )
        ):
            label = "The context window" if key == "context_window" else "The tier budget"
            raise Invalid(
                f"{label} must be a whole number of tokens from 1,000 to 10,000,000, or empty.",
                fields={key: ["range"]},
            )
        elif key in _TEXT_LIMITS and (
            not isinstance(value, str) or len(value) > _TEXT_LIMITS[key] or "\x00" in value
        ):
            raise Invalid(
                f"{key} must be text of at most {_TEXT_LIMITS[key]:,} characters",
                fields={key: ["invalid"]},
            )
        elif key == "plan_mode" and not isinstance(value, bool):
            raise Invalid("plan_mode must be true or false", fields={key: ["bool"]})
        cleaned[key] = value
    return cleaned


def agent_create(*, user: Any, shared: bool = False, operator: Any = None, **fields: Any) -> Agent:
    check_operator(operator)
    if shared and not user.is_staff:
        raise Forbidden("shared agents are created by staff")
    cleaned = _clean(fields, user, shared=shared)
    if "name" not in cleaned:
        raise Invalid("name is required", fields={"name": ["required"]})
    try:
        with transaction.atomic():
            agent = Agent.objects.create(owner=None if shared else user, **cleaned)
            audit_write(
                user=user,
                operator=operator,
                shared=shared,
                obj=agent,
                flag=ADDITION,
                message=f"created {'shared ' if shared else ''}agent {agent.name}",
            )
    except IntegrityError:
        raise Conflict("an agent with that name exists", fields={"name": ["taken"]}) from None
    return agent


def agent_update(
    *, user: Any, agent: Agent, version: int, operator: Any = None, **fields: Any
) -> Agent:
    check_operator(operator)
    if agent.is_shared and not user.is_staff:
        raise Forbidden("shared agents are edited by staff")
    if not agent.is_shared and agent.owner_id != user.pk:
        raise NotFound("no such agent")
    cleaned = _clean(fields, user, shared=agent.is_shared)
    try:
        with transaction.atomic():
            versioned_update(Agent.objects, pk=agent.pk, version=version, what="agent", **cleaned)
            agent.refresh_from_db()
            audit_write(
                user=user,
                operator=operator,
                shared=agent.is_shared,
                obj=agent,
                flag=CHANGE,
                message=f"changed {', '.join(sorted(cleaned))}",
            )
    except IntegrityError:
        raise Conflict("an agent with that name exists", fields={"name": ["taken"]}) from None
    return agent


def agent_tool_set(*, user: Any, agent: Agent, version: int, tool: str, offered: bool) -> Agent:
    """Take ``tool`` out of what the agent offers (its own ``disabled`` list, on top of its
    profile), or put it back: off that list and, when the agent has an allow list, onto
    it. The rest of its intent is kept; the new intent is built from the version named."""
    if agent.version != version:
        raise Stale("agent")
    (tool,) = clean_tools([tool], "tool")
    if not offered:
        refuse_meta_tool(tool, "tool", "removed from an agent")
    intent = ToolIntent.parse(agent.tool_intent).to_json()
    intent["disabled"] = [name for name in intent["disabled"] if name != tool]
    if not offered:
        intent["disabled"].append(tool)
    elif intent["allowed"] is not None and tool not in intent["allowed"]:
        intent["allowed"].append(tool)
    return agent_update(user=user, agent=agent, version=version, tool_intent=intent)


def agent_check_deletable(*, user: Any, agent: Agent) -> None:
    """``Forbidden`` for a shared agent and a person who is not staff, ``Conflict`` for the
    default agent (it always exists), ``NotFound`` for another person's."""
    if agent.is_shared and not user.is_staff:
        raise Forbidden("shared agents are deleted by staff")
    if not agent.is_shared and agent.owner_id != user.pk:
        raise NotFound("no such agent")
    if agent.is_shared and agent.name == DEFAULT_AGENT:
        raise Conflict("the default agent always exists", fields={"agent": ["default"]})


def agent_delete(*, user: Any, agent: Agent, version: int, operator: Any = None) -> int:
    """Delete ``agent`` if ``version`` is current; its chats go on with ``default`` (their
    history stays). Returns how many chats moved."""
    check_operator(operator)
    agent_check_deletable(user=user, agent=agent)
    fallback = default_agent()
    with transaction.atomic():
        locked = Agent.objects.select_for_update().filter(pk=agent.pk, version=version).first()
        if locked is None:
            if Agent.objects.filter(pk=agent.pk).exists():
                raise Stale("agent")
            raise NotFound("no such agent")
        moved = locked.sessions.update(agent=fallback, tier_plan=None)
        audit_write(
            user=user,
            operator=operator,
            shared=agent.is_shared,
            obj=locked,
            flag=DELETION,
            message=f"deleted {'shared ' if agent.is_shared else ''}agent {agent.name}",
        )
        locked.delete()
    return moved


def agent_duplicate(*, user: Any, agent: Agent) -> Agent:
    """A copy of ``agent`` (one of the person's, or a shared one) as their own, under the
    first free name "<name> copy", "<name> copy 2", …"""
    taken = set(Agent.objects.filter(owner=user).values_list("name", flat=True))
    # Room for the longest suffix, so every candidate is a valid name.
    base = f"{agent.name[: 64 - len(' copy 999')].rstrip(' .-_')} copy"
    name = next(
        (
            candidate
            for candidate in (base, *(f"{base} {n}" for n in range(2, 1_000)))
            if candidate not in taken
        ),
        None,
    )
    if name is None:
        raise Conflict(f"too many copies of {agent.name}; rename some first")
    # A shared agent names only shared profiles and presets, which the copy can use too.
    fields = {key: getattr(agent, key) for key in EDITABLE if key != "name"}
    return agent_create(user=user, name=name, **fields)


class AgentsAdapter:
    """list_agents: the agents a person may chat with (toolhub.tools.context protocol)."""

    def list(self, *, user_id: str) -> list[dict[str, Any]]:
        agents = Agent.objects.filter(Q(owner_id=int(user_id)) | Q(owner__isnull=True))
        return [
            {
                "name": agent.name,
                "model": agent.model or "default",
                "shared": agent.is_shared,
                "about": agent.system_prompt[:200],
            }
            for agent in agents
        ]
