"""Attacks on who is asked: a hand-written hostile server (``hostile_mcp_server.py``,
handshake era, so nothing in its requests names a call) sending forms and sampling
requests through ``McpManager`` while chats' calls and reads wait on it. The people are
scripted ``Elicitor``/``Sampler``s that note what they were shown."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import pytest

from tests.integration.tools.test_mcp_client import connect, make_manager
from toolhub.tools import ToolContext, ToolRegistry
from toolhub.tools.context import ToolServices
from toolhub.tools.mcp import McpServerConfig
from toolhub.tools.mcp.asks import ElicitAnswer, ElicitForm, Sampled, SamplingAsk

pytestmark = pytest.mark.processes

HOSTILE = Path(__file__).resolve().parent / "hostile_mcp_server.py"


class Person:
    def __init__(self, answer: ElicitAnswer) -> None:
        self.answer = answer
        self.forms: list[ElicitForm] = []
        self.asks: list[SamplingAsk] = []

    async def elicit(self, form: ElicitForm, *, withdrawn=None) -> ElicitAnswer:
        self.forms.append(form)
        return self.answer

    async def sample(self, ask: SamplingAsk, *, withdrawn=None) -> Sampled:
        self.asks.append(ask)
        return Sampled(text="sampled", model="test-model")


def hostile_config(log: Path, **fields) -> McpServerConfig:
    return McpServerConfig(
        name="hostile",
        transport="stdio",
        command=sys.executable,
        args=(str(HOSTILE), "--log", str(log)),
        **fields,
    )


@pytest.fixture
def reg() -> ToolRegistry:
    return ToolRegistry()


@pytest.fixture
def hostile(reg: ToolRegistry, tmp_path: Path):
    manager = make_manager(reg, tmp_path)
    log = tmp_path / "hostile.log"

    def start(**fields) -> Path:
        connect(manager, hostile_config(log, **fields))
        return log

    yield start
    manager.stop()


def in_chat(person: Person) -> ToolContext:
    return ToolContext(env={}, services=ToolServices(elicitor=person, sampler=person))


def test_a_form_sent_during_another_chats_resource_read_is_not_put_to_the_person_whose_call_waits(
    hostile, reg
):
    """A handshake-era server's form sent while chat B reads a resource is not put to
    chat A, whose call also waits: reads carry their chat's caller too, so with two
    requests waiting it is nobody's, and A is never shown B's question."""
    hostile()
    waiting_person = Person(ElicitAnswer("accept", {"name": "A's secret"}))
    reader = Person(ElicitAnswer("accept", {"name": "B's secret"}))

    async def two_chats():
        held = asyncio.ensure_future(reg.get("hostile__hold").execute({}, in_chat(waiting_person)))
        await asyncio.sleep(0.5)
        read = await reg.get("hostile__read_resource").execute(
            {"uri": "note://secret"}, in_chat(reader)
        )
        return await held, read

    held, read = asyncio.run(two_chats())

    assert [form.message for form in waiting_person.forms] == [], (
        "chat A was shown the form the server sent during chat B's resource read: "
        f"{held.content!r} / {read.content!r}"
    )


class SlowPerson(Person):
    """Takes its time over a form, and notes whether it was withdrawn meanwhile."""

    def __init__(self) -> None:
        super().__init__(ElicitAnswer("accept", {"name": "typed after the call ended"}))
        self.withdrawn = False
        self.answered = False

    async def elicit(self, form: ElicitForm, *, withdrawn) -> ElicitAnswer:
        self.forms.append(form)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(withdrawn.wait(), 4)
        if withdrawn.cancelled:
            self.withdrawn = True
            return ElicitAnswer("cancel")
        self.answered = True
        return self.answer


def test_a_form_whose_call_has_ended_is_withdrawn_from_the_person(hostile, reg):
    """A server that asks and then answers its call without waiting has its form
    withdrawn from the person as the call ends: nothing is left on the card, nothing
    holds up the turn's later forms, and nothing the person types goes to the server."""
    hostile()
    person = SlowPerson()

    async def call_then_look():
        went = await reg.get("hostile__ask_and_go").execute({}, in_chat(person))
        # The call is over; a moment later the form should be gone.
        await asyncio.sleep(1.5)
        return went, person.withdrawn

    went, withdrawn_soon = asyncio.run(call_then_look())

    assert went.content == "went"
    assert [form.message for form in person.forms] == ["Asked, then gone"]
    assert withdrawn_soon, "the form stayed in front of the person after its call ended"


@pytest.mark.parametrize(
    ("params", "why"),
    [
        (
            {
                "message": "x",
                "requestedSchema": {
                    "type": "object",
                    "properties": {f"f{n}": {"type": "string"} for n in range(31)},
                },
            },
            "at most 30",
        ),
        (
            {
                "message": "x",
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "c": {"type": "string", "enum": [str(n) for n in range(10_000)]}
                    },
                },
            },
            "more than 100 choices",
        ),
        (
            {
                "message": "x",
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "n": {"type": "object", "properties": {"x": {"type": "string"}}}
                    },
                },
            },
            "kind a form cannot ask for",
        ),
        (
            {
                "message": "x",
                "requestedSchema": {
                    "type": "object",
                    "properties": {"<img src=x onerror=alert(1)>": {"type": "string"}},
                },
            },
            "field named",
        ),
        (
            {
                "mode": "url",
                "message": "x",
                "url": "javascript:alert(document.cookie)",
                "elicitationId": "e1",
            },
            "not an http(s) address",
        ),
        (
            {
                "mode": "url",
                "message": "x",
                "url": "data:text/html,<script>alert(1)</script>",
                "elicitationId": "e2",
            },
            "not an http(s) address",
        ),
        (
            {
                "mode": "url",
                "message": "x",
                "url": "https://example.org/\u202egnp.exe",
                "elicitationId": "e3",
            },
            "odd characters",
        ),
    ],
)
def test_a_hostile_form_is_refused_before_a_person_sees_it(hostile, reg, params, why):
    """Resisted: too many fields or choices, nesting, a field name made of markup, and
    pages that are not plain web addresses are refused, with the reason going back to
    the server; the person is never shown them."""
    hostile()
    person = Person(ElicitAnswer("accept", {}))

    result = asyncio.run(reg.get("hostile__ask").execute({"params": params}, in_chat(person)))

    assert person.forms == []
    assert "toolhub refused" in result.content
    assert why in result.content
