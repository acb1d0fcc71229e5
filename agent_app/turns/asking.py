"""What an MCP server asks mid-call, put to the person in the chat whose call caused it
(toolhub/tools/mcp/asks.py routes it here): a form to fill in (elicitation) and a
completion from the chat's model (sampling, where the operator allows it).

What stays true:
- both are asked only in an attended turn, on the calling tool's card, one at a time per
  turn; nobody answering in ``TOOLHUB_APPROVAL_TIMEOUT`` (or the turn stopping) is a
  dismissal for a form and a refusal for sampling;
- the form and the person's answer are stored as events (``elicitation_request``,
  ``elicitation_answered``), so every tab and every reload shows the same card; the
  answer was checked against the form before it got here (``turn_elicit``);
- nothing reaches the model without the person's yes: a sampling request is shown whole
  (system prompt, messages, token limit) with Allow and Deny, and what the model answers
  is stored on the card (``sampling_result``) and counted like any other provider call
  (a ``usage`` event and its ``ProviderCall``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agent_app.providers import Provider, ProviderError, ProviderRequest, Stop, TextDelta, Usage
from agent_app.turns.claim import Waiting
from agent_app.turns.events import TurnEvents
from agent_app.turns.waits import PersonWaits
from toolhub.tools import CancelToken
from toolhub.tools.mcp.asks import AskRefused, ElicitAnswer, ElicitForm, Sampled, SamplingAsk
from toolhub.tools.schema import canonical_json
from toolhub.tools.tokens import count_cached


class McpAsks:
    """A turn's answers to MCP servers (the runtime's ``Elicitor`` and ``Sampler``), for
    the call the turn runs now (``current_call``)."""

    def __init__(
        self,
        *,
        events: TurnEvents,
        waits: PersonWaits,
        cancel: CancelToken,
        provider: Provider,
        model: str,
        current_call: Callable[[], str],
    ) -> None:
        self._events = events
        self._waits = waits
        self._cancel = cancel
        self._provider = provider
        self._model = model
        self._current_call = current_call
        # One form or sampling request on the cards at a time: a person answers in order.
        self._asking = asyncio.Lock()

    async def elicit(self, form: ElicitForm, *, withdrawn: CancelToken) -> ElicitAnswer:
        async with self._asking:
            call_id = self._current_call()
            if withdrawn.cancelled:
                return ElicitAnswer("cancel")
            shown = form.to_json()
            self._events.emit("elicitation_request", {"call_id": call_id, **shown})
            waiting = Waiting(
                kind="elicitation",
                call_id=call_id,
                server=form.server,
                mode=shown["mode"],
                fields=shown["fields"],
            )
            answer = await self._waits.wait(waiting, withdrawn=withdrawn)
        if answer is None:
            return ElicitAnswer("cancel")
        return ElicitAnswer(answer["action"], answer.get("content"))

    async def sample(self, ask: SamplingAsk, *, withdrawn: CancelToken) -> Sampled:
        async with self._asking:
            call_id = self._current_call()
            if withdrawn.cancelled:
                raise AskRefused("the call it belongs to has ended")
            self._events.emit(
                "sampling_request", {"call_id": call_id, "model": self._model, **ask.to_json()}
            )
            waiting = Waiting(kind="sampling", call_id=call_id, server=ask.server)
            answer = await self._waits.wait(waiting, withdrawn=withdrawn)
        if answer is None:
            raise AskRefused("the turn stopped" if self._cancel.cancelled else "no answer in time")
        if not answer[0]:
            raise AskRefused("the person denied it")
        request = ProviderRequest(
            model=self._model,
            system=ask.system,
            catalog="",
            messages=[
                {"role": role, "content": [{"type": "text", "text": text}]}
                for role, text in ask.messages
            ],
            tools_json="[]",
            max_tokens=ask.max_tokens,
        )
        started = time.monotonic()
        text, usage, stop = await self._completion(request)
        self._events.emit(
            "sampling_result", {"call_id": call_id, "text": text, "model": self._model}
        )
        self._events.emit("usage", {**_usage_json(usage), "sampling": True})
        await self._events.flush(call=self._sampling_record(request, usage, started))
        return Sampled(text=text, model=self._model, stopped_at_limit=stop == "max_tokens")

    async def _completion(self, request: ProviderRequest) -> tuple[str, Usage, str]:
        """The model's answer to a sampling request: its text, usage and stop reason."""
        text, usage, stop = "", Usage(), ""
        try:
            async for event in self._provider.stream(request):
                if isinstance(event, TextDelta):
                    text += event.text
                elif isinstance(event, Usage):
                    usage = event
                elif isinstance(event, Stop):
                    stop = event.reason
        except ProviderError as exc:
            raise AskRefused(f"the model failed: {exc.message}") from None
        return text, usage, stop

    def _sampling_record(
        self, request: ProviderRequest, usage: Usage, started: float
    ) -> dict[str, Any]:
        return {
            "provider": self._provider.name,
            "model": self._model[:100],
            **_usage_json(usage),
            "estimated_input_tokens": count_cached(request.system)
            + sum(count_cached(canonical_json(message)) for message in request.messages),
            "latency_ms": int((time.monotonic() - started) * 1000),
        }


def _usage_json(usage: Usage) -> dict[str, Any]:
    """A sampling call's usage, as a ``usage`` event and its provider call say it: no
    tools array went with it."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "resident_tokens": 0,
        "catalog_tokens": 0,
        "fingerprint": "",
    }
