"""Which context window a turn of an agent works in, and asking the model's server for it.

``window_discover`` runs before a turn claims its session, off the database thread: it asks
the provider at most once a day per server and model (ten minutes after a server that
said nothing), bounded by ``ASK_SECONDS``; a slow, failing or silent server only means the
window stays unknown. ``turn_window`` reads what is known, with no network: the turn and
the inspector compute the same window from it. ``window_learned`` keeps a window an error
named (a request that did not fit), so the next turn is planned for it.

docs/architecture.md, "Context windows".
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from django.conf import settings

from agent_app.providers import ProviderError, provider_for, provider_on_loop
from agent_app.providers.base import Provider
from profiles_app.models import Agent
from profiles_app.services.connections import BUILTIN, model_entry
from sessions_app.models import ChatSession
from toolhub.lib.model_windows import (
    ContextWindow,
    window_fresh,
    window_known,
    window_of,
    window_remember,
)

log = logging.getLogger(__name__)

ASK_SECONDS = 5.0


def turn_choice(*, agent: Agent, session: ChatSession | None = None) -> tuple[str, str]:
    """(provider, model) as named: the chat's pick, else the agent's (either may be empty:
    the configured default provider, the provider's default model)."""
    if session is not None and session.provider:
        return session.provider, session.model
    return agent.provider, agent.model


def turn_model(*, agent: Agent, provider: Provider, session: ChatSession | None = None) -> str:
    """The model a turn asks for: the chat's pick, else the agent's, else the configured
    one (for the environment's providers), else the provider's default."""
    name, model = turn_choice(agent=agent, session=session)
    if model:
        return model
    if (name or settings.TOOLHUB_PROVIDER) in BUILTIN and settings.TOOLHUB_MODEL:
        return str(settings.TOOLHUB_MODEL)
    return provider.default_model


def turn_window(
    *, agent: Agent, provider: Provider, session: ChatSession | None = None
) -> ContextWindow:
    """The window a turn works in (no network): what the model's server reported, else
    what its provider's model list says, bounded by the agent's setting."""
    model = turn_model(agent=agent, provider=provider, session=session)
    known, reported = window_known(origin=provider.origin, model=model)
    if not (known and reported):
        name, _ = turn_choice(agent=agent, session=session)
        entry = model_entry(provider=name, model=model)
        reported = entry.window if entry is not None else None
    return window_of(setting=agent.context_window, reported=reported)


def agent_window(agent: Agent) -> ContextWindow:
    """``turn_window`` for an agent whose provider may not be buildable (an unknown name)."""
    try:
        provider = provider_for(agent.provider)
    except ProviderError:
        return window_of(setting=agent.context_window, reported=None)
    return turn_window(agent=agent, provider=provider)


async def window_discover(*, agent: Agent, session: ChatSession | None = None) -> None:
    """Ask the model's server for its window unless it was asked lately. Never raises."""
    name, _ = turn_choice(agent=agent, session=session)
    try:
        provider = await provider_on_loop(name)
    except ProviderError:
        return
    model = turn_model(agent=agent, provider=provider, session=session)
    if window_fresh(origin=provider.origin, model=model):
        # The steady state: no thread, no cache, no network on the turn's way.
        return
    known, _ = await asyncio.to_thread(window_known, origin=provider.origin, model=model)
    if known:
        return
    try:
        tokens = await asyncio.wait_for(provider.model_window(model), ASK_SECONDS)
    except Exception as exc:
        # A server that cannot say now is asked again after a while, never on every turn.
        # By type only: an error's words may hold the request's headers, a key among them.
        log.info("asking %s for %s's window failed: %s", provider.name, model, type(exc).__name__)
        tokens = None
    await asyncio.to_thread(window_remember, origin=provider.origin, model=model, tokens=tokens)


def window_learned(*, provider: Provider, model: str, error: Any, needed: int) -> int | None:
    """Keep the window an overflow error named; returns it (``None``: none believed).

    ``needed`` is the request's tokens as toolhub counts them, with the answer's room: a
    request that did not fit a window needed more than it (twice as much is allowed, as
    tokenizers differ). A window larger than the one the server reported is not believed
    either: an error may shrink what a server says, never grow it."""
    window = getattr(error, "window", None)
    if window is None or window > 2 * needed:
        return None
    known, reported = window_known(origin=provider.origin, model=model)
    if known and reported is not None and window > reported:
        return None
    window_remember(origin=provider.origin, model=model, tokens=window)
    return int(window)
