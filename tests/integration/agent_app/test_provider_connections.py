"""A provider's connections to the model's API are kept across calls on a loop
(agent_app.providers.base.PerLoop): no TCP and TLS handshake per call. The real SDK talks to
the fake Anthropic API over HTTP; each TCP connection it opens shows as a peer address of
its own."""

from __future__ import annotations

import asyncio

from agent_app.providers import ProviderRequest, collect_text
from agent_app.providers.anthropic import AnthropicProvider
from tests.fakes import FakeAnthropic

AT_ONCE = 4


def _request() -> ProviderRequest:
    return ProviderRequest(
        model="claude-test",
        system="",
        catalog="",
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        tools_json="[]",
        max_tokens=16,
    )


def test_model_calls_at_once_and_one_after_another_reuse_the_connections_kept():
    with FakeAnthropic() as server:
        provider = AnthropicProvider(api_key="test-key", base_url=server.url)

        async def calls() -> list[str]:
            answers = []
            for _ in range(2):
                answers += await asyncio.gather(
                    *(collect_text(provider, _request()) for _ in range(AT_ONCE))
                )
            for _ in range(AT_ONCE):
                answers.append(await collect_text(provider, _request()))
            return answers

        answers = asyncio.run(calls())
    assert len(answers) == 3 * AT_ONCE
    assert all(answers)
    assert len(server.requests) == 3 * AT_ONCE
    # Reused: the first round's connections serve every later call (a client made per
    # call, or a connection per request, would show a peer per call).
    assert len({seen.peer for seen in server.requests}) <= AT_ONCE
