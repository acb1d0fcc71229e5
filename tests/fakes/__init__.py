"""Fake LLM servers for tests: real HTTP on loopback, real wire formats, scripted replies.

`FakeAnthropic` speaks the Anthropic Messages API (streaming, tool use, errors and a
simulated prompt cache) to the real `anthropic` SDK; `FakeOpenAI` speaks OpenAI-compatible
Chat Completions. Both are context managers that serve until the block ends, answer each
model call with the next `Reply` from `server.replies` (else `server.responder`), and record
every request as a `Seen` in `server.requests`. The product never imports this package.
"""

from __future__ import annotations

from tests.fakes._http import Reply, Seen
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI

__all__ = ["FakeAnthropic", "FakeOpenAI", "Reply", "Seen"]
