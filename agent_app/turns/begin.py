"""A turn's first step, in one transaction: claim the session, take what the turn needs
from its chat in one call (``sessions_app.services.turn_context``: the frame's intent
merged, its rewind checked, the toolset resolved and its plan kept, the tools' context,
the history), freeze what the turn sends, and store ``user_message`` and
``turn_started``.

An intent the merge refuses rolls back the claim with everything else (nothing is
stored); a profile that is gone or an unknown provider stores ``user_message`` and
``turn_failed`` and frees the session. A turn either begins whole or not at all
(docs/architecture.md, "One chat turn, hop by hop", 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agent_app.history import messages_from_events
from agent_app.providers import Provider, ProviderError, provider_for
from agent_app.providers.windows import turn_choice, turn_model, turn_window
from agent_app.turns.claim import claim, release
from agent_app.turns.preview import RequestTools, request_tools, turn_strategy
from profiles_app.services.connections import model_price
from sessions_app.attachments import message_files, message_said, said_file_ids
from sessions_app.eventlog import events_insert
from sessions_app.models import ChatSession, SessionEvent
from sessions_app.services import turn_context, turn_frame_apply
from toolhub.lib.errors import NotFound
from toolhub.lib.model_windows import ContextWindow
from toolhub.lib.prices import Price
from toolhub.lib.titles import title_from
from toolhub.tools import (
    DEFAULT_PRESET,
    ResolvedToolset,
    ToolContext,
    ToolIntent,
    UnknownToolsetError,
)
from toolhub.tools.turn import TurnTools


@dataclass(frozen=True, slots=True)
class PreparedTurn:
    """What a turn sends, resolved and frozen once at its start."""

    session: ChatSession
    resolved: ResolvedToolset
    turn: TurnTools
    # The first request's tools, as the provider sends them (what turn_started says).
    tools: RequestTools
    ctx: ToolContext
    messages: list[dict[str, Any]]
    provider: Provider
    model: str
    system: str
    window: ContextWindow
    title: str
    # What the model's calls cost per million tokens, when its provider's list says.
    price: Price | None = None


@dataclass(frozen=True, slots=True)
class TurnBegun:
    """The stored start of a turn; ``prepared`` is ``None`` when it failed at once."""

    prepared: PreparedTurn | None
    events: list[SessionEvent]
    # The person's message the turn answers, as stored: its words and its files.
    said: dict[str, Any]


def _prepare(
    *,
    session: ChatSession,
    patch: Any,
    attended: bool,
    channel: str,
    history_seq: int,
    rewind_to: int | None = None,
) -> PreparedTurn:
    """Resolve and freeze what the turn sends; ``patch`` is the frame's intent,
    ``history_seq`` the session's last seq before this turn's own events, ``rewind_to``
    the seq this turn's history ends at (an edited or regenerated message)."""
    agent = session.agent
    provider_name, _ = turn_choice(agent=agent, session=session)
    try:
        provider = provider_for(provider_name)
    except ProviderError:
        # No model to ask: the frame is still applied (a refused one rolls back, a good
        # intent is kept), and the turn fails saying why.
        turn_frame_apply(session=session, patch=patch, rewind_to=rewind_to, last_seq=history_seq)
        raise
    window = turn_window(agent=agent, provider=provider, session=session)
    model = turn_model(agent=agent, provider=provider, session=session)
    strategy = turn_strategy(agent=agent, provider=provider)
    context = turn_context(
        session=session,
        patch=patch,
        rewind_to=rewind_to,
        last_seq=history_seq,
        attended=attended,
        channel=channel,
        strategy=strategy,
        window=window.tokens,
    )
    resolved = context.resolved
    turn = TurnTools(resolved, loaded=context.session.loaded_tools or ())
    return PreparedTurn(
        session=context.session,
        resolved=resolved,
        turn=turn,
        tools=request_tools(provider=provider, resolved=resolved, turn=turn),
        ctx=context.ctx,
        messages=_messages(context.history, resolved),
        provider=provider,
        model=model,
        system=agent.system_prompt,
        window=window,
        title=context.title,
        price=model_price(provider=provider_name, model=model),
    )


def _messages(history: Any, resolved: ResolvedToolset) -> list[dict[str, Any]]:
    """The conversation as the provider is sent it, tools it may load marked as such."""
    loadable = frozenset(tool.name for tool in resolved.deferred)
    return messages_from_events(history, native=resolved.strategy == "native", loadable=loadable)


def _started(prep: PreparedTurn) -> dict[str, Any]:
    """``turn_started``: what the turn sends and costs, as the page and the inspector
    show it."""
    resolved = prep.resolved
    return {
        "fingerprint": prep.tools.fingerprint,
        "strategy": resolved.strategy,
        # What is billed as resident: under native, the deferred entries travel flagged
        # and count once loaded (they are in "deferred").
        "resident": list(prep.tools.wire.billed_names(prep.tools.loaded)),
        "deferred": len(resolved.deferred),
        "provider": prep.provider.name,
        "model": prep.model,
        # Who answers and from which profile: what the composer showed when it was sent.
        "agent": prep.session.agent.name,
        "profile": ToolIntent.parse(prep.session.tool_intent).toolset
        or ToolIntent.parse(prep.session.agent.tool_intent).toolset
        or DEFAULT_PRESET,
        "demo": prep.provider.is_demo,
        # The chat's title, which a first message gives it: the page shows it.
        "title": prep.title,
        # The window the meter measures against, and where it came from (a window nobody
        # reported is shown as assumed).
        "context_window": prep.window.tokens,
        "context_source": prep.window.source,
        # The prices the cost is counted at, when known (a connection's own, or the list's).
        "price": None if prep.price is None else [prep.price.input, prep.price.output],
    }


class TurnBusy(Exception):
    """Another live turn holds the session."""


def begin_turn(
    *,
    session: ChatSession,
    turn_id: str,
    control: str,
    text: str,
    intent: Any,
    attended: bool,
    channel: str,
    rewind_to: int | None = None,
    again: bool = False,
    files: Sequence[str] = (),
) -> TurnBegun:
    """Claim the session, merge the frame's intent, resolve and freeze, and store
    ``user_message`` and ``turn_started``: one transaction, so a refused intent or file
    leaves nothing behind (the claim rolls back with it). With ``rewind_to`` (an edit) a
    ``rewind`` event goes first: the conversation goes on from that seq, and the new
    message is a version of the one after it. With ``again`` too (a regenerate) the
    rewind goes to the person's message after ``rewind_to`` and no message is stored:
    the answer is a new version of that message's answer (``sessions_app.branches``).
    ``files`` are marked sent and the message keeps what the model is told of them.

    A turn that failed before its first model call (a deleted profile, an unknown
    provider) begins with no ``prepared``: its events say why, and the session is free.
    """
    with transaction.atomic():
        # The claim reserves the seqs of the turn's first events.
        lead, said = _lead(session, text=text, rewind_to=rewind_to, again=again, files=files)
        named = text or ", ".join(entry["name"] for entry in said.get("files", ()))
        claimed = _claimed(session, turn_id, control, title_from(named), reserve=1 + len(lead))
        first_seq = claimed.last_seq - len(lead)
        prep, failed = _prepared(
            session=claimed,
            patch=intent,
            attended=attended,
            channel=channel,
            history_seq=first_seq - 1,
            rewind_to=rewind_to,
        )
        if prep is not None:
            items = [*lead, ("turn_started", _started(prep))]
        else:
            release(session_id=session.pk, turn_id=turn_id)
            items = [*lead, ("turn_failed", failed)]
        events = events_insert(
            session_id=session.pk, turn=turn_id, first_seq=first_seq, items=items
        )
        return TurnBegun(prepared=prep, events=events, said=said)


def _lead(
    session: ChatSession, *, text: str, rewind_to: int | None, again: bool, files: Sequence[str]
) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    """The events a turn begins with before ``turn_started`` (a rewind, the person's
    message), and the message it answers as stored (its files marked sent)."""
    lead: list[tuple[str, dict[str, Any]]] = []
    if rewind_to is not None:
        lead.append(("rewind", {"to": rewind_to + 1 if again else rewind_to}))
    if again and rewind_to is not None:
        # Asked again: the person's message as stored, with its files, is answered.
        return lead, message_said(session_id=session.pk, seq=rewind_to + 1) or {"text": text}
    said = {"text": text, **message_files(session_id=session.pk, ids=files)}
    if rewind_to is not None and files:
        # An edit carries its message's files with the images the model saw then,
        # whatever the agent did to them in the workspace since.
        earlier = message_said(session_id=session.pk, seq=rewind_to + 1)
        if said_file_ids(earlier) == list(files):
            said.pop("images", None)
            said.update({"images": earlier["images"]} if earlier.get("images") else {})
    return [*lead, ("user_message", said)], said


def _prepared(
    *,
    session: ChatSession,
    patch: Any,
    attended: bool,
    channel: str,
    history_seq: int,
    rewind_to: int | None,
) -> tuple[PreparedTurn | None, dict[str, Any]]:
    """``_prepare``, or why the turn fails before its first model call (the code and
    words of its ``turn_failed``)."""
    try:
        prepared = _prepare(
            session=session,
            patch=patch,
            attended=attended,
            channel=channel,
            history_seq=history_seq,
            rewind_to=rewind_to,
        )
        return prepared, {}
    except UnknownToolsetError as exc:
        return None, {"code": "invalid_toolset", "message": f"{exc.args[0]}; pick another toolset"}
    except ProviderError as exc:
        return None, {"code": exc.code, "message": exc.message}


def _claimed(
    session: ChatSession, turn_id: str, control: str, title: str, *, reserve: int
) -> ChatSession:
    """The session claimed for ``turn_id``; ``TurnBusy`` while another live turn holds
    it, ``NotFound`` once it was deleted."""
    claimed = claim(
        session_id=session.pk, turn_id=turn_id, channel=control, title=title, reserve=reserve
    )
    if claimed is None:
        if ChatSession.objects.filter(pk=session.pk, deleted__isnull=False).exists():
            raise NotFound("This chat was deleted; restore it or pick another one.")
        raise TurnBusy
    return claimed
