"""Chats as a person keeps them: create, rename, bin and restore, search, what a new chat
starts with, and the intent the composer writes.

- A chat's ``tool_intent`` is validated and normalized by the runtime's ``ToolIntent`` and
  stored as intent only (never an expanded tool list); a name it may not use (a profile it
  cannot see, a meta tool it cannot remove) is refused with the field it came in.
- Every write names the version it read (``versioned_update``): a stale one is refused.
- Another person's chat is "no such session" (``sessions_of``), never a 403.
- A binned chat comes back for ``UNDO_SECONDS``; after that it is purged.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.contrib.admin.models import CHANGE, DELETION
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from profiles_app.models import Agent
from profiles_app.services import (
    agents_visible_to,
    audit_write,
    check_operator,
    clean_tools,
    default_agent,
    new_chat_agent,
    new_chat_toolset,
    refuse_meta_tool,
    toolset_check_exists,
)
from profiles_app.services.connections import provider_offer
from sessions_app.eventlog import events_append
from sessions_app.models import ChatSession, SessionEvent
from toolhub.lib.errors import Conflict, Invalid, NotFound
from toolhub.lib.storable import storable_text
from toolhub.lib.titles import AUTO_TITLE_CHARS, title_from
from toolhub.lib.versioned import versioned_delete, versioned_update
from toolhub.tools import (
    IntentError,
    ToolIntent,
)

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
    model: str = "",
) -> ChatSession:
    """A new chat; ``plan_mode`` ``None`` starts as its agent says, ``model`` ``""`` with
    its agent's."""
    chosen = _clean_agent(user, agent, new_chat=True)
    provider, model = _clean_model(model)
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
        provider=provider,
        model=model,
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
    """Change title, agent, model, intent, plan mode or the tools allowed for this chat if
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
        elif key == "pinned":
            if not isinstance(value, bool):
                raise Invalid("pinned must be true or false", fields={"pinned": ["bool"]})
            changes["pinned"] = value
        elif key == "archived":
            if not isinstance(value, bool):
                raise Invalid("archived must be true or false", fields={"archived": ["bool"]})
            changes["archived"] = timezone.now() if value else None
        elif key == "model":
            changes["provider"], changes["model"] = _clean_model(value)
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


def _clean_model(value: Any) -> tuple[str, str]:
    """A chat's model pick, ``"provider:model"`` (the provider's name holds no colon, a
    model id may: ``llama3:8b``), as ``(provider, model)`` one of the providers offers;
    ``""`` is the agent's."""
    if not isinstance(value, str):
        raise Invalid("a model is picked as provider:model", fields={"model": ["text"]})
    if not value:
        return "", ""
    provider, _, model = value.partition(":")
    offer = provider_offer(provider) if provider else None
    if offer is None:
        said = f"no provider named {provider[:40]!r} is offered"
        raise Invalid(said, fields={"model": ["provider"]})
    if offer.model(model) is None:
        raise Invalid(f"{offer.label} offers no model {model[:100]!r}", fields={"model": ["model"]})
    return provider, model


def session_intent_merge(*, session: ChatSession, patch: Any) -> ChatSession:
    """Merge a chat frame's intent into the stored one (its fields replace those fields).

    The merge starts from the row as stored now, read under its lock, so a concurrent
    REST edit is never overwritten and what is returned is this merge's result.
    """
    # The row stays locked from the read to the end of the caller's transaction: a chat
    # read back here is the one this merge made, never another tab's that committed in
    # between (the composer answers with it, saying what it applied).
    with transaction.atomic():
        current = (
            ChatSession.objects.select_for_update()
            .values("tool_intent", "version")
            .get(pk=session.pk)
        )
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
        if stored != current["tool_intent"]:
            ChatSession.objects.filter(pk=session.pk).update(
                tool_intent=stored, tier_plan=None, version=F("version") + 1
            )
        session.refresh_from_db()
    return session


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
