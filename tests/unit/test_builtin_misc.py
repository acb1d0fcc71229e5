"""The small built-ins: time, arithmetic, notes, messages, agents, questions, plan mode,
and tool_search over the turn's own index."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from toolhub.tools import ToolContext, ToolServices, agent_tools, function, get
from toolhub.tools.builtin.calculate import evaluate
from toolhub.tools.search import ToolIndex


class Notes:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, *, user_id: str, text: str) -> str:
        self.rows.append({"id": str(len(self.rows) + 1), "user": user_id, "text": text})
        return self.rows[-1]["id"]

    def search(self, *, user_id: str, query: str, limit: int) -> list[dict]:
        words = query.lower().split()
        mine = [row for row in self.rows if row["user"] == user_id]
        return [row for row in mine if any(word in row["text"].lower() for word in words)][:limit]


class Messenger:
    def __init__(self, sessions: dict[str, str]) -> None:
        self.sessions = sessions
        self.sent: list[tuple[str, str]] = []

    def send(self, *, user_id: str, from_session: str | None, to_session: str, text: str) -> str:
        if self.sessions.get(to_session) != user_id:
            raise LookupError(to_session)
        self.sent.append((to_session, text))
        return f"event {len(self.sent)}"


class Asker:
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked: list[tuple[str, list[str]]] = []

    async def ask(self, *, question: str, options: list[str]) -> str:
        self.asked.append((question, options))
        return self.answer


class PlanSwitch:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool, str | None]] = []

    def set_plan_mode(self, *, session_id: str, on: bool, plan: str | None = None) -> None:
        self.calls.append((session_id, on, plan))


async def test_current_time_in_a_named_zone_and_an_unknown_zone_is_an_error():
    paris = await get("current_time").execute({"timezone": "Europe/Paris"})
    bogus = await get("current_time").execute({"timezone": "Mars/Olympus"})

    stamp = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0[12]:00 \(\w+day, Europe/Paris\)$"
    assert re.match(stamp, paris.content)
    assert bogus.is_error
    assert "unknown time zone" in bogus.content


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2 * (3 + 4) ** 2", 98),
        ("7 // 2 + 7 % 2", 4),
        ("-3 ^ 2", -9),
        ("sqrt(16) + abs(-1)", 5.0),
        ("round(pi, 3)", 3.142),
        ("max(1, 5, 3)", 5),
        ("1 / 4", 0.25),
    ],
)
def test_calculate_evaluates_arithmetic(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('id')",
        "(1).__class__",
        "open('x')",
        "[1, 2]",
        "a + 1",
        "2 ** 100000",
        "9 ** 9 ** 9",
        "factorial(100000)",
        "lambda: 1",
        "1 if 1 else 2",
    ],
)
async def test_calculate_refuses_anything_but_bounded_arithmetic(expression):
    result = await get("calculate").execute({"expression": expression})

    assert result.is_error


async def test_remember_and_recall_keep_each_persons_notes_apart():
    notes = Notes()
    alice = ToolContext(user_id="alice", services=ToolServices(notes=notes))
    bob = replace(alice, user_id="bob")

    await get("remember").execute({"text": "Alice likes green tea"}, alice)
    await get("remember").execute({"text": "Bob likes coffee"}, bob)

    assert (await get("recall").execute({"query": "likes"}, alice)).content == (
        "- Alice likes green tea (note 1)"
    )
    assert (await get("recall").execute({"query": "tea"}, bob)).content == "no notes match 'tea'"


async def test_send_message_reaches_only_the_persons_own_sessions():
    messenger = Messenger({"s2": "alice", "s9": "mallory"})
    ctx = ToolContext(user_id="alice", session_id="s1", services=ToolServices(messenger=messenger))

    sent = await get("send_message").execute({"session_id": "s2", "text": "done"}, ctx)
    foreign = await get("send_message").execute({"session_id": "s9", "text": "hi"}, ctx)
    missing = await get("send_message").execute({"session_id": "nope", "text": "hi"}, ctx)

    assert sent.content == "sent to session s2 (event 1)"
    assert foreign.is_error
    assert missing.is_error
    assert foreign.content.replace("s9", "X") == missing.content.replace("nope", "X")
    assert messenger.sent == [("s2", "done")]


async def test_list_agents_returns_the_directory_for_this_person():
    class Directory:
        def list(self, *, user_id: str) -> list[dict]:
            return [{"name": "coder", "model": "claude", "for": user_id}]

    ctx = ToolContext(user_id="alice", services=ToolServices(agents=Directory()))

    result = await get("list_agents").execute({}, ctx)

    assert json.loads(result.content) == [{"for": "alice", "model": "claude", "name": "coder"}]


async def test_ask_user_question_waits_for_the_persons_answer():
    asker = Asker("blue")
    ctx = ToolContext(services=ToolServices(asker=asker))

    result = await get("ask_user_question").execute(
        {"question": "Which colour?", "options": ["red", "blue"]}, ctx
    )

    assert result.content == "The person answered: blue"
    assert asker.asked == [("Which colour?", ["red", "blue"])]


async def test_plan_mode_switches_on_and_off_with_the_plan():
    switch = PlanSwitch()
    ctx = ToolContext(session_id="s1", services=ToolServices(plan_mode=switch))

    offered = agent_tools(ctx=ctx).names
    in_plan = agent_tools(ctx=replace(ctx, mode="plan")).names
    await get("enter_plan_mode").execute({}, ctx)
    await get("exit_plan_mode").execute({"plan": "1. do it"}, replace(ctx, mode="plan"))

    assert "enter_plan_mode" in offered
    assert "exit_plan_mode" not in offered
    assert "exit_plan_mode" in in_plan
    assert "enter_plan_mode" not in in_plan
    assert get("exit_plan_mode").needs_approval({"plan": "x"}, ctx)
    assert switch.calls == [("s1", True, None), ("s1", False, "1. do it")]


def _index():
    def fetch_weather(city: str) -> str:
        """Get the weather forecast for a city."""
        return city

    def convert_currency(amount: float, to: str) -> str:
        """Convert an amount of money into another currency."""
        return to

    return ToolIndex(
        [
            function(register_globally=False)(fetch_weather),
            function(register_globally=False)(convert_currency),
        ]
    )


async def test_tool_search_selects_exact_names_and_returns_full_schemas():
    ctx = ToolContext(services=ToolServices(tool_index=_index()))

    result = await get("tool_search").execute({"query": "select:convert_currency,nope"}, ctx)

    lines = result.content.splitlines()
    assert json.loads(lines[0])["name"] == "convert_currency"
    assert json.loads(lines[0])["input_schema"]["required"] == ["amount", "to"]
    assert lines[1] == "Not available: nope"


async def test_tool_search_ranks_by_query_and_never_dead_ends():
    ctx = ToolContext(services=ToolServices(tool_index=_index()))

    hit = await get("tool_search").execute({"query": "weather forecast"}, ctx)
    miss = await get("tool_search").execute({"query": "quantum chromodynamics"}, ctx)

    assert json.loads(hit.content.splitlines()[0])["name"] == "fetch_weather"
    assert "Searchable tools: convert_currency, fetch_weather" in miss.content


async def test_a_query_longer_than_the_limit_is_refused_before_it_is_searched():
    searched = []
    index = _index()
    original = index.search
    index.search = lambda query, limit: searched.append(query) or original(query, limit)
    ctx = ToolContext(services=ToolServices(tool_index=index))

    huge = await get("tool_search").execute({"query": "weather " * 200_000}, ctx)
    names = await get("tool_search").execute({"query": "select:" + "x," * 100_000}, ctx)
    longest = await get("tool_search").execute({"query": "w" * 1_000}, ctx)

    assert huge.is_error
    assert "the query is 1,600,000 characters; at most 1,000" in huge.content
    assert names.is_error
    assert not longest.is_error
    assert searched == ["w" * 1_000]


def test_tools_whose_interface_is_missing_are_unavailable_with_a_reason():
    selection = agent_tools(ctx=ToolContext(user_id="u1"))

    for name in ("remember", "send_message", "list_agents", "ask_user_question", "tool_search"):
        assert selection.reason_for(name).layer == "L4", name
