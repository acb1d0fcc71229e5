"""Model providers by name: ``anthropic``, ``openai`` and the offline ``demo``.

``provider_for`` picks the agent's provider, or the configured default
(``TOOLHUB_PROVIDER``; unset means anthropic with an API key, else demo), and builds it
from settings. The interface is in ``base``.
"""

from __future__ import annotations

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


def provider_for(name: str = "") -> Provider:
    """The provider an agent names, or the configured default; raises ProviderError.

    Instances are kept per name and configuration, so their HTTP connections are reused
    from turn to turn (a changed key or URL builds a new one)."""
    chosen = name or settings.TOOLHUB_PROVIDER
    factory = PROVIDERS.get(chosen)
    if factory is None:
        raise ProviderError("provider_unknown", f"no provider named {chosen!r}")
    key = (
        chosen,
        factory,
        settings.ANTHROPIC_BASE_URL,
        settings.ANTHROPIC_API_KEY,
        settings.OPENAI_BASE_URL,
        settings.OPENAI_API_KEY,
    )
    provider = _built.get(key)
    if provider is None:
        provider = _built[key] = factory()
    return provider
