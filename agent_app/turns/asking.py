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
from typing import TYPE_CHECKING, Any

from agent_app.providers import ProviderError, ProviderRequest, Stop, TextDelta, Usage
from agent_app.turns.events import TurnEvents
from toolhub.tools import CancelToken
from toolhub.tools.mcp.asks import AskRefused, ElicitAnswer, ElicitForm, Sampled, SamplingAsk

if TYPE_CHECKING:
    from agent_app.turns.begin import PreparedTurn


class McpAsks(TurnEvents):
    """The turn runner's answers to MCP servers (``Elicitor`` and ``Sampler``)."""

    _prep: PreparedTurn
    _current_call: str
    cancel: CancelToken

    def __init__(self, *, session_id: Any, turn_id: str) -> None:
        super().__init__(session_id=session_id, turn_id=turn_id)
        # One form or sampling request on the cards at a time: a person answers in order.
        self._asking = asyncio.Lock()

    async def _wait_for_person(
        self, kind: str, call_id: str, *, withdrawn: CancelToken | None = None, **waiting: Any
    ) -> Any:
        raise NotImplementedError

    async def elicit(self, form: ElicitForm, *, withdrawn: CancelToken) -> ElicitAnswer:
        async with self._asking:
            call_id = self._current_call
            if withdrawn.cancelled:
                return ElicitAnswer("cancel")
            shown = form.to_json()
            self._emit("elicitation_request", {"call_id": call_id, **shown})
            answer = await self._wait_for_person(
                "elicitation",
                call_id,
                withdrawn=withdrawn,
                server=form.server,
                mode=shown["mode"],
                fields=shown["fields"],
            )
        if answer is None:
            return ElicitAnswer("cancel")
        return ElicitAnswer(answer["action"], answer.get("content"))

    async def sample(self, ask: SamplingAsk, *, withdrawn: CancelToken) -> Sampled:
        prep = self._prep
        async with self._asking:
            call_id = self._current_call
            if withdrawn.cancelled:
                raise AskRefused("the call it belongs to has ended")
            self._emit(
                "sampling_request", {"call_id": call_id, "model": prep.model, **ask.to_json()}
            )
            answer = await self._wait_for_person(
                "sampling", call_id, withdrawn=withdrawn, server=ask.server
            )
        if answer is None:
            raise AskRefused("the turn stopped" if self.cancel.cancelled else "no answer in time")
        if not answer[0]:
            raise AskRefused("the person denied it")
        request = ProviderRequest(
            model=prep.model,
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
        text, usage, stop = "", Usage(), ""
        try:
            async for event in prep.provider.stream(request):
                if isinstance(event, TextDelta):
                    text += event.text
                elif isinstance(event, Usage):
                    usage = event
                elif isinstance(event, Stop):
                    stop = event.reason
        except ProviderError as exc:
            raise AskRefused(f"the model failed: {exc.message}") from None
        self._emit("sampling_result", {"call_id": call_id, "text": text, "model": prep.model})
        self._emit(
            "usage",
            {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_input_tokens": usage.cache_read_input_tokens,
                "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                "resident_tokens": 0,
                "catalog_tokens": 0,
                "fingerprint": "",
                "sampling": True,
            },
        )
        await self._flush(call=self._sampling_record(request, usage, started))
        return Sampled(text=text, model=prep.model, stopped_at_limit=stop == "max_tokens")

    def _sampling_record(
        self, request: ProviderRequest, usage: Usage, started: float
    ) -> dict[str, Any]:
        from toolhub.tools.schema import canonical_json
        from toolhub.tools.tokens import count_cached

        prep = self._prep
        return {
            "provider": prep.provider.name,
            "model": prep.model[:100],
            "fingerprint": "",
            "resident_tokens": 0,
            "catalog_tokens": 0,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "estimated_input_tokens": count_cached(request.system)
            + sum(count_cached(canonical_json(message)) for message in request.messages),
            "latency_ms": int((time.monotonic() - started) * 1000),
        }
