"""A chat's tool context and resolution: what its tools run with, and what its next turn
sends.

- ``session_context`` is what every tool of the chat runs with: its person, its workspace,
  its window (the turn's, else the agent's setting, else the assumed one), its services.
- ``session_resolve`` expands the chat's intent live from the registry, with the global
  disables the turn's claim read; the tier plan stored with the chat is kept while its key
  holds, so the array does not churn (docs/accounting.md); ``session_plan_store`` keeps a
  new one.
- A person's cached and stored results are theirs: keys carry the person and the chat.
- ``turn_context`` is all a turn takes from its chat, in one call inside the turn's
  transaction: a refused intent or rewind raises, and the whole beginning rolls back.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Count, F

from profiles_app.services import (
    global_disables,
    profile_lookup_for,
)
from sessions_app.eventlog import event_append, session_history, user_message_kept
from sessions_app.models import ChatSession, FullResult, SessionEvent
from sessions_app.services.chats import session_intent_merge
from sessions_app.uploads import workspace_of
from toolhub.lib.catalog_news import chat_options_changed
from toolhub.lib.chat_services import chat_services
from toolhub.lib.errors import Conflict
from toolhub.lib.model_windows import DEFAULT_WINDOW
from toolhub.lib.rows import CompiledQuery, compiled_once
from toolhub.lib.storable import storable_text
from toolhub.tools import (
    ResolvedToolset,
    RuntimeSettings,
    TierPlan,
    ToolContext,
    resolve,
)


class MessengerAdapter:
    """send_message: post into another session of the same person, as a user message."""

    def send(self, *, user_id: str, from_session: str | None, to_session: str, text: str) -> str:
        target_id = _uuid_or_none(to_session)
        if target_id is None or not (
            ChatSession.objects.filter(
                pk=target_id, owner_id=int(user_id), deleted__isnull=True
            ).exists()
        ):
            raise LookupError(to_session)
        event = event_append(
            session_id=to_session,
            turn="",
            kind="user_message",
            data={"text": text[:32_000], "from_session": from_session},
        )
        return f"event {event.seq}"


class PlanModeAdapter:
    """enter_plan_mode / exit_plan_mode: switch the session's plan mode for next turns."""

    def set_plan_mode(self, *, session_id: str, on: bool, plan: str | None = None) -> None:
        ChatSession.objects.filter(pk=session_id).update(plan_mode=on, version=F("version") + 1)
        # The chat's pages draw their options again, as when a person switches it: the
        # composer's Plan mode chip says what the next turn does.
        chat_options_changed(session_id=session_id, tab="")


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _usage(session: ChatSession) -> dict[str, int]:
    """The person's calls per tool, over all their chats."""
    rows = _usage_query().rows(session.owner_id)
    return {name: calls for name, calls in rows if isinstance(name, str)}


# The owner the usage query is compiled with, replaced by the real one on each run.
_ANY_OWNER = -7_301


@functools.cache
def _usage_query() -> CompiledQuery:
    # Read whenever a plan is made, which the inspector does on every look at a chat that
    # has not had a turn yet: compiled once, not per call (toolhub.lib.rows).
    return compiled_once(
        SessionEvent.objects.filter(session__owner_id=_ANY_OWNER, kind="tool_call")
        .values_list("data__name")
        .annotate(calls=Count("id")),
        _ANY_OWNER,
    )


class PersonalResultCache:
    """The runtime's result cache (tools declared ``cache=True``: web_fetch, web_search)
    on Django's cache, in a namespace of its own per person: what one person's call
    fetched is never served to another. Shared across processes (Redis) when configured,
    so a worker and the web server hit the same entries."""

    def __init__(self, user_id: str) -> None:
        self._suffix = f":person:{user_id}"

    def get(self, key: str) -> str | None:
        value = cache.get(key + self._suffix)
        return value if isinstance(value, str) else None

    def set(self, key: str, value: str, ttl: float) -> None:
        cache.set(key + self._suffix, value, timeout=ttl)


class PersonalResultStore:
    """The runtime's full-result store on the database: a cut result's whole text, kept
    with its session (so only the session's owner can read it back) and bounded: at most
    ``TOOLHUB_FULL_RESULTS_PER_SESSION`` per session (the oldest go) and
    ``TOOLHUB_FULL_RESULT_MAX_CHARS`` each (the rest is cut, and said)."""

    def __init__(self, session_id: Any) -> None:
        self._session_id = session_id

    def put(self, *, tool: str, text: str, ctx: ToolContext) -> str:
        limit = settings.TOOLHUB_FULL_RESULT_MAX_CHARS
        kept = text if len(text) <= limit else text[:limit] + f"\n[… cut at {limit:,} characters]"
        with transaction.atomic():
            row = FullResult.objects.create(
                session_id=self._session_id, tool=tool, text=storable_text(kept), chars=len(text)
            )
            keep = settings.TOOLHUB_FULL_RESULTS_PER_SESSION
            old = FullResult.objects.filter(session_id=self._session_id).values_list(
                "pk", flat=True
            )[keep:]
            FullResult.objects.filter(pk__in=list(old)).delete()
        return f"/api/sessions/{self._session_id}/results/{row.pk}/"


def session_context(
    *,
    session: ChatSession,
    attended: bool = True,
    channel: str | None = None,
    context_window: int | None = None,
) -> ToolContext:
    """What a tool of ``session`` runs with; ``context_window`` is the turn's window (its
    result ceilings follow it), the agent's setting when the caller has none."""
    return ToolContext(
        user_id=str(session.owner_id),
        session_id=str(session.pk),
        channel=channel or session.channel,
        mode="plan" if session.plan_mode else None,
        attended=attended,
        workspace=workspace_of(session_id=session.pk),
        context_window_tokens=context_window or session.agent.context_window or DEFAULT_WINDOW,
        env=os.environ,
        services=chat_services(attended=attended),
        settings=RuntimeSettings(allow_private_fetch=settings.TOOLHUB_FETCH_ALLOW_PRIVATE),
        cache=PersonalResultCache(str(session.owner_id)),
        store=PersonalResultStore(session.pk),
    )


def _claimed_token(session: ChatSession) -> dict[str, Any]:
    return {"token": session.disables_token} if hasattr(session, "disables_token") else {}


def session_resolve(
    *,
    session: ChatSession,
    attended: bool = True,
    channel: str | None = None,
    strategy: str | None = None,
    rebuild_plan: bool = False,
    context_window: int | None = None,
) -> ResolvedToolset:
    """What the next turn of ``session`` would send, from the live registry, for a model
    whose window is ``context_window`` (the agent's setting, else the assumed one).

    The session's stored tier plan is kept while its key (the intents, toolset, budget
    and strategy) holds; a changed key, or ``rebuild_plan``, rebuilds it with the
    person's usage counts. The turn stores the returned ``plan`` (docs/accounting.md).
    """
    agent = session.agent
    window = context_window or agent.context_window or DEFAULT_WINDOW
    stored = None if rebuild_plan else TierPlan.from_json(session.tier_plan)

    def resolved_with(plan: TierPlan | None, usage: Mapping[str, int] | None) -> ResolvedToolset:
        return resolve(
            intent=session.tool_intent,
            agent_intent=agent.tool_intent,
            profile_lookup=profile_lookup_for(session.owner_id),
            # A session a turn just claimed carries the disables' token, read by the claim.
            disabled=global_disables(**_claimed_token(session)),
            ctx=session_context(
                session=session, attended=attended, channel=channel, context_window=window
            ),
            strategy=strategy or agent.strategy,
            plan=plan,
            usage=usage,
            context_window_tokens=window,
            budget_tokens=agent.tier_budget,
        )

    if stored is not None:
        resolved = resolved_with(stored, None)
        if resolved.plan.key == stored.key:
            return resolved
    # A (re)built plan: counting usage costs a query, so only here.
    return resolved_with(None, _usage(session))


def session_plan_store(*, session: ChatSession, resolved: ResolvedToolset) -> None:
    """Keep the tier plan ``resolved`` was made with, if it is not the stored one."""
    plan = resolved.plan.to_json()
    if session.tier_plan != plan:
        ChatSession.objects.filter(pk=session.pk).update(tier_plan=plan)
        session.tier_plan = plan


class RewindRefused(Conflict):
    """An edit or a regenerate named a message the conversation no longer holds."""

    code = "stale_message"


@dataclass(frozen=True)
class TurnContext:
    """What a turn takes from its chat, read once at its start."""

    # The chat with the frame's intent merged.
    session: ChatSession
    # What the turn sends, resolved from the live registry; its tier plan is kept.
    resolved: ResolvedToolset
    # What the turn's tools run with.
    ctx: ToolContext
    # The conversation so far, every rewind applied (the turn's own included).
    history: list[tuple[str, dict[str, Any]]]
    # The chat's title as the page shows it (a first message has just given it one).
    title: str


def turn_frame_apply(
    *, session: ChatSession, patch: Any, rewind_to: int | None, last_seq: int
) -> ChatSession:
    """What a turn's frame writes or asks of its chat before anything is resolved: its
    intent ``patch`` merged (``Invalid`` when refused) and its ``rewind_to`` checked
    against the log (``RewindRefused`` unless it goes back to just before one of the
    person's messages still in the conversation, as of ``last_seq``)."""
    if patch is not None:
        session = session_intent_merge(session=session, patch=patch)
    if rewind_to is not None and not user_message_kept(
        session_id=session.pk, seq=rewind_to + 1, last_seq=last_seq
    ):
        raise RewindRefused("That message is not in this chat any more; reload the page.")
    return session


def turn_context(
    *,
    session: ChatSession,
    patch: Any,
    rewind_to: int | None,
    last_seq: int,
    attended: bool,
    channel: str,
    strategy: str,
    window: int,
) -> TurnContext:
    """Everything a turn needs from its chat, in one call inside the turn's transaction:
    the frame applied (``turn_frame_apply``), the toolset resolved for the turn's
    ``strategy`` and ``window`` with its tier plan kept, the tools' context, and the
    history up to ``last_seq``, the chat's last seq before the turn's own events. Raises
    ``UnknownToolsetError`` when the chat names a profile that is gone."""
    session = turn_frame_apply(session=session, patch=patch, rewind_to=rewind_to, last_seq=last_seq)
    resolved = session_resolve(
        session=session,
        attended=attended,
        channel=channel,
        strategy=strategy,
        context_window=window,
    )
    # Kept with the session so the array does not churn (docs/accounting.md).
    session_plan_store(session=session, resolved=resolved)
    return TurnContext(
        session=session,
        resolved=resolved,
        ctx=session_context(
            session=session, attended=attended, channel=channel, context_window=window
        ),
        history=session_history(session_id=session.pk, last_seq=last_seq, rewind_to=rewind_to),
        title=str(session),
    )
