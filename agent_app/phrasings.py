"""The model that writes how people ask for each tool (``toolhub/tools/phrasings.py``).

It is the configured provider (``TOOLHUB_PROVIDER``) and model (``TOOLHUB_MODEL``, else
the provider's default), asked from the phrasings' background thread with an event loop
of its own. With the offline demo provider, or ``TOOLHUB_TOOL_PHRASINGS`` off, nothing is
asked; phrasings written earlier are still read while the store is named.

Invariant: a failure (no key, a timeout, an answer that is not JSON) costs a tool its
phrasing for an hour and never reaches a person or a turn.
"""

from __future__ import annotations

import asyncio

from django.conf import settings

from agent_app.providers import ProviderError, ProviderRequest, collect_text, provider_for
from toolhub.tools import phrasings

ASK_SECONDS = 60.0
MAX_TOKENS = 2_000


def configure_from_settings() -> None:
    store = settings.TOOLHUB_EMBEDDING_CACHE or None
    asks = settings.TOOLHUB_TOOL_PHRASINGS and settings.TOOLHUB_PROVIDER != "demo"
    phrasings.configure(ask=ask if asks else None, store_file=store)


def ask(system: str, text: str) -> str:
    """The configured model's answer to one request for phrasings."""
    provider = provider_for()
    if provider.is_demo:
        raise ProviderError("provider_demo", "the demo provider writes no phrasings")
    request = ProviderRequest(
        model=settings.TOOLHUB_MODEL or provider.default_model,
        system=system,
        catalog="",
        messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
        tools_json="[]",
        max_tokens=MAX_TOKENS,
    )
    return asyncio.run(asyncio.wait_for(collect_text(provider, request), ASK_SECONDS))
