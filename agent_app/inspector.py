"""The inspector: what the next turn of a chat will send, as its provider will receive it,
and its "Rebuild tiers".

Computed by the very functions the turn uses (``agent_app.turns.preview.next_turn``), so
the fingerprint, the token counts and the window shown are the turn's own
(docs/accounting.md). Reading it stores nothing; only ``inspector_plan_reset`` writes,
the chat's tier plan, decided again from today's usage.
"""

from __future__ import annotations

from typing import Any

from agent_app.providers import ProviderError
from agent_app.providers.windows import turn_model
from agent_app.turns.preview import next_turn
from sessions_app.models import ChatSession
from sessions_app.services import session_plan_store, sessions_of
from toolhub.lib.errors import Conflict, NotFound
from toolhub.tools import UnknownToolsetError
from toolhub.tools.layers import hidden_words
from toolhub.tools.tokens import count_cached


def inspector_plan_reset(*, user: Any, session: ChatSession) -> ChatSession:
    """Rebuild the session's tier plan from today's usage counts (the inspector's reset),
    with the strategy its turns use: the next turn's array is decided again, once, and
    kept."""
    mine = sessions_of(user).select_related("agent").filter(pk=session.pk).first()
    if mine is None:
        raise NotFound("no such session")
    session = mine
    try:
        upcoming = next_turn(session=session, rebuild_plan=True)
    except UnknownToolsetError as exc:
        raise Conflict(f"{exc.args[0]}; pick another toolset for this session") from None
    except ProviderError as exc:
        raise Conflict(exc.message) from None
    session_plan_store(session=session, resolved=upcoming.resolved)
    return session


def inspector_toolset(*, session: ChatSession, channel: str = "web") -> dict[str, Any]:
    """The inspector: the next request's resident tools with their tokens, the catalog,
    both halves' token counts, the fingerprint, and every hidden tool with its layer and
    reason. ``channel`` is the turn previewed: ``web`` (the chat page, a person watching)
    or ``api`` (a REST message: unattended)."""
    try:
        if channel == "api":
            upcoming = next_turn(session=session, attended=False, channel="api")
        else:
            upcoming = next_turn(session=session)
    except UnknownToolsetError as exc:
        # The profile this session names was deleted since: say so, do not guess.
        raise Conflict(f"{exc.args[0]}; pick another toolset for this session") from None
    except ProviderError as exc:
        raise Conflict(exc.message) from None
    resolved, tools = upcoming.resolved, upcoming.tools
    wire = tools.wire
    billed = wire.billed_names(tools.loaded)
    return {
        "fingerprint": tools.fingerprint,
        "strategy": resolved.strategy,
        "provider": upcoming.provider.name,
        "model": turn_model(agent=session.agent, provider=upcoming.provider, session=session),
        "agent": session.agent.name,
        "context_window": upcoming.window.to_json(),
        "resident": [
            {"name": name, "tokens": count_cached(piece)}
            for name, piece in zip(billed, wire.billed(tools.loaded)[1:], strict=True)
        ],
        "catalog": [
            {"name": tool.name, "tier": resolved.tiers[tool.name]} for tool in resolved.deferred
        ],
        # How the catalog tells the model of them: names, sources with counts, or counts
        # (toolhub.tools.catalog), as the tier plan chose within the budget.
        "catalog_form": resolved.plan.catalog.form,
        # What origins (MCP servers) add to the catalog block, counted in its tokens.
        "instructions": [{"origin": origin, "text": note} for origin, note in resolved.notes],
        "tokens": {"resident": tools.resident_tokens, "catalog": tools.catalog_tokens},
        "hidden": [
            {
                "name": hidden.name,
                "layer": hidden.layer,
                "reason": hidden.reason,
                "words": hidden_words(hidden.layer, hidden.reason),
            }
            for hidden in resolved.hidden
        ],
    }
