"""A turn's first step, in one transaction: claim the session, merge the frame's intent,
resolve and freeze what the turn sends, and store ``user_message`` and ``turn_started``.

An intent the merge refuses rolls back the claim with everything else (nothing is
stored); a profile that is gone or an unknown provider stores ``user_message`` and
``turn_failed`` and frees the session. A turn either begins whole or not at all
(docs/architecture.md, "One chat turn, hop by hop", 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agent_app.history import messages_from_events
from agent_app.providers import Provider, ProviderError
from agent_app.providers.windows import turn_model
from agent_app.turns.preview import RequestTools, next_turn
from agent_app.turns.state import claim, release
from sessions_app.eventlog import events_insert, session_history, user_message_kept
from sessions_app.models import ChatSession, SessionEvent
from sessions_app.services import (
    session_context,
    session_intent_merge,
    session_plan_store,
    title_from,
)
from toolhub.lib.errors import Conflict, NotFound
from toolhub.lib.model_windows import ContextWindow
from toolhub.tools import ResolvedToolset, ToolContext, UnknownToolsetError
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


@dataclass(frozen=True, slots=True)
class TurnBegun:
    """The stored start of a turn; ``prepared`` is ``None`` when it failed at once."""

    prepared: PreparedTurn | None
    events: list[SessionEvent]


def _prepare(
    *,
    session: ChatSession,
    attended: bool,
    channel: str,
    history_seq: int,
    rewind_to: int | None = None,
) -> PreparedTurn:
    """Resolve and freeze what the turn sends; ``history_seq`` is the session's last seq
    before this turn's own events, ``rewind_to`` the seq this turn's history ends at (an
    edited or regenerated message)."""
    agent = session.agent
    upcoming = next_turn(session=session, attended=attended, channel=channel)
    resolved = upcoming.resolved
    # Kept with the session so the array does not churn (docs/accounting.md).
    session_plan_store(session=session, resolved=resolved)
    messages = messages_from_events(
        session_history(session_id=session.pk, last_seq=history_seq, rewind_to=rewind_to),
        native=resolved.strategy == "native",
        loadable=frozenset(tool.name for tool in resolved.deferred),
    )
    return PreparedTurn(
        session=session,
        resolved=resolved,
        turn=upcoming.turn,
        tools=upcoming.tools,
        ctx=session_context(
            session=session,
            attended=attended,
            channel=channel,
            context_window=upcoming.window.tokens,
        ),
        messages=messages,
        provider=upcoming.provider,
        model=turn_model(agent=agent, provider=upcoming.provider),
        system=agent.system_prompt,
        window=upcoming.window,
    )


class RewindRefused(Conflict):
    """An edit or a regenerate named a message the conversation no longer holds."""

    code = "stale_message"


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
) -> TurnBegun:
    """Claim the session, merge the frame's intent, resolve and freeze, and store
    ``user_message`` and ``turn_started``: one transaction, so a refused intent leaves
    nothing behind (the claim rolls back with it). With ``rewind_to`` (an edit or a
    regenerate) a ``rewind`` event goes first: the conversation goes on from that seq.

    A turn that failed before its first model call (a deleted profile, an unknown
    provider) begins with no ``prepared``: its events say why, and the session is free.
    """
    title = title_from(text)
    with transaction.atomic():
        # The claim reserves the seqs of the turn's first two events.
        lead: list[tuple[str, dict[str, Any]]] = []
        if rewind_to is not None:
            lead = [("rewind", {"to": rewind_to})]
        claimed = claim(
            session_id=session.pk,
            turn_id=turn_id,
            channel=control,
            title=title,
            reserve=2 + len(lead),
        )
        if claimed is None:
            if ChatSession.objects.filter(pk=session.pk, deleted__isnull=False).exists():
                raise NotFound("This chat was deleted; restore it or pick another one.")
            raise TurnBusy
        first_seq = claimed.last_seq - 1 - len(lead)
        if intent is not None:
            claimed = session_intent_merge(session=claimed, patch=intent)
        if rewind_to is not None:
            _check_rewind(session_id=session.pk, to=rewind_to, before=first_seq)
        asked = ("user_message", {"text": text})
        try:
            prep = _prepare(
                session=claimed,
                attended=attended,
                channel=channel,
                history_seq=first_seq - 1,
                rewind_to=rewind_to,
            )
        except UnknownToolsetError as exc:
            failed = {"code": "invalid_toolset", "message": f"{exc.args[0]}; pick another toolset"}
        except ProviderError as exc:
            failed = {"code": exc.code, "message": exc.message}
        else:
            resolved = prep.resolved
            started = {
                "fingerprint": prep.tools.fingerprint,
                "strategy": resolved.strategy,
                # What is billed as resident: under native, the deferred entries travel
                # flagged and count once loaded (they are in "deferred").
                "resident": list(prep.tools.wire.billed_names(prep.tools.loaded)),
                "deferred": len(resolved.deferred),
                "provider": prep.provider.name,
                "model": prep.model,
                "demo": prep.provider.is_demo,
                # The chat's title, which a first message gives it: the page shows it.
                "title": str(claimed),
                # The window the meter measures against, and where it came from (a
                # window nobody reported is shown as assumed).
                "context_window": prep.window.tokens,
                "context_source": prep.window.source,
            }
            items = [*lead, asked, ("turn_started", started)]
            return TurnBegun(
                prepared=prep,
                events=events_insert(
                    session_id=session.pk, turn=turn_id, first_seq=first_seq, items=items
                ),
            )
        items = [*lead, asked, ("turn_failed", failed)]
        release(session_id=session.pk, turn_id=turn_id)
        return TurnBegun(
            prepared=None,
            events=events_insert(
                session_id=session.pk, turn=turn_id, first_seq=first_seq, items=items
            ),
        )


def _check_rewind(*, session_id: Any, to: int, before: int) -> None:
    """A rewind goes back to just before one of the chat's own messages that is still in
    the conversation (not one an earlier edit already dropped): ``Invalid`` otherwise, and
    the whole beginning rolls back."""
    if not user_message_kept(session_id=session_id, seq=to + 1, last_seq=before - 1):
        raise RewindRefused("That message is not in this chat any more; reload the page.")
