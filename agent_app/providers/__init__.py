"""Model providers by name: ``anthropic``, ``openai`` and the offline ``demo``.

``provider_for`` picks the agent's provider, or the configured default
(``TOOLHUB_PROVIDER``; unset means anthropic with an API key, else demo), and builds it
from settings. The interface is in ``base``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings

from agent_app.providers.base import (
    Provider,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    Stop,
    TextDelta,
    ToolUse,
    Usage,
    collect_text,
)
from agent_app.providers.demo import DemoProvider
from profiles_app.services.connections import DEFAULT_MODELS, connection_get, connection_models

__all__ = [
    "PROVIDERS",
    "Provider",
    "ProviderError",
    "ProviderEvent",
    "ProviderRequest",
    "Stop",
    "TextDelta",
    "ToolUse",
    "Usage",
    "collect_text",
    "provider_for",
    "provider_on_loop",
    "provider_preload",
]


# The SDK modules load on first use: the anthropic package alone takes seconds to import,
# which every process and management command would otherwise pay.
def _anthropic() -> Provider:
    from agent_app.providers.anthropic import AnthropicProvider

    return AnthropicProvider(
        api_key=settings.ANTHROPIC_API_KEY, base_url=settings.ANTHROPIC_BASE_URL
    )


def _openai() -> Provider:
    from agent_app.providers.openai import OpenAIProvider

    return OpenAIProvider(base_url=settings.OPENAI_BASE_URL, api_key=settings.OPENAI_API_KEY)


PROVIDERS: dict[str, Callable[[], Provider]] = {
    "anthropic": _anthropic,
    "openai": _openai,
    "demo": DemoProvider,
}


_built: dict[tuple[Any, ...], Provider] = {}


def _key(name: str) -> tuple[Any, ...]:
    chosen = name or settings.TOOLHUB_PROVIDER
    factory = PROVIDERS.get(chosen)
    if factory is None:
        return _connection_key(chosen)
    return (
        chosen,
        factory,
        settings.ANTHROPIC_BASE_URL,
        settings.ANTHROPIC_API_KEY,
        settings.OPENAI_BASE_URL,
        settings.OPENAI_API_KEY,
    )


def _connection_key(name: str) -> tuple[Any, ...]:
    """A connection staff made in the app (docs/models.md): read from the database on
    every call, so a changed key, URL or model list takes effect at the next turn."""
    connection = connection_get(name)
    if connection is None or connection.from_env:
        raise ProviderError("provider_unknown", f"no provider named {name!r}")
    if not connection.enabled:
        raise ProviderError("provider_disabled", f"the provider {name} is turned off by staff")
    models = connection_models(connection)
    default = models[0].id if models else DEFAULT_MODELS[connection.kind]

    def build() -> Provider:
        provider: Provider
        if connection.kind == "anthropic":
            from agent_app.providers.anthropic import AnthropicProvider

            provider = AnthropicProvider(api_key=connection.api_key, base_url=connection.base_url)
        else:
            from agent_app.providers.openai import OpenAIProvider

            provider = OpenAIProvider(base_url=connection.base_url, api_key=connection.api_key)
        # What a turn asks for when neither the chat nor the agent names a model.
        provider.default_model = default
        return provider

    return (name, build, connection.kind, connection.base_url, connection.api_key, default)


def provider_for(name: str = "") -> Provider:
    """The provider an agent or a chat names, or the configured default; raises
    ProviderError.

    Instances are kept per name and configuration, so their HTTP connections are reused
    from turn to turn (a changed key or URL builds a new one)."""
    key = _key(name)
    provider = _built.get(key)
    if provider is None:
        provider = _built[key] = key[1]()
    return provider


async def provider_on_loop(name: str = "") -> Provider:
    """``provider_for`` for a caller on the server's event loop. Building a provider the
    first time imports its SDK, seconds of work for anthropic's: done on the loop, it
    stalled every socket of the process, long enough for a handshake's Redis connect to
    time out. So a provider not built yet is built on a thread."""
    if (name or settings.TOOLHUB_PROVIDER) in PROVIDERS:
        provider = _built.get(_key(name))
        if provider is not None:
            return provider
        return await asyncio.to_thread(provider_for, name)
    # A connection is read from the database, which the loop may not wait on: on the
    # turns' database threads, which keep their connections (a plain thread's would leak;
    # imported here, as the turns import this package).
    from agent_app.turns.loop import on_db_thread

    return await on_db_thread(provider_for, name=name)


def provider_preload() -> None:
    """Start building the configured default provider on a thread (a server calls this
    as it starts): its first turn then rarely waits for the SDK's import, and the server
    listens at once. One that cannot be built (no key) is left for the turn to report."""

    def build() -> None:
        with contextlib.suppress(ProviderError):
            provider_for()

    threading.Thread(target=build, name="provider-preload", daemon=True).start()
