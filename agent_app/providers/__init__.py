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
        raise ProviderError("provider_unknown", f"no provider named {chosen!r}")
    return (
        chosen,
        factory,
        settings.ANTHROPIC_BASE_URL,
        settings.ANTHROPIC_API_KEY,
        settings.OPENAI_BASE_URL,
        settings.OPENAI_API_KEY,
    )


def provider_for(name: str = "") -> Provider:
    """The provider an agent names, or the configured default; raises ProviderError.

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
    provider = _built.get(_key(name))
    if provider is not None:
        return provider
    return await asyncio.to_thread(provider_for, name)


def provider_preload() -> None:
    """Start building the configured default provider on a thread (a server calls this
    as it starts): its first turn then rarely waits for the SDK's import, and the server
    listens at once. One that cannot be built (no key) is left for the turn to report."""

    def build() -> None:
        with contextlib.suppress(ProviderError):
            provider_for()

    threading.Thread(target=build, name="provider-preload", daemon=True).start()
