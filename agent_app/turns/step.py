"""One provider round trip of a turn: the request built from the frozen contract, the
stream read until it ends or the person stops it, retried while it failed before saying
anything, and counted.

What stays true:
- text reaches the log coalesced: at most one ``text_delta`` event per
  ``FLUSH_SECONDS``, stored by the delta timer or with the runner's next flush, in the
  order it streamed;
- a stream that is stopped drops the tool calls it had not finished: none was announced,
  so nothing is left unpaired;
- every tool use the model finished is announced (``announce``) before the ``usage``
  event, so a person sees each call start before anything runs;
- a failure that no retry may repeat ends the turn (``turn_failed``) here, in words a
  person reads; a request that no longer fits the model's window says so, and the window
  is kept so the next turn is planned for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agent_app.providers import Provider, ProviderError, ProviderRequest, TextDelta, ToolUse, Usage
from agent_app.providers.windows import window_learned
from agent_app.turns.begin import PreparedTurn
from agent_app.turns.events import TurnEvents
from agent_app.turns.preview import RequestTools, request_tools
from toolhub.lib.markdown import render_markdown
from toolhub.tools import CancelToken
from toolhub.tools.schema import canonical_json
from toolhub.tools.tokens import count_cached
from toolhub.tools.turn import CallTarget, TurnTools

FLUSH_SECONDS = 0.05
MAX_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class AnnouncedCall:
    """A tool use the model finished, as its ``tool_call`` event said it (``data``), and
    what the frozen contract made of it (``target``: the real tool, or an error)."""

    data: dict[str, Any]
    target: CallTarget


@dataclass
class StepOutcome:
    """What one provider call said: its text, the tool uses it finished (and how they
    were announced), its stored record, and whether the person stopped it."""

    text: str = ""
    uses: list[ToolUse] = field(default_factory=list)
    calls: list[AnnouncedCall] = field(default_factory=list)
    record: dict[str, Any] | None = None
    usage: Usage = field(default_factory=Usage)
    cancelled: bool = False
    latency_ms: int = 0


class ProviderSteps:
    """A turn's provider calls, one at a time, with the text coalescing they share."""

    def __init__(self, *, events: TurnEvents, cancel: CancelToken, prep: PreparedTurn) -> None:
        self._events = events
        self._cancel = cancel
        self._prep = prep
        self._text_buffer = ""
        self._text_timer: asyncio.Future[None] | None = None

    async def step(
        self,
        turn: TurnTools,
        messages: list[dict[str, Any]],
        announce: Callable[[ToolUse], AnnouncedCall],
    ) -> StepOutcome | None:
        """One provider round trip, stored; ``None`` when it failed (the turn is over)."""
        prep = self._prep
        tools = self._tools(turn)
        request = ProviderRequest(
            model=prep.model,
            system=prep.system,
            catalog=prep.resolved.catalog,
            messages=messages,
            tools_json=tools.tools_json,
            deferred=tools.wire.deferred,
            max_tokens=MAX_TOKENS,
        )
        # toolhub's own count of the request, made while the model is being asked (it
        # needs only the request; after the stream it would hold up the turn's last write).
        counted = asyncio.ensure_future(_request_tokens(request))
        try:
            outcome = await self._with_retries(request)
        except BaseException:
            counted.cancel()
            raise
        if outcome is None:
            counted.cancel()
            return None
        if outcome.text:
            self._events.emit(
                "assistant_message", {"text": outcome.text, "html": render_markdown(outcome.text)}
            )
        usage = _usage_json(outcome.usage, tools)
        outcome.calls = [announce(use) for use in outcome.uses]
        self._events.emit("usage", usage)
        outcome.record = _call_record(prep, usage, await counted, outcome.latency_ms)
        return outcome

    def _tools(self, turn: TurnTools) -> RequestTools:
        """The first request's tools while the contract has not moved (most turns), else
        this request's (a promoted tool joined)."""
        prep = self._prep
        if turn.tools_json() == prep.tools.tools_json and turn.loaded == list(prep.tools.loaded):
            return prep.tools
        return request_tools(provider=prep.provider, resolved=prep.resolved, turn=turn)

    async def _with_retries(self, request: ProviderRequest) -> StepOutcome | None:
        """One provider call, retried with backoff while it failed before producing
        anything; ``None`` after a terminal failure (``turn_failed`` is then pending)."""
        provider = self._prep.provider
        attempts = settings.TOOLHUB_PROVIDER_RETRIES + 1
        for attempt in range(attempts):
            outcome = StepOutcome()
            started = time.monotonic()
            try:
                await self._stream(provider, request, outcome)
            except ProviderError as exc:
                produced = outcome.text or outcome.uses
                if exc.retryable and not produced and attempt + 1 < attempts:
                    if await self._sleep_or_cancel(settings.TOOLHUB_PROVIDER_BACKOFF * 2**attempt):
                        outcome.cancelled = True
                        return outcome
                    continue
                await self._events.finish_failed(*await _failure_words(provider, request, exc))
                return None
            outcome.latency_ms = int((time.monotonic() - started) * 1000)
            return outcome
        raise AssertionError("unreachable")

    async def _stream(
        self, provider: Provider, request: ProviderRequest, outcome: StepOutcome
    ) -> None:
        async def consume() -> None:
            async for event in provider.stream(request):
                if isinstance(event, TextDelta):
                    outcome.text += event.text
                    self._text_buffer += event.text
                    if self._text_timer is None:
                        self._text_timer = asyncio.ensure_future(self._text_later())
                elif isinstance(event, ToolUse):
                    outcome.uses.append(event)
                elif isinstance(event, Usage):
                    outcome.usage = event

        work = asyncio.ensure_future(consume())
        stop = asyncio.ensure_future(self._cancel.wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, ProviderError):
                    await work
                # Tool calls the stream had not finished are dropped with it: none was
                # announced, so nothing is left unpaired.
                outcome.uses.clear()
                outcome.cancelled = True
            self._take_text()
        if not outcome.cancelled:
            work.result()

    async def _text_later(self) -> None:
        """Coalesced deltas get a seq at most ``FLUSH_SECONDS`` after the first arrived."""
        await asyncio.sleep(FLUSH_SECONDS)
        # From here on this task is not cancelled: it stores what it took.
        self._text_timer = None
        self._take_text()
        await self._events.flush(text_only=True)

    def _take_text(self) -> None:
        if self._text_timer is not None:
            self._text_timer.cancel()
            self._text_timer = None
        if self._text_buffer:
            self._events.emit("text_delta", {"text": self._text_buffer})
            self._text_buffer = ""

    async def _sleep_or_cancel(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._cancel.wait(), timeout=seconds)
        return self._cancel.cancelled


def _usage_json(usage: Usage, tools: RequestTools) -> dict[str, Any]:
    """The ``usage`` event: what the provider counted, and what the tools array cost."""
    data: dict[str, Any] = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "resident_tokens": tools.resident_tokens,
        "catalog_tokens": tools.catalog_tokens,
        "fingerprint": tools.fingerprint,
    }
    if usage.estimated:
        # The provider sent no usage: toolhub counted the request and the answer.
        data["estimated"] = True
    return data


async def _request_tokens(request: ProviderRequest) -> int:
    """toolhub's count of a request's system prompt and messages (the tools array and the
    catalog are counted when resolved)."""
    return count_cached(request.system) + sum(
        count_cached(canonical_json(message)) for message in request.messages
    )


def _call_record(
    prep: PreparedTurn, usage: dict[str, Any], counted: int, latency_ms: int
) -> dict[str, Any]:
    """The provider call as stored (a ``ProviderCall`` row), with toolhub's own count of
    the request beside the provider's (``counted``: its system prompt and messages)."""
    estimate = usage["resident_tokens"] + usage["catalog_tokens"] + counted
    return {
        "provider": prep.provider.name,
        "model": prep.model[:100],
        **{key: value for key, value in usage.items() if key != "estimated"},
        "estimated_input_tokens": estimate,
        "usage_estimated": bool(usage.get("estimated")),
        "latency_ms": latency_ms,
        "price_input": None if prep.price is None else prep.price.input,
        "price_output": None if prep.price is None else prep.price.output,
    }


async def _failure_words(
    provider: Provider, request: ProviderRequest, exc: ProviderError
) -> tuple[str, str]:
    """A failed call's code and words; a request that no longer fits the model's window
    says so (and the window is kept, so the next turn is planned for it)."""
    if exc.window is None:
        return exc.code, exc.message
    needed = request.max_tokens + sum(
        count_cached(text)
        for text in (
            request.system,
            request.catalog,
            request.tools_json,
            *map(canonical_json, request.messages),
        )
    )
    window = await asyncio.to_thread(
        window_learned, provider=provider, model=request.model, error=exc, needed=needed
    )
    if window is None:
        return exc.code, exc.message
    return "context_full", (
        f"This conversation no longer fits the model's window of {window:,} tokens. Start "
        "a new chat, or edit an earlier message to leave out what is not needed. "
        f"The server said: {exc.message}"
    )[:1000]
