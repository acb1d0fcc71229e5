"""The turn runner: one message in, a model loop with tools, every step stored and streamed.

A ``TurnRunner`` resolves the session's toolset once and freezes it (``TurnTools``), then
loops provider call → tool calls → provider call until the model stops, the step limit is
reached, the person cancels or the provider fails. What it keeps true:

- every event is stored (``persist``) before it is sent to the session's group, and
  flushes are serialized, so seqs follow the order events were emitted;
- every tool_use the model finished is announced (``tool_call``) before anything runs
  and gets a ``tool_result``, whatever happens (error, vetoed, denied, cancelled);
- a call outside the frozen contract, or vetoed *now* (a global disable, ``can_use``),
  or denied by the person, never runs; approval is re-checked against disables after it;
- the loaded deferred set is checkpointed on the session after each tool result;
- the last flush stores the terminal event, the provider call and the release of the
  session in one transaction, so the next ``chat`` is accepted as soon as it is seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings

from agent_app.history import tool_result_block, tool_use_block
from agent_app.providers import (
    Provider,
    ProviderError,
    ProviderRequest,
    TextDelta,
    ToolUse,
    Usage,
)
from agent_app.providers.windows import window_learned
from agent_app.turns.asking import McpAsks
from agent_app.turns.begin import PreparedTurn
from agent_app.turns.claim import (
    LostClaim,
    heartbeat_seconds,
    release,
    renew,
)
from agent_app.turns.control import listen
from agent_app.turns.loop import on_db_thread
from agent_app.turns.preview import request_tools
from agent_app.turns.runs import run_and_wait
from agent_app.turns.tails import TailPump
from agent_app.turns.titles import name_chat
from profiles_app.services import global_disables
from sessions_app.models import SessionEvent
from sessions_app.result_files import result_files_store
from sessions_app.services import session_allow_for_chat, session_call_policy
from toolhub.lib.markdown import render_markdown
from toolhub.lib.storable import storable
from toolhub.tools import (
    CancelToken,
    ToolContext,
    ToolResult,
)
from toolhub.tools.approval import ASK, DENY, Decision
from toolhub.tools.files import ToolFile
from toolhub.tools.images import ToolImage
from toolhub.tools.schema import canonical_json
from toolhub.tools.tokens import count_cached
from toolhub.tools.turn import CallTarget, TurnTools

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.05
MAX_TOKENS = 4096
QUESTION_TOOL = "ask_user_question"
CANCELLED = "the turn was cancelled"


@dataclass(frozen=True, slots=True)
class AnnouncedCall:
    """A tool use the model finished, as its ``tool_call`` event said it (``data``), and
    what the frozen contract made of it (``target``: the real tool, or an error)."""

    data: dict[str, Any]
    target: CallTarget


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What became of one call: the ``tool_result`` event's status, content and reason,
    the deferred tools it loaded, and whether it came from the person's result cache."""

    status: str
    content: str
    reason: str = ""
    references: tuple[str, ...] = ()
    cached: bool = False
    # Where the whole result is kept when the model got it cut (a tool's persist_full).
    full_ref: str = ""
    # The approval policy that decided the call (toolhub.tools.approval), when one did.
    policy: Decision | None = None
    # Images the tool returned beside its text (toolhub/tools/images.py).
    images: tuple[ToolImage, ...] = ()
    structured: Any = None
    # Files for the person (toolhub/tools/files.py), stored when the result is.
    files: tuple[ToolFile, ...] = ()


@dataclass
class _StepOutcome:
    text: str = ""
    uses: list[ToolUse] = field(default_factory=list)
    calls: list[AnnouncedCall] = field(default_factory=list)
    record: dict[str, Any] | None = None
    usage: Usage = field(default_factory=Usage)
    cancelled: bool = False
    latency_ms: int = 0


class TurnRunner(McpAsks):
    """One turn's task: the provider loop, the tool decisions, control and the lease."""

    def __init__(
        self,
        *,
        session_id: Any,
        turn_id: str,
        text: str,
        attended: bool,
        control: str,
        prepared: PreparedTurn,
        started: list[SessionEvent],
        claimed_at: float,
    ) -> None:
        super().__init__(session_id=session_id, turn_id=turn_id)
        # When the claim took its lease (time.monotonic(), taken just before it).
        self._claimed_at = claimed_at
        self.text = text
        self.attended = attended
        self.control = control
        self._prep = prepared
        self._started = started
        self.cancel = CancelToken()
        self._answers: dict[str, asyncio.Future[Any]] = {}
        # Worker runs this turn waits for (call id → set when the worker says it ended).
        self._runs_done: dict[str, asyncio.Event] = {}
        self._checkpoint: list[str] = []
        self._current_call = ""
        # The wait stored on the session now, (kind, call id): cleared only by its own end.
        self._waiting_for: tuple[str, str] | None = None
        self._text_buffer = ""
        self._text_timer: asyncio.Future[None] | None = None

    # The task body: whatever happens, the turn ends with a terminal event and the
    # session is released.
    async def run(self) -> None:
        unlisten = listen(self.turn_id, self._on_control)
        heartbeat = asyncio.ensure_future(self._heartbeat())
        try:
            await self._run()
        except LostClaim:
            # Another claim took the session over (this lease ran out): it closed this
            # turn; writing more would interleave two turns in one log.
            logger.warning("turn %s lost its claim and stopped", self.turn_id)
            self._released = True
        except asyncio.CancelledError:
            # The server is stopping: end the turn properly if the database still answers
            # (otherwise the lease runs out and the next claim closes it).
            with contextlib.suppress(Exception):
                await self._finish_failed("interrupted", "the server stopped during this turn")
            raise
        except Exception as exc:
            logger.exception("turn %s failed", self.turn_id)
            await self._finish_failed("internal", f"{type(exc).__name__}: {exc}"[:300])
        finally:
            unlisten()
            heartbeat.cancel()
            if self._sending is not None:
                await asyncio.shield(self._sending)
            if not self._released:
                with contextlib.suppress(Exception):
                    await on_db_thread(release, session_id=self.session_id, turn_id=self.turn_id)

    async def _run(self) -> None:
        prep = self._prep
        # Sent while the provider call starts: nothing waits for it but the next send.
        self._send(self._started)
        turn = prep.turn
        self._checkpoint = turn.loaded
        services = replace(
            prep.ctx.services,
            tool_index=turn.index if prep.resolved.deferred else None,
            asker=_Asker(self) if self.attended else None,
            # An MCP server's form or sampling request needs a person too.
            elicitor=self if self.attended else None,
            sampler=self if self.attended else None,
        )
        ctx = replace(prep.ctx, services=services, cancel=self.cancel)
        asked = {"role": "user", "content": [{"type": "text", "text": self.text}]}
        messages = _merged([*prep.messages, asked])
        for _step in range(settings.TOOLHUB_MAX_STEPS):
            outcome = await self._provider_step(prep, turn, messages)
            if outcome is None:
                return
            # A turn that ends here stores its last events, the provider call and the
            # release in one transaction.
            if outcome.cancelled:
                await self._finish("cancelled", call=outcome.record)
                return
            if not outcome.uses:
                await self._finish("end_turn", call=outcome.record)
                await self._name_chat(prep, outcome.text)
                return
            await self._flush(call=outcome.record, **self._expect_answers(outcome.calls))
            assistant: list[dict[str, Any]] = []
            if outcome.text:
                assistant.append({"type": "text", "text": outcome.text})
            results: list[dict[str, Any]] = []
            native = turn.strategy == "native"
            assistant += [tool_use_block(call.data) for call in outcome.calls]
            for call in outcome.calls:
                result = await self._answer_call(turn, ctx, call)
                # As stored: text no request body can carry (a lone surrogate) is marked.
                results.append(tool_result_block(storable(result), native=native))
            messages.append({"role": "assistant", "content": assistant})
            messages.append({"role": "user", "content": results})
            if self.cancel.cancelled:
                await self._finish("cancelled")
                return
        await self._finish("max_steps")

    async def _name_chat(self, prep: PreparedTurn, answer: str) -> None:
        """After a chat's first answer (the session already released), its model may
        title it (agent_app/turns/titles.py)."""
        first = not prep.messages
        if first and answer and not prep.provider.is_demo and settings.TOOLHUB_AUTO_TITLES:
            await name_chat(
                provider=prep.provider,
                model=prep.model,
                session_id=self.session_id,
                turn=self.turn_id,
                question=self.text,
                answer=answer,
            )

    # --- provider ------------------------------------------------------------------

    async def _provider_step(
        self, prep: PreparedTurn, turn: TurnTools, messages: list[dict[str, Any]]
    ) -> _StepOutcome | None:
        """One provider round trip, stored; ``None`` when it failed (the turn is over)."""
        tools = (
            prep.tools
            if turn.tools_json() == prep.tools.tools_json and turn.loaded == list(prep.tools.loaded)
            else request_tools(provider=prep.provider, resolved=prep.resolved, turn=turn)
        )
        request = ProviderRequest(
            model=prep.model,
            system=prep.system,
            catalog=prep.resolved.catalog,
            messages=messages,
            tools_json=tools.tools_json,
            deferred=tools.wire.deferred,
            max_tokens=MAX_TOKENS,
        )
        outcome = await self._stream_with_retries(prep.provider, request)
        if outcome is None:
            return None
        if outcome.text:
            self._emit(
                "assistant_message", {"text": outcome.text, "html": render_markdown(outcome.text)}
            )
        usage = {
            "input_tokens": outcome.usage.input_tokens,
            "output_tokens": outcome.usage.output_tokens,
            "cache_read_input_tokens": outcome.usage.cache_read_input_tokens,
            "cache_creation_input_tokens": outcome.usage.cache_creation_input_tokens,
            "resident_tokens": tools.resident_tokens,
            "catalog_tokens": tools.catalog_tokens,
            "fingerprint": tools.fingerprint,
        }
        if outcome.usage.estimated:
            # The provider sent no usage: toolhub counted the request and the answer.
            usage["estimated"] = True
        # Announced before any of them runs, so a person sees each call start.
        outcome.calls = [self._call_event(turn, use) for use in outcome.uses]
        self._emit("usage", usage)
        outcome.record = self._call_record(prep, request, usage, outcome)
        return outcome

    def _call_record(
        self,
        prep: PreparedTurn,
        request: ProviderRequest,
        usage: dict[str, Any],
        outcome: _StepOutcome,
    ) -> dict[str, Any]:
        estimate = (
            usage["resident_tokens"]
            + usage["catalog_tokens"]
            + count_cached(request.system)
            + sum(count_cached(canonical_json(message)) for message in request.messages)
        )
        return {
            "provider": prep.provider.name,
            "model": prep.model[:100],
            "fingerprint": usage["fingerprint"],
            "resident_tokens": usage["resident_tokens"],
            "catalog_tokens": usage["catalog_tokens"],
            "input_tokens": usage["input_tokens"],
            "output_tokens": usage["output_tokens"],
            "cache_read_input_tokens": usage["cache_read_input_tokens"],
            "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
            "estimated_input_tokens": estimate,
            "usage_estimated": bool(usage.get("estimated")),
            "latency_ms": outcome.latency_ms,
        }

    async def _stream_with_retries(
        self, provider: Provider, request: ProviderRequest
    ) -> _StepOutcome | None:
        """One provider call, retried with backoff while it failed before producing
        anything; ``None`` after a terminal failure (``turn_failed`` is then pending)."""
        attempts = settings.TOOLHUB_PROVIDER_RETRIES + 1
        for attempt in range(attempts):
            outcome = _StepOutcome()
            started = time.monotonic()
            try:
                await self._stream(provider, request, outcome)
            except ProviderError as exc:
                produced = outcome.text or outcome.uses
                if exc.retryable and not produced and attempt + 1 < attempts:
                    delay = settings.TOOLHUB_PROVIDER_BACKOFF * 2**attempt
                    if await self._sleep_or_cancel(delay):
                        outcome.cancelled = True
                        return outcome
                    continue
                await self._finish_failed(*await _failure_words(provider, request, exc))
                return None
            outcome.latency_ms = int((time.monotonic() - started) * 1000)
            return outcome
        raise AssertionError("unreachable")

    async def _stream(
        self, provider: Provider, request: ProviderRequest, outcome: _StepOutcome
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
        stop = asyncio.ensure_future(self.cancel.wait())
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
        await self._flush(text_only=True)

    def _take_text(self) -> None:
        if self._text_timer is not None:
            self._text_timer.cancel()
            self._text_timer = None
        if self._text_buffer:
            self._emit("text_delta", {"text": self._text_buffer})
            self._text_buffer = ""

    # --- tools ---------------------------------------------------------------------

    def _call_event(self, turn: TurnTools, use: ToolUse) -> AnnouncedCall:
        target = turn.resolve_call(use.name, use.input)
        arguments = dict(target.arguments) if target.arguments else {}
        if target.error and not isinstance(use.input, dict):
            arguments = {}
        data: dict[str, Any] = storable(
            {"call_id": use.id, "name": target.name, "arguments": arguments}
        )
        if target.via:
            data["via"] = target.via
        self._emit("tool_call", data)
        self._unanswered[use.id] = target.name
        return AnnouncedCall(data=data, target=target)

    async def _answer_call(
        self, turn: TurnTools, ctx: ToolContext, announced: AnnouncedCall
    ) -> dict[str, Any]:
        call = announced.data
        result: dict[str, Any] = {"call_id": call["call_id"], "name": call["name"]}
        if call.get("via"):
            result["via"] = call["via"]
        started = time.monotonic()
        outcome = await self._decide_and_run(turn, ctx, call, announced.target)
        result.update(status=outcome.status, content=outcome.content)
        if outcome.reason:
            result["reason"] = outcome.reason
        if outcome.references:
            result["references"] = list(outcome.references)
        if outcome.cached:
            # Served from the person's result cache: it did not run again.
            result["cached"] = True
        if outcome.full_ref:
            result["full_ref"] = outcome.full_ref
        if outcome.policy is not None:
            result["policy"] = outcome.policy.to_json()
        if outcome.images:
            result["images"] = [image.to_json() for image in outcome.images]
        if outcome.structured is not None:
            result["structured"] = outcome.structured
        if outcome.files:
            # Stored before the event that names them, so every link on the card works.
            result["files"] = files = await on_db_thread(
                result_files_store,
                session_id=self.session_id,
                turn=self.turn_id,
                call_id=call["call_id"],
                files=outcome.files,
            )
            for file in files:
                if "refused" in file:
                    result["content"] += f"\n[file {file['name']} not kept: {file['refused']}]"
        result["elapsed_ms"] = int((time.monotonic() - started) * 1000)
        self._emit("tool_result", result)
        self._unanswered.pop(call["call_id"], None)
        loaded = turn.loaded
        writes: dict[str, Any] = {"loaded": loaded if loaded != self._checkpoint else None}
        self._checkpoint = loaded
        if self._answers.pop(call["call_id"], None) is not None:
            # A question announced but never asked (vetoed, cancelled) waits no more.
            writes["waiting"] = None
            self._waiting_for = None
        await self._flush(**writes)
        return result

    async def _decide_and_run(
        self, turn: TurnTools, ctx: ToolContext, call: dict[str, Any], target: CallTarget
    ) -> CallOutcome:
        """The decisions, in order: cancelled, outside the contract, vetoed now, the approval
        policy as stored now (``deny``: vetoed; ``ask``: the person, then vetoed again, since
        a disable may have come meanwhile); then it runs."""
        if self.cancel.cancelled:
            return CallOutcome("cancelled", "Cancelled before it ran.", CANCELLED)
        if target.refused is not None:
            return CallOutcome("vetoed", target.refused.told, target.refused.reason)
        if target.error:
            return CallOutcome("error", target.error)
        tool = target.tool
        disabled_now = await on_db_thread(global_disables)
        veto = turn.veto_now(tool, ctx, disabled_now)
        if veto:
            return CallOutcome("vetoed", veto.told, veto.reason)
        arguments = call["arguments"]
        decision = await on_db_thread(
            session_call_policy,
            session_id=self.session_id,
            tool=tool,
            arguments=arguments,
            ctx=ctx,
        )
        if decision.policy == DENY:
            return CallOutcome(
                "vetoed",
                f"{tool.name} is not allowed: {decision.why}",
                decision.why,
                policy=decision,
            )
        if decision.policy == ASK:
            refused = await self._approval(tool, call, decision, ctx, turn)
            if refused is not None:
                return refused
        before = turn.loaded
        self._current_call = call["call_id"]
        try:
            if tool.runs_on == "worker":
                outcome = await self._on_worker(tool, call, ctx)
            else:
                pump = TailPump(
                    session_id=self.session_id, turn_id=self.turn_id, call_id=call["call_id"]
                )
                try:
                    outcome = await tool.execute(arguments, replace(ctx, on_update=pump.on_update))
                finally:
                    await pump.close()
        finally:
            self._current_call = ""
        references = tuple(name for name in turn.loaded if name not in before)
        status = outcome.status if outcome.status in ("ok", "cancelled") else "error"
        if outcome.is_error and status == "ok":
            status = "error"
        if self.cancel.cancelled:
            # A tool that stopped on its own when asked still reports what it did, but the
            # person cancelled it.
            status = "cancelled"
        reason = CANCELLED if status == "cancelled" else ""
        return CallOutcome(
            status,
            outcome.content,
            reason,
            references,
            outcome.cached,
            outcome.full_ref or "",
            decision,
            outcome.images if status == "ok" else (),
            outcome.structured,
            files=outcome.files if status == "ok" else (),
        )

    async def _approval(
        self,
        tool: Any,
        call: dict[str, Any],
        decision: Decision,
        ctx: ToolContext,
        turn: TurnTools,
    ) -> CallOutcome | None:
        """Ask the person; ``None`` when they allowed it and it may still run (a disable
        made while they thought still holds: docs/architecture.md, hard line 5)."""
        if not self.attended:
            reason = "it asks a person first, and nobody is watching this turn"
            return CallOutcome(
                "denied", f"{tool.name} did not run: {reason}", reason, policy=decision
            )
        verdict = await self._ask_approval(call, decision)
        if verdict is not True:
            if self.cancel.cancelled:
                return CallOutcome(
                    "cancelled", "Cancelled while waiting for approval.", CANCELLED, policy=decision
                )
            reason = verdict or "the person denied it"
            return CallOutcome(
                "denied", f"{tool.name} did not run: {reason}", reason, policy=decision
            )
        veto = turn.veto_now(tool, ctx, await on_db_thread(global_disables))
        if veto:
            return CallOutcome("vetoed", veto.told, veto.reason, policy=decision)
        again = await on_db_thread(
            session_call_policy,
            session_id=self.session_id,
            tool=tool,
            arguments=call["arguments"],
            ctx=ctx,
        )
        if again.policy == DENY:
            refusal = f"{tool.name} is not allowed: {again.why}"
            return CallOutcome("vetoed", refusal, again.why, policy=again)
        return None

    async def _on_worker(self, tool: Any, call: dict[str, Any], ctx: ToolContext) -> ToolResult:
        done = self._runs_done[call["call_id"]] = asyncio.Event()
        try:
            return await run_and_wait(
                tool=tool,
                session_id=self.session_id,
                turn=self.turn_id,
                call_id=call["call_id"],
                arguments=call["arguments"],
                ctx=ctx,
                reply_channel=self.control,
                done=done,
                cancel=self.cancel,
            )
        finally:
            self._runs_done.pop(call["call_id"], None)

    async def _ask_approval(self, call: dict[str, Any], decision: Decision) -> bool | str:
        call_id = call["call_id"]
        self._emit(
            "approval_request",
            {
                "call_id": call_id,
                "name": call["name"],
                "arguments": call["arguments"],
                "policy": decision.to_json(),
                # Whether "Allow for this chat" is offered (an operator's ask is not).
                "chat_allowable": decision.chat_allowable,
            },
        )
        answer = await self._wait_for_person(
            "approval", call_id, name=call["name"], chat_allowable=decision.chat_allowable
        )
        if answer is None:
            timeout = settings.TOOLHUB_APPROVAL_TIMEOUT
            return "cancelled" if self.cancel.cancelled else f"no answer within {timeout:g} s"
        allow, _ = answer
        return bool(allow)

    def _answered(self, kind: str, call_id: str, answer: Any, *, withdrawn: bool = False) -> None:
        """The person's answer (or its absence) as an event, stored with the end of the
        wait: every tab and every reload shows the approval or question as answered."""
        data: dict[str, Any] = {"call_id": call_id}
        if answer is None and withdrawn:
            data["outcome"] = "withdrawn"
        elif answer is None:
            data["outcome"] = "cancelled" if self.cancel.cancelled else "timeout"
        elif kind == "elicitation":
            data.update(outcome=answer["action"], content=answer.get("content"))
        elif kind in ("approval", "sampling"):
            allow, scope = answer if isinstance(answer, tuple) else (bool(answer), "once")
            data.update(outcome="allowed" if allow else "denied", allow=allow)
            if allow and scope == "chat":
                data["scope"] = "chat"
        else:
            data.update(outcome="answered", text=str(answer))
        self._emit(f"{kind}_answered", data)

    def _expect_answers(self, calls: list[AnnouncedCall]) -> dict[str, Any]:
        """A question the model asks can be answered from the moment it is announced: the
        waiting state is stored with the announcement, not when the tool gets to run."""
        for call in calls:
            call_id = call.data["call_id"]
            if (
                call.target.tool is not None
                and call.data["name"] == QUESTION_TOOL
                and self.attended
            ):
                self._answers[call_id] = asyncio.get_running_loop().create_future()
                self._waiting_for = ("question", call_id)
                return {"waiting": {"kind": "question", "call_id": call_id}}
        return {}

    async def _wait_for_person(
        self, kind: str, call_id: str, *, withdrawn: CancelToken | None = None, **waiting: Any
    ) -> Any:
        """Wait for an approval or an answer; ``None`` on timeout or cancel. ``waiting`` is
        stored with the wait, for whoever answers (``turn_approve``) to read."""
        future = self._answers.get(call_id) or asyncio.get_running_loop().create_future()
        self._answers[call_id] = future
        key = (kind, call_id)
        self._waiting_for = key
        # Storable: a server's form may hold text no database takes (a NUL).
        await self._flush(waiting=storable({"kind": kind, "call_id": call_id, **waiting}))
        stop = asyncio.ensure_future(self.cancel.wait())
        # An MCP server's question ends with its call too (``withdrawn``).
        gone = asyncio.ensure_future(withdrawn.wait()) if withdrawn is not None else None
        try:
            await asyncio.wait(
                {future, stop, *([gone] if gone is not None else [])},
                timeout=settings.TOOLHUB_APPROVAL_TIMEOUT,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            if gone is not None:
                gone.cancel()
            stop.cancel()
            self._answers.pop(call_id, None)
            answer = future.result() if future.done() else None
            if answer == (True, "chat"):
                if waiting.get("chat_allowable"):
                    # The answer that won: stored before the log says so.
                    await on_db_thread(
                        session_allow_for_chat, session_id=self.session_id, tool=waiting["name"]
                    )
                else:
                    answer = (True, "once")
            ended = (
                withdrawn is not None
                and withdrawn.cancelled
                and not future.done()
                and not self.cancel.cancelled
            )
            self._answered(kind, call_id, answer, withdrawn=ended)
            # A withdrawn wait may end after the next one began: that one's stays stored.
            if self._waiting_for == key:
                self._waiting_for = None
                await self._flush(waiting=None)
            else:
                await self._flush()
        return answer

    # --- control, events, ending -----------------------------------------------------

    def _on_control(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "turn.cancel":
            self.cancel.cancel()
        elif kind in ("turn.approve", "turn.answer", "turn.elicit"):
            call_id = message.get("call_id")
            waits = {"turn.answer": "question", "turn.elicit": "elicitation"}
            meant = waits.get(kind) or str(message.get("kind") or "approval")
            if self._waiting_for != (meant, call_id):
                return  # meant for a wait that is over (a late tab, a retried request)
            future = self._answers.get(call_id)
            value: Any = message.get("text")
            if kind == "turn.approve":
                value = (bool(message.get("allow")), str(message.get("scope") or "once"))
            elif kind == "turn.elicit":
                value = {"action": message.get("action"), "content": message.get("content")}
            if future is not None and not future.done():
                future.set_result(value)
        elif kind == "run.done":
            done = self._runs_done.get(message.get("call_id", ""))
            if done is not None:
                done.set()

    async def _heartbeat(self) -> None:
        # The first beat comes one beat after the claim, so the lease is renewed as
        # often as ever: at once when preparing the turn (a cold tool index, say) took
        # that long, and never for a turn that ends sooner (most of them: a statement a
        # turn saved). Until renewed, a turn past its lease looks gone to whoever
        # answers it (an approval, a form) or claims the chat.
        wait = heartbeat_seconds() - (time.monotonic() - self._claimed_at)
        while True:
            if wait > 0:
                await asyncio.sleep(wait)
            wait = heartbeat_seconds()
            try:
                held = await on_db_thread(renew, session_id=self.session_id, turn_id=self.turn_id)
            except Exception as exc:
                # The database may be restarting: the next beat tries again.
                logger.warning("turn %s: lease not renewed (%s)", self.turn_id, type(exc).__name__)
                continue
            if not held:
                # Taken over (this lease ran out): what runs for this turn stops now, not
                # at its next write (which then finds the claim lost and writes nothing).
                logger.warning("turn %s lost its claim; stopping its tools", self.turn_id)
                self.cancel.cancel()
                return

    async def _sleep_or_cancel(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.cancel.wait(), timeout=seconds)
        return self.cancel.cancelled


async def _failure_words(
    provider: Provider, request: ProviderRequest, exc: ProviderError
) -> tuple[str, str]:
    """A failed call's code and words; a request that no longer fits the model's window
    says so (and the window is kept, so the next turn is planned for it)."""
    if getattr(exc, "window", None) is None:
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


def _merged(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join consecutive messages of one role (the new text after stored tool results)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if out and out[-1]["role"] == message["role"]:
            out[-1] = {"role": message["role"], "content": out[-1]["content"] + message["content"]}
        else:
            out.append(message)
    return out


class _Asker:
    """ask_user_question in an attended turn: the question is the call's arguments, the
    next ``chat`` frame is the answer."""

    def __init__(self, runner: TurnRunner) -> None:
        self._runner = runner

    async def ask(self, *, question: str, options: list[str]) -> str:
        answer = await self._runner._wait_for_person("question", self._runner._current_call)
        if answer is None:
            raise TimeoutError("no answer from the person")
        return str(answer)
