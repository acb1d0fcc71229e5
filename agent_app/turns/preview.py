"""What the next provider request of a session carries: one computation for the turn and
the inspector, so the inspector shows what the provider will receive (docs/accounting.md).

Invariants:
- The strategy is the one the turn uses: ``native`` falls back to ``call_tool`` for a
  provider that cannot send deferred tools (``turn_strategy``).
- The array is the first request's: under ``promote`` the tools restored from the
  session's loaded set are in it (``TurnTools``), exactly as the turn will send them.
- Fingerprint and token counts are of the provider's wire text (its wrapper and cache
  marker included, ``WireTools``), the very text its request body embeds; under
  ``native``, deferred entries the model has not loaded are not billed, so not counted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from agent_app.providers import Provider, ProviderError, provider_for
from agent_app.providers.base import WireTools
from agent_app.providers.windows import turn_model, turn_window
from profiles_app.models import Agent
from sessions_app.models import ChatSession
from sessions_app.services import session_plan_store, session_resolve, sessions_of
from toolhub.lib.errors import Conflict, NotFound
from toolhub.lib.model_windows import ContextWindow
from toolhub.tools import ResolvedToolset, UnknownToolsetError
from toolhub.tools.layers import hidden_words
from toolhub.tools.tokens import count_cached
from toolhub.tools.turn import TurnTools


def turn_strategy(*, agent: Agent, provider: Provider) -> str:
    """The agent's strategy as its provider can carry it."""
    if agent.strategy == "native" and not provider.supports_native:
        return "call_tool"
    return agent.strategy


@dataclass(frozen=True)
class RequestTools:
    """A provider request's tools as sent, and what they cost."""

    tools_json: str
    wire: WireTools
    loaded: tuple[str, ...]
    fingerprint: str
    resident_tokens: int
    catalog_tokens: int


def request_tools(
    *, provider: Provider, resolved: ResolvedToolset, turn: TurnTools
) -> RequestTools:
    """The tools of the request ``turn`` would send now."""
    tools_json = turn.tools_json()
    deferred = frozenset(tool.name for tool in resolved.deferred)
    wire = provider.wire_tools(tools_json, deferred if turn.strategy == "native" else frozenset())
    loaded = tuple(turn.loaded)
    return RequestTools(
        tools_json=tools_json,
        wire=wire,
        loaded=loaded,
        fingerprint=hashlib.sha256(wire.text.encode()).hexdigest(),
        resident_tokens=wire.tokens(loaded),
        catalog_tokens=sum(count_cached(piece) for piece in resolved.catalog_pieces),
    )


@dataclass(frozen=True)
class NextTurn:
    provider: Provider
    resolved: ResolvedToolset
    turn: TurnTools
    tools: RequestTools
    # The context window the turn works in: its tier budget and result ceilings follow it.
    window: ContextWindow


def next_turn(
    *,
    session: ChatSession,
    attended: bool = True,
    channel: str | None = None,
    rebuild_plan: bool = False,
) -> NextTurn:
    """Resolve ``session`` as its next turn will, and freeze the turn's contract.
    Raises ``UnknownToolsetError`` (a deleted profile) and ``ProviderError``."""
    provider = provider_for(session.agent.provider)
    window = turn_window(agent=session.agent, provider=provider)
    resolved = session_resolve(
        session=session,
        attended=attended,
        channel=channel,
        strategy=turn_strategy(agent=session.agent, provider=provider),
        rebuild_plan=rebuild_plan,
        context_window=window.tokens,
    )
    turn = TurnTools(resolved, loaded=session.loaded_tools or ())
    tools = request_tools(provider=provider, resolved=resolved, turn=turn)
    return NextTurn(provider=provider, resolved=resolved, turn=turn, tools=tools, window=window)


def session_plan_reset(*, user: Any, session: ChatSession) -> ChatSession:
    """Rebuild the session's tier plan from today's usage counts (the inspector's reset),
    with the strategy its turns use: the next turn's array is decided again, once, and
    kept."""
    session = sessions_of(user).select_related("agent").filter(pk=session.pk).first()
    if session is None:
        raise NotFound("no such session")
    try:
        upcoming = next_turn(session=session, rebuild_plan=True)
    except UnknownToolsetError as exc:
        raise Conflict(f"{exc.args[0]}; pick another toolset for this session") from None
    except ProviderError as exc:
        raise Conflict(exc.message) from None
    session_plan_store(session=session, resolved=upcoming.resolved)
    return session


def session_toolset(*, session: ChatSession, channel: str = "web") -> dict[str, Any]:
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
        "model": turn_model(agent=session.agent, provider=upcoming.provider),
        "agent": session.agent.name,
        "context_window": upcoming.window.to_json(),
        "resident": [
            {"name": name, "tokens": count_cached(piece)}
            for name, piece in zip(billed, wire.billed(tools.loaded)[1:], strict=True)
        ],
        "catalog": [
            {"name": tool.name, "tier": resolved.tiers[tool.name]} for tool in resolved.deferred
        ],
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
