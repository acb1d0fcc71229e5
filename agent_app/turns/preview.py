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

from agent_app.providers import Provider, provider_for
from agent_app.providers.base import WireTools
from agent_app.providers.windows import turn_choice, turn_window
from profiles_app.models import Agent
from sessions_app.models import ChatSession
from sessions_app.services import session_resolve
from toolhub.lib.model_windows import ContextWindow
from toolhub.tools import ResolvedToolset
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
    provider_name, _ = turn_choice(agent=session.agent, session=session)
    provider = provider_for(provider_name)
    window = turn_window(agent=session.agent, provider=provider, session=session)
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
