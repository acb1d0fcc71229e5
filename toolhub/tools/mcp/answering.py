"""How one connection answers what its server asks in the middle of a call (``Answering``):
a form (elicitation) or a request for the model (sampling, declared only where the
operator allows it) is put to the person whose call it belongs to (``WaitingCalls.owner``),
through that chat's ``elicitor`` or ``sampler``.

Invariants: a request nobody can answer (no call it belongs to, nobody watching the chat,
a form toolhub will not draw) is refused with the reason (``AskRefused``); one whose call
ended meanwhile is dismissed; toolhub's own failure is logged here, and only its own words
go to the server, never an exception's text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from toolhub.tools.mcp.asks import AskRefused, sampling_ask
from toolhub.tools.mcp.callers import CallEnded, Caller, WaitingCalls
from toolhub.tools.mcp.config import McpServerConfig
from toolhub.tools.mcp.forms import elicit_form

logger = logging.getLogger(__name__)


class Answering:
    """The SDK's elicitation and sampling callbacks of one connection (``elicit``,
    ``sample``), answered for the calls waiting on it (``waiting``)."""

    def __init__(self, config: McpServerConfig, waiting: WaitingCalls) -> None:
        self.config = config
        self.waiting = waiting
        # Requests of the server being answered now: a connection that closes lets their
        # replies (a withdrawn form's "cancel") go out first (``settled``).
        self._open = 0
        self._settled = asyncio.Event()
        self._settled.set()

    @contextlib.asynccontextmanager
    async def _answering(self) -> AsyncIterator[None]:
        self._open += 1
        self._settled.clear()
        try:
            yield
        finally:
            self._open -= 1
            if not self._open:
                self._settled.set()

    async def settled(self) -> None:
        """Until no request of the server is being answered."""
        await self._settled.wait()

    def _answerer(self, service: str, what: str) -> tuple[Caller, Any]:
        """The call a server's request belongs to, and who answers it there (its chat's
        ``elicitor`` or ``sampler``); ``AskRefused`` when nobody can."""
        caller = self.waiting.owner()
        answerer = getattr(caller.ctx.services, service)
        if answerer is None or not caller.ctx.attended:
            raise AskRefused(f"nobody is watching this chat {what}")
        return caller, answerer

    async def elicit(self, context: Any, params: Any) -> Any:
        async with self._answering():
            return await self._elicit(params)

    async def _elicit(self, params: Any) -> Any:
        from mcp_types import INVALID_REQUEST, ElicitResult, ErrorData

        try:
            caller, elicitor = self._answerer("elicitor", "to answer a form")
            form = elicit_form(self.config.name, params)
            answer = await caller.run(lambda withdrawn: elicitor.elicit(form, withdrawn=withdrawn))
        except CallEnded:
            return ElicitResult(action="cancel")
        except AskRefused as exc:
            return ErrorData(code=INVALID_REQUEST, message=f"toolhub refused: {exc}")
        except Exception:
            return self._ask_failed("form")
        content = dict(answer.content) if answer.action == "accept" and not form.url else None
        return ElicitResult(action=answer.action, content=content)

    async def sample(self, context: Any, params: Any) -> Any:
        async with self._answering():
            return await self._sample(params)

    async def _sample(self, params: Any) -> Any:
        from mcp_types import INVALID_REQUEST, CreateMessageResult, ErrorData, TextContent

        try:
            caller, sampler = self._answerer("sampler", "to approve a sampling request")
            ask = sampling_ask(self.config.name, params)
            sampled = await caller.run(lambda withdrawn: sampler.sample(ask, withdrawn=withdrawn))
        except AskRefused as exc:
            return ErrorData(code=INVALID_REQUEST, message=f"toolhub refused: {exc}")
        except Exception:
            return self._ask_failed("sampling request")
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=sampled.text),
            model=sampled.model,
            stop_reason="maxTokens" if sampled.stopped_at_limit else "endTurn",
        )

    def _ask_failed(self, what: str) -> Any:
        """toolhub's own failure: logged here, and only its own words go to the server
        (an exception's text could carry anything, a database's among them)."""
        from mcp_types import INTERNAL_ERROR, ErrorData

        logger.exception(
            "MCP server %s: its %s could not be put to the person", self.config.name, what
        )
        return ErrorData(
            code=INTERNAL_ERROR, message=f"toolhub could not put this {what} to the person"
        )
