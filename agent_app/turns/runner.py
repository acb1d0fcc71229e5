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
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

from django.conf import settings

from agent_app.history import merged_roles, messages_from_events, tool_result_block, tool_use_block
from agent_app.providers import ToolUse
from agent_app.turns.asking import McpAsks
from agent_app.turns.begin import PreparedTurn
from agent_app.turns.claim import LostClaim, Waiting, heartbeat_seconds, release, renew
from agent_app.turns.control import listen
from agent_app.turns.decide import CANCELLED, CallChecks, CallOutcome, Cleared, call_decision
from agent_app.turns.events import FlushWrites, TurnEvents
from agent_app.turns.loop import on_db_thread
from agent_app.turns.runs import run_and_wait
from agent_app.turns.step import AnnouncedCall, ProviderSteps
from agent_app.turns.tails import TailPump
from agent_app.turns.titles import name_chat
from agent_app.turns.waits import PersonWaits
from sessions_app.models import SessionEvent
from sessions_app.result_files import result_files_store
from sessions_app.services import CallRules, session_call_rules
from toolhub.lib.storable import storable
from toolhub.tools import CancelToken, ToolContext, ToolResult
from toolhub.tools.approval import Decision
from toolhub.tools.tool import Tool
from toolhub.tools.turn import TurnTools

logger = logging.getLogger(__name__)

QUESTION_TOOL = "ask_user_question"


@dataclass
class CurrentCall:
    """The id of the tool call a turn runs now ("" between calls), for its MCP asks and
    its question tool. They hold this, not the runner: a turn's parts then make no cycle
    back to it, and reference counting frees a finished turn whole, at once, instead of
    leaving it to the garbage collector (toolhub.lib.collector)."""

    id: str = ""

    def __call__(self) -> str:
        return self.id


class TurnRunner:
    """One turn's task: the provider loop and the tool calls, with control and the lease.

    Composed of its parts: ``events`` (emitted, stored, sent), ``waits`` (what it waits
    for from the person), ``steps`` (the provider calls) and ``asks`` (an MCP server's
    form or sampling request during a call)."""

    def __init__(
        self,
        *,
        session_id: UUID,
        turn_id: str,
        text: str,
        attended: bool,
        control: str,
        prepared: PreparedTurn,
        started: list[SessionEvent],
        said: dict[str, Any],
        claimed_at: float,
    ) -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        # When the claim took its lease (time.monotonic(), taken just before it).
        self._claimed_at = claimed_at
        self.text = text
        self.attended = attended
        self.control = control
        self._prep = prepared
        self._started = started
        self._said = said
        self.cancel = CancelToken()
        self._call = CurrentCall()
        self.events = TurnEvents(session_id=session_id, turn_id=turn_id)
        self.waits = PersonWaits(events=self.events, cancel=self.cancel)
        self.steps = ProviderSteps(events=self.events, cancel=self.cancel, prep=prepared)
        self.asks = McpAsks(
            events=self.events,
            waits=self.waits,
            cancel=self.cancel,
            provider=prepared.provider,
            model=prepared.model,
            current_call=self._call,
        )
        # Worker runs this turn waits for (call id → set when the worker says it ended).
        self._runs_done: dict[str, asyncio.Event] = {}
        self._checkpoint: list[str] = []

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
            self.events.released = True
        except asyncio.CancelledError:
            # The server is stopping: end the turn properly if the database still answers
            # (otherwise the lease runs out and the next claim closes it).
            with contextlib.suppress(Exception):
                await self.events.finish_failed(
                    "interrupted", "the server stopped during this turn"
                )
            raise
        except Exception as exc:
            logger.exception("turn %s failed", self.turn_id)
            await self.events.finish_failed("internal", f"{type(exc).__name__}: {exc}"[:300])
        finally:
            unlisten()
            heartbeat.cancel()
            await self.events.drained()
            if not self.events.released:
                with contextlib.suppress(Exception):
                    await on_db_thread(release, session_id=self.session_id, turn_id=self.turn_id)

    async def _run(self) -> None:
        prep = self._prep
        # Sent while the provider call starts: nothing waits for it but the next send.
        self.events.send(self._started)
        turn = prep.turn
        self._checkpoint = turn.loaded
        ctx = self._tool_context()
        # The message as stored: its words, and the files it carried with their images.
        asked = messages_from_events([("user_message", self._said)])
        messages = merged_roles([*prep.messages, *asked])
        for _step in range(settings.TOOLHUB_MAX_STEPS):
            outcome = await self.steps.step(turn, messages, lambda use: self._announce(turn, use))
            if outcome is None:
                return
            # A turn that ends here stores its last events, the provider call and the
            # release in one transaction.
            if outcome.cancelled:
                await self.events.finish("cancelled", call=outcome.record)
                return
            if not outcome.uses:
                titling = self._titling(outcome.text)
                await self.events.finish("end_turn", call=outcome.record, title_follows=titling)
                if titling:
                    await self._name_chat(outcome.text)
                return
            writes = self._expect_answers(outcome.calls)
            writes["call"] = outcome.record
            await self.events.flush(**writes)
            assistant: list[dict[str, Any]] = []
            if outcome.text:
                assistant.append({"type": "text", "text": outcome.text})
            assistant += [tool_use_block(call.data) for call in outcome.calls]
            results = [await self._answer_call(turn, ctx, call) for call in outcome.calls]
            native = turn.strategy == "native"
            messages.append({"role": "assistant", "content": assistant})
            # As stored: text no request body can carry (a lone surrogate) is marked.
            blocks = [tool_result_block(storable(result), native=native) for result in results]
            messages.append({"role": "user", "content": blocks})
            if self.cancel.cancelled:
                await self.events.finish("cancelled")
                return
        await self.events.finish("max_steps")

    def _tool_context(self) -> ToolContext:
        """The tools' context for this turn: its cancel token, the deferred index
        ``tool_search`` reads, and (attended) the person who answers questions, forms and
        sampling requests."""
        prep = self._prep
        services = replace(
            prep.ctx.services,
            tool_index=prep.turn.index if prep.resolved.deferred else None,
            asker=_Asker(call=self._call, waits=self.waits) if self.attended else None,
            # An MCP server's form or sampling request needs a person too.
            elicitor=self.asks if self.attended else None,
            sampler=self.asks if self.attended else None,
        )
        return replace(prep.ctx, services=services, cancel=self.cancel)

    def _titling(self, answer: str) -> bool:
        """Whether the chat's model is asked for its title once this turn ends: after a
        chat's first answer, with a real provider (agent_app/turns/titles.py). The turn's
        end says so, and sockets watch the log for the title (``EventCursor``)."""
        prep = self._prep
        first = not prep.messages
        return bool(first and answer and not prep.provider.is_demo and settings.TOOLHUB_AUTO_TITLES)

    async def _name_chat(self, answer: str) -> None:
        """Ask for the chat's title (the session already released)."""
        prep = self._prep
        await name_chat(
            provider=prep.provider,
            model=prep.model,
            session_id=self.session_id,
            turn=self.turn_id,
            question=self.text,
            answer=answer,
        )

    # --- tools ---------------------------------------------------------------------

    def _announce(self, turn: TurnTools, use: ToolUse) -> AnnouncedCall:
        """The ``tool_call`` event for a tool use the model finished, before anything of
        it runs."""
        target = turn.resolve_call(use.name, use.input)
        arguments = dict(target.arguments) if target.arguments else {}
        if target.error and not isinstance(use.input, dict):
            arguments = {}
        data: dict[str, Any] = storable(
            {"call_id": use.id, "name": target.name, "arguments": arguments}
        )
        if target.via:
            data["via"] = target.via
        self.events.emit("tool_call", data)
        self.events.announced(use.id, target.name)
        return AnnouncedCall(data=data, target=target)

    def _expect_answers(self, calls: list[AnnouncedCall]) -> FlushWrites:
        """A question the model asks can be answered from the moment it is announced."""
        for call in calls:
            if (
                call.target.tool is not None
                and call.data["name"] == QUESTION_TOOL
                and self.attended
            ):
                return {"waiting": self.waits.expect_question(call.data["call_id"])}
        return {}

    async def _answer_call(
        self, turn: TurnTools, ctx: ToolContext, announced: AnnouncedCall
    ) -> dict[str, Any]:
        """Decide the call, run it if it may, and store its ``tool_result``."""
        call = announced.data
        checks = CallChecks(
            rules=self._rules,
            approve=self._ask_approval if self.attended else None,
            cancelled=lambda: self.cancel.cancelled,
        )
        decided = await call_decision(
            call=call, target=announced.target, turn=turn, ctx=ctx, checks=checks
        )
        ran_for: int | None = None
        if isinstance(decided, Cleared):
            # How long it ran, not how long the person took to allow it.
            started = time.monotonic()
            decided = await self._run_call(turn, ctx, call, decided)
            ran_for = int((time.monotonic() - started) * 1000)
        result = decided.to_event(call)
        if decided.files:
            await self._store_files(call["call_id"], decided, result)
        if ran_for is not None:
            result["elapsed_ms"] = ran_for
        self.events.emit("tool_result", result)
        self.events.answered(call["call_id"])
        loaded = turn.loaded
        writes: FlushWrites = {"loaded": loaded if loaded != self._checkpoint else None}
        self._checkpoint = loaded
        if self.waits.forget(call["call_id"]):
            # A question announced but never asked (vetoed, cancelled) waits no more.
            writes["waiting"] = None
        await self.events.flush(**writes)
        return result

    async def _rules(self, tool: Tool, arguments: Any, ctx: ToolContext) -> CallRules:
        return await on_db_thread(
            session_call_rules, session_id=self.session_id, tool=tool, arguments=arguments, ctx=ctx
        )

    async def _run_call(
        self, turn: TurnTools, ctx: ToolContext, call: dict[str, Any], cleared: Cleared
    ) -> CallOutcome:
        """Run a call the decision cleared, inline or on a worker, and say what became of
        it (cancelled, when the person stopped it, whatever the tool reported)."""
        tool, call_id = cleared.tool, call["call_id"]
        before = turn.loaded
        self._call.id = call_id
        try:
            if tool.runs_on == "worker":
                ran = await self._on_worker(tool, call, ctx)
            else:
                pump = TailPump(session_id=self.session_id, turn_id=self.turn_id, call_id=call_id)
                try:
                    ran = await tool.execute(
                        call["arguments"], replace(ctx, on_update=pump.on_update)
                    )
                finally:
                    await pump.close()
        finally:
            self._call.id = ""
        status = ran.status if ran.status in ("ok", "cancelled") else "error"
        if ran.is_error and status == "ok":
            status = "error"
        if self.cancel.cancelled:
            # A tool that stopped on its own when asked still reports what it did, but the
            # person cancelled it.
            status = "cancelled"
        kept = status == "ok"
        return CallOutcome(
            status=status,
            content=ran.content,
            reason=CANCELLED if status == "cancelled" else "",
            references=tuple(name for name in turn.loaded if name not in before),
            cached=ran.cached,
            full_ref=ran.full_ref or "",
            policy=cleared.policy,
            images=ran.images if kept else (),
            structured=ran.structured,
            files=ran.files if kept else (),
        )

    async def _store_files(
        self, call_id: str, outcome: CallOutcome, result: dict[str, Any]
    ) -> None:
        """Files for the person, stored before the event that names them, so every link on
        the card works; one not kept is said in the result."""
        result["files"] = files = await on_db_thread(
            result_files_store,
            session_id=self.session_id,
            turn=self.turn_id,
            call_id=call_id,
            files=outcome.files,
        )
        for file in files:
            if "refused" in file:
                result["content"] += f"\n[file {file['name']} not kept: {file['refused']}]"

    async def _on_worker(self, tool: Tool, call: dict[str, Any], ctx: ToolContext) -> ToolResult:
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

    async def _ask_approval(self, call: Mapping[str, Any], decision: Decision) -> bool | str:
        call_id = call["call_id"]
        self.events.emit(
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
        waiting = Waiting(
            kind="approval",
            call_id=call_id,
            name=call["name"],
            chat_allowable=decision.chat_allowable,
        )
        answer = await self.waits.wait(waiting)
        if answer is None:
            timeout = settings.TOOLHUB_APPROVAL_TIMEOUT
            return "cancelled" if self.cancel.cancelled else f"no answer within {timeout:g} s"
        allow, _ = answer
        return bool(allow)

    # --- control and the lease -------------------------------------------------------

    def _on_control(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "turn.cancel":
            self.cancel.cancel()
        elif kind in _ANSWERS:
            call_id = message.get("call_id")
            if not isinstance(call_id, str):
                return  # no wait is for a call without an id
            meant = _ANSWERS[kind] or str(message.get("kind") or "approval")
            waiting = Waiting(kind=meant, call_id=call_id)
            self.waits.take(waiting, _answer_value(kind, message))
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


# Control messages that answer a wait → the kind of wait (an approval's names its own:
# a tool's, or an MCP server's sampling request).
_ANSWERS = {"turn.approve": "", "turn.answer": "question", "turn.elicit": "elicitation"}


def _answer_value(kind: str, message: dict[str, Any]) -> Any:
    if kind == "turn.approve":
        return (bool(message.get("allow")), str(message.get("scope") or "once"))
    if kind == "turn.elicit":
        return {"action": message.get("action"), "content": message.get("content")}
    return message.get("text")


class _Asker:
    """ask_user_question in an attended turn: the question is the call's arguments, the
    next ``chat`` frame is the answer."""

    def __init__(self, *, call: CurrentCall, waits: PersonWaits) -> None:
        self._call = call
        self._waits = waits

    async def ask(self, *, question: str, options: list[str]) -> str:
        waiting = Waiting(kind="question", call_id=self._call.id)
        answer = await self._waits.wait(waiting)
        if answer is None:
            raise TimeoutError("no answer from the person")
        return str(answer)
