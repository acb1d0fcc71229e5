"""Chat sessions: their writes, their tool context and resolution, the composer's hints.

A session's ``tool_intent`` is validated and normalized by the runtime's ``ToolIntent``
and stored as intent only; every write names the version it read. The event log is
``sessions_app.eventlog``.
"""

from __future__ import annotations

import copy
import os
import uuid
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.admin.models import CHANGE, DELETION
from django.core.cache import cache
from django.db import transaction
from django.db.models import Count, F, QuerySet
from django.utils import timezone

from profiles_app.models import Agent
from profiles_app.services import (
    agents_visible_to,
    audit_write,
    check_operator,
    clean_tools,
    default_agent,
    global_disables,
    new_chat_agent,
    new_chat_toolset,
    operator_policies,
    profile_lookup_for,
    refuse_meta_tool,
    toolset_check_exists,
)
from sessions_app.eventlog import event_append, events_append
from sessions_app.models import ChatSession, FullResult, ProviderCall, SessionEvent
from toolhub.lib.chat_services import chat_services
from toolhub.lib.errors import Conflict, Invalid, NotFound
from toolhub.lib.model_windows import DEFAULT_WINDOW
from toolhub.lib.storable import storable_text
from toolhub.lib.versioned import versioned_delete, versioned_update
from toolhub.tools import (
    IntentError,
    ProfileSpec,
    ResolvedToolset,
    RuntimeSettings,
    TierPlan,
    Tool,
    ToolContext,
    ToolIntent,
    resolve,
)
from toolhub.tools.approval import Decision, decide
from toolhub.tools.intent import MAX_NAMES

TITLE_CHARS = 200


def sessions_of(user: Any) -> QuerySet[ChatSession]:
    """A person's chats (not the ones in the bin: ``session_trash``)."""
    return ChatSession.objects.filter(owner=user, deleted__isnull=True)


# How long a chat deleted from the page can be brought back.
UNDO_SECONDS = 600


def session_trash(*, user: Any, session: ChatSession, operator: Any = None) -> None:
    """Delete a chat from the page, restorable by ``session_restore`` for
    ``UNDO_SECONDS``; the person's chats binned longer ago than that go for good now.
    A chat with a running turn is refused (stop it first). ``operator``: a staff member
    deleting it in the admin (audited)."""
    check_operator(operator)
    now = timezone.now()
    with transaction.atomic():
        trashed = sessions_of(user).filter(pk=session.pk, turn_id="").update(deleted=now)
        if not trashed:
            if sessions_of(user).filter(pk=session.pk).exists():
                raise Conflict("This chat is still answering; stop it before deleting it.")
            raise NotFound("no such session")
        audit_write(
            user=user,
            operator=operator,
            shared=False,
            obj=session,
            flag=DELETION,
            message=f"deleted chat {session.pk} (its owner can restore it for a while)",
        )
    sessions_purge_binned(now=now)


def sessions_purge_binned(*, now: Any = None) -> int:
    """Delete for good the chats binned longer than ``UNDO_SECONDS`` ago (every server's
    reaper calls this now and then); how many went."""
    cutoff = (now or timezone.now()) - timedelta(seconds=UNDO_SECONDS)
    deleted, _ = ChatSession.objects.filter(deleted__lt=cutoff).delete()
    return deleted


def session_restore(*, user: Any, session_id: Any) -> ChatSession:
    """Bring back a chat ``session_trash`` binned; ``NotFound`` once it is gone."""
    restored = ChatSession.objects.filter(owner=user, pk=session_id, deleted__isnull=False).update(
        deleted=None
    )
    if not restored:
        raise NotFound("That chat can no longer be restored.")
    return ChatSession.objects.get(pk=session_id)


def session_new_or_empty(*, user: Any) -> ChatSession:
    """The chat page's "New chat": the person's newest chat that has nothing in it and was
    never changed (``version`` 1: no plan mode, intent or title set), so empty chats do
    not pile up; or a new one."""
    empty = sessions_of(user).filter(last_seq=0, title="", version=1).order_by("-created").first()
    if empty is None:
        return session_create(user=user)
    # Made before the person last changed what new chats start with: it starts as a new
    # chat would now (nobody changed it, so nothing of theirs is lost).
    agent = new_chat_agent(user=user)
    intent = _clean_intent(_new_chat_intent(None, user, agent), user)
    if (empty.agent_id, empty.tool_intent, empty.plan_mode) != (agent.pk, intent, agent.plan_mode):
        sessions_of(user).filter(pk=empty.pk, version=1, last_seq=0).update(
            agent=agent, tool_intent=intent, plan_mode=agent.plan_mode, tier_plan=None
        )
        empty.refresh_from_db()
    return empty


SEARCH_MAX_CHARS = 200
SEARCH_RESULTS = 20


def sessions_search(*, user: Any, query: str) -> list[dict[str, Any]]:
    """A person's chats whose title or messages contain ``query`` (any case), newest
    first: each with the first matching message's seq and a snippet around the match."""
    query = " ".join(query.split())[:SEARCH_MAX_CHARS]
    if not query:
        return []
    chats = sessions_of(user)
    by_title = {chat.pk: chat for chat in chats.filter(title__icontains=query)[:SEARCH_RESULTS]}
    hits = (
        SessionEvent.objects.filter(
            session__in=chats,
            kind__in=("user_message", "assistant_message"),
            data__text__icontains=query,
        )
        .order_by("-session__updated", "seq")
        .values_list("session_id", "seq", "data")[: SEARCH_RESULTS * 5]
    )
    first_hit: dict[Any, tuple[int, str]] = {}
    for session_id, seq, data in hits:
        if session_id not in first_hit:
            first_hit[session_id] = (seq, str(data.get("text", "")))
        if len(first_hit) >= SEARCH_RESULTS:
            break
    missing = [pk for pk in first_hit if pk not in by_title]
    titled = {**by_title, **{chat.pk: chat for chat in chats.filter(pk__in=missing)}}
    ordered = sorted(titled.values(), key=lambda chat: chat.updated, reverse=True)
    results = []
    for chat in ordered[:SEARCH_RESULTS]:
        seq, text = first_hit.get(chat.pk, (0, ""))
        results.append({"session": chat, "seq": seq, "snippet": _snippet(text, query)})
    return results


def _snippet(text: str, query: str, around: int = 60) -> str:
    if not text:
        return ""
    line = " ".join(text.split())
    at = line.lower().find(query.lower())
    if at < 0:
        return line[: around * 2]
    start = max(0, at - around)
    end = min(len(line), at + len(query) + around)
    return ("…" if start else "") + line[start:end] + ("…" if end < len(line) else "")


def session_get_for_user(*, user: Any, session_id: Any) -> ChatSession:
    session = sessions_of(user).select_related("agent").filter(pk=session_id).first()
    if session is None:
        raise NotFound("no such session")
    return session


def _clean_intent(intent: Any, user: Any, field: str = "intent") -> dict[str, Any]:
    try:
        parsed = ToolIntent.parse(intent)
    except IntentError as exc:
        raise Invalid(str(exc), fields={field: [str(exc)]}) from None
    # Removing a meta tool would have no effect (layers.py): refused, as profiles do.
    for name in parsed.disabled:
        refuse_meta_tool(name, field, "removed from a chat")
    toolset_check_exists(user=user, name=parsed.toolset, field=field)
    return parsed.to_json()


def _clean_agent(user: Any, agent: Any, *, new_chat: bool = False) -> Agent:
    """The agent named, one the person may use; ``None``: a new chat's is the person's
    choice for new chats, an existing chat's is ``default``."""
    if agent is None:
        return new_chat_agent(user=user) if new_chat else default_agent()
    found = agents_visible_to(user).filter(pk=agent).first() if isinstance(agent, int) else None
    if found is None:
        raise Invalid("no such agent", fields={"agent": ["not found"]})
    return found


def _clean_title(title: Any) -> str:
    if not isinstance(title, str):
        raise Invalid("title must be text", fields={"title": ["not text"]})
    return storable_text(" ".join(title.split())[:TITLE_CHARS])


def session_create(
    *,
    user: Any,
    title: str = "",
    agent: int | None = None,
    intent: Any = None,
    plan_mode: bool | None = None,
    allowed_tools: Any = (),
) -> ChatSession:
    """A new chat; ``plan_mode`` ``None`` starts as its agent says."""
    chosen = _clean_agent(user, agent, new_chat=True)
    if plan_mode is None:
        plan_mode = chosen.plan_mode
    if not isinstance(plan_mode, bool):
        raise Invalid("plan_mode must be true or false", fields={"plan_mode": ["bool"]})
    return ChatSession.objects.create(
        owner=user,
        title=_clean_title(title),
        agent=chosen,
        tool_intent=_clean_intent(_new_chat_intent(intent, user, chosen), user),
        plan_mode=plan_mode,
        allowed_tools=clean_tools(list(allowed_tools) if allowed_tools else [], "allowed_tools"),
    )


def _new_chat_intent(intent: Any, user: Any, agent: Agent) -> Any:
    """A new chat starts with the person's chosen toolset (``new_chat_toolset``) unless the
    request names a toolset (``null`` included: "follow the agent") or the agent has one."""
    if intent is not None and not isinstance(intent, Mapping):
        # A list of picked tools or true/false says all the chat needs (anything else is
        # refused by _clean_intent).
        return intent
    if "toolset" in (intent or {}) or (agent.tool_intent or {}).get("toolset"):
        return intent
    preferred = new_chat_toolset(user=user)
    if not preferred:
        return intent
    try:
        toolset_check_exists(user=user, name=preferred, field="intent")
    except Invalid:
        # A preset that left the code since: the chat follows the agent instead.
        return intent
    return {**(intent or {}), "toolset": preferred}


def session_update(
    *, user: Any, session: ChatSession, version: int, operator: Any = None, **fields: Any
) -> ChatSession:
    """Change title, agent, intent, plan mode or the tools allowed for this chat if
    ``version`` is current; ``operator``: a staff member changing it in the admin, for
    ``user``, its owner (audited)."""
    check_operator(operator)
    changes: dict[str, Any] = {}
    for key, value in fields.items():
        if key == "title":
            changes["title"] = _clean_title(value)
        elif key == "agent":
            changes["agent"] = _clean_agent(user, value)
        elif key == "intent":
            changes["tool_intent"] = _clean_intent(value, user)
            # A changed intent rebuilds the tier plan on the next turn (docs/accounting.md).
            changes["tier_plan"] = None
        elif key == "plan_mode":
            if not isinstance(value, bool):
                raise Invalid("plan_mode must be true or false", fields={"plan_mode": ["bool"]})
            changes["plan_mode"] = value
        elif key == "allowed_tools":
            changes["allowed_tools"] = clean_tools(value, "allowed_tools")
        else:
            raise Invalid(f"unknown field {key}", fields={key: ["unknown"]})
    with transaction.atomic():
        versioned_update(
            sessions_of(user), pk=session.pk, version=version, what="session", **changes
        )
        session.refresh_from_db()
        audit_write(
            user=user,
            operator=operator,
            shared=False,
            obj=session,
            flag=CHANGE,
            message=f"changed {', '.join(sorted(fields)) or 'nothing'}",
        )
    return session


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


def session_call_policy(
    *, session_id: Any, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext
) -> Decision:
    """Whether this call of ``tool`` runs, asks or is refused, from the policies as stored
    *now*: the operator's, the chat's profile's and the chat's own allowances (hard line 5;
    a global disable is a veto, checked before)."""
    row = (
        ChatSession.objects.select_related("agent")
        .only("owner_id", "tool_intent", "allowed_tools", "agent__tool_intent")
        .get(pk=session_id)
    )
    profile = chat_profile(session=row)
    return decide(
        tool,
        arguments,
        ctx,
        operator=operator_policies(),
        profile=dict(profile.approvals) if profile is not None else {},
        profile_name=profile.name if profile is not None else "",
        chat_allowed=frozenset(row.allowed_tools or ()),
    )


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


def session_intent_merge(*, session: ChatSession, patch: Any) -> ChatSession:
    """Merge a chat frame's intent into the stored one (its fields replace those fields).

    The merge starts from the row as stored now and is written only if nobody wrote in
    between (``WHERE version = read``); otherwise it is redone on the newer intent, so a
    concurrent REST edit is never overwritten.
    """
    for _ in range(5):
        current = ChatSession.objects.values("tool_intent", "version").get(pk=session.pk)
        try:
            stored_intent = ToolIntent.parse(current["tool_intent"])
            merged = stored_intent.merge(patch)
        except IntentError as exc:
            raise Invalid(str(exc), fields={"intent": [str(exc)]}) from None
        # A removal of a meta tool the frame adds is refused; an old stored one is ignored
        # (layers.py), so it never blocks another change.
        for name in set(merged.disabled) - set(stored_intent.disabled):
            refuse_meta_tool(name, "intent", "removed from a chat")
        toolset_check_exists(user=session.owner, name=merged.toolset)
        stored = merged.to_json()
        if stored == current["tool_intent"]:
            break
        written = ChatSession.objects.filter(pk=session.pk, version=current["version"]).update(
            tool_intent=stored, tier_plan=None, version=F("version") + 1
        )
        if written:
            break
    else:
        raise Conflict("the session keeps changing; try again")
    session.refresh_from_db()
    return session


AUTO_TITLE_CHARS = 60


def title_from(text: str) -> str:
    """A new chat's title from its first message: one line, cut at a word with an
    ellipsis when longer than ``AUTO_TITLE_CHARS``."""
    line = " ".join(text.split())
    if len(line) <= AUTO_TITLE_CHARS:
        return line
    cut = line[: AUTO_TITLE_CHARS - 1]
    if " " in cut[AUTO_TITLE_CHARS // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:-") + "…"


def session_title_from_model(
    *, session_id: Any, turn: str, question: str, title: str
) -> list[SessionEvent]:
    """Keep a model-written title if the chat still has the one its first message gave
    it (a rename wins), with a ``title`` event for the pages; nothing otherwise."""
    title = " ".join(title.strip().strip("\"'*#`").split())[:AUTO_TITLE_CHARS].rstrip(".")
    if not title:
        return []
    with transaction.atomic():
        kept = ChatSession.objects.filter(pk=session_id, title=title_from(question)).update(
            title=storable_text(title)
        )
        if not kept:
            return []
        stored = events_append(
            session_id=session_id, turn=turn, items=[("title", {"title": title})]
        )
    return stored or []


def session_with_draft(*, session: ChatSession, draft: Any) -> ChatSession:
    """The session as its next turn would see it if the composer's intent (``draft``, a
    chat frame's ``intent``) were sent now: an unsaved copy, for the inspector to preview
    before any turn. ``Invalid`` for an intent a turn would refuse."""
    try:
        merged = ToolIntent.parse(session.tool_intent).merge(draft)
    except IntentError as exc:
        raise Invalid(str(exc), fields={"intent": [str(exc)]}) from None
    toolset_check_exists(user=session.owner, name=merged.toolset)
    stored = merged.to_json()
    if stored == session.tool_intent:
        return session
    preview: ChatSession = copy.copy(session)
    # A changed intent drops the tier plan, as the turn's merge does.
    preview.tool_intent, preview.tier_plan = stored, None
    return preview


def session_delete(*, user: Any, session: ChatSession, version: int) -> None:
    versioned_delete(sessions_of(user), pk=session.pk, version=version, what="session")


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


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _workspace(session: ChatSession) -> Path:
    return Path(settings.TOOLHUB_WORKSPACE_ROOT) / str(session.pk)


def _usage(session: ChatSession) -> dict[str, int]:
    rows = (
        SessionEvent.objects.filter(session__owner_id=session.owner_id, kind="tool_call")
        .values("data__name")
        .annotate(calls=Count("id"))
    )
    return {row["data__name"]: row["calls"] for row in rows if isinstance(row["data__name"], str)}


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


def call_result_get(*, session: ChatSession, call_seq: int) -> dict[str, Any]:
    """The stored ``tool_result`` of the ``tool_call`` at ``call_seq`` in ``session``:
    the first result with its call id after it (providers reuse call ids across steps,
    so the id alone does not name one call); ``NotFound`` otherwise."""
    call = (
        session.events.filter(kind="tool_call", seq=call_seq).values_list("data", flat=True).first()
    )
    if not isinstance(call, dict):
        raise NotFound("no such call")
    data = (
        session.events.filter(kind="tool_result", seq__gt=call_seq, data__call_id=call["call_id"])
        .order_by("seq")
        .values_list("data", flat=True)
        .first()
    )
    if not isinstance(data, dict):
        raise NotFound("that call has no result yet")
    return {"name": str(data.get("name", "")), "content": str(data.get("content", ""))}


def full_result_get(*, user: Any, session_id: Any, result_id: Any) -> FullResult:
    """A stored full result of one of ``user``'s sessions; ``NotFound`` otherwise."""
    found = FullResult.objects.filter(
        pk=result_id, session_id=session_id, session__owner=user, session__deleted__isnull=True
    ).first()
    if found is None:
        raise NotFound("no such result")
    return found


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
        workspace=_workspace(session),
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


INSPECTOR_CALLS = 5


def session_recent_calls(*, session: ChatSession) -> list[dict[str, Any]]:
    """The last provider calls of a session, newest first, with the calibration ratio
    (input tokens the provider counted over our own estimate of the same request)."""
    calls = ProviderCall.objects.filter(session=session).order_by("-created", "-id")[
        :INSPECTOR_CALLS
    ]
    return [
        {
            "created": call.created,
            "model": call.model,
            "input": call.input_tokens,
            # No usage from the provider: toolhub's own count of the request.
            "estimated": call.usage_estimated,
            "cache_read": call.cache_read_input_tokens,
            "cache_write": call.cache_creation_input_tokens,
            "ratio": (
                round(call.input_tokens / call.estimated_input_tokens, 2)
                if call.estimated_input_tokens and not call.usage_estimated
                else None
            ),
        }
        for call in calls
    ]
