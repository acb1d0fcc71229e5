"""Chat turns end to end in-process: the session socket, the turn runner, the real
anthropic SDK over real HTTP against the fake Messages API, and the database.

Each test drives a turn the way a browser does (frames over ``WebsocketCommunicator``)
and checks what a person would notice: the events, what the model was sent, and whether
a tool really ran (side-effect counters).
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading

import pytest
from channels.db import database_sync_to_async

from agent_app.turns.loop import wait_for_turns
from tests.fakes import Reply
from tests.integration.chat import events, open_socket, receive, send, until
from toolhub.tools import ToolContext, function

pytestmark = pytest.mark.django_db(transaction=True)

CALLS: list[str] = []


def _counter(note: str = "") -> str:
    """Count a call.

    Args:
        note: Anything.
    """
    CALLS.append(f"counter:{note}")
    return "counted"


def _guarded(target: str = "") -> str:
    """Do something that needs the person's approval.

    Args:
        target: What to act on.
    """
    CALLS.append(f"guarded:{target}")
    return "guarded ran"


async def _slow(ctx: ToolContext) -> str:
    """Wait until cancelled (at most 30 seconds)."""
    CALLS.append("slow")
    ctx.update("working...\n")
    try:
        await asyncio.wait_for(ctx.cancel.wait(), 30)
    except TimeoutError:
        return "finished"
    return "stopped"


async def _chatty(ctx: ToolContext) -> str:
    """Print a long line and return."""
    CALLS.append("chatty")
    ctx.update("a long line of output, longer than slow's\n")
    return "printed"


def _deep_lookup(topic: str) -> str:
    """Look a topic up in the deep archive.

    Args:
        topic: What to look up.
    """
    CALLS.append(f"deep:{topic}")
    return f"deep facts about {topic}"


def _plan_danger() -> str:
    """Change things (never in plan mode)."""
    CALLS.append("plan_danger")
    return "changed"


@pytest.fixture
def executed(registry_state):
    """Test tools in the live registry; ``CALLS`` records every real execution."""
    CALLS.clear()
    tools = [
        function(_counter, name="counter_tool", register_globally=False),
        function(_guarded, name="guarded", requires_approval=True, register_globally=False),
        function(_slow, name="slow", register_globally=False),
        function(_chatty, name="chatty", register_globally=False),
        function(_deep_lookup, name="deep_lookup", defer=True, register_globally=False),
        function(_plan_danger, name="plan_danger", unsafe_in=("plan",), register_globally=False),
    ]
    for tool in tools:
        registry_state.register(tool)
    yield CALLS
    CALLS.clear()


@database_sync_to_async
def new_session(user, **kwargs):
    from sessions_app.services import session_create

    return session_create(user=user, **kwargs)


@database_sync_to_async
def new_agent(user, **fields):
    from profiles_app.models import Agent

    return Agent.objects.create(owner=user, name=fields.pop("name", "lab agent"), **fields)


@database_sync_to_async
def stored(session_id):
    from sessions_app.models import SessionEvent

    return list(
        SessionEvent.objects.filter(session_id=session_id)
        .order_by("seq")
        .values("seq", "turn", "kind", "data")
    )


@database_sync_to_async
def reload(session):
    session.refresh_from_db()
    return session


def tool_names(seen) -> list[str]:
    return [tool["name"] for tool in seen.body.get("tools", [])]


async def chat(socket, text, **extra):
    await send(socket, {"type": "chat", "text": text, **extra})
    return await until(socket)


async def test_a_text_turn_streams_and_stores_every_event_as_sent(owner, model):
    model.replies.append(Reply(text="Hello there, person."))
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "hi")

    kinds = [frame["kind"] for frame in events(frames)]
    assert kinds[:2] == ["user_message", "turn_started"]
    assert kinds[-3:] == ["assistant_message", "usage", "turn_finished"]
    assert "text_delta" in kinds
    deltas = "".join(f["data"]["text"] for f in events(frames, "text_delta"))
    assert deltas == "Hello there, person."
    assert events(frames, "assistant_message")[0]["data"]["html"] == "<p>Hello there, person.</p>\n"
    assert [f["seq"] for f in events(frames)] == list(range(1, len(kinds) + 1))
    log = await stored(session.pk)
    assert [{k: f[k] for k in ("seq", "turn", "kind", "data")} for f in events(frames)] == log
    assert model.requests[0].body["messages"][-1]["content"][0]["text"] == "hi"
    await socket.disconnect()


async def test_a_tool_turn_runs_the_tool_once_and_sends_its_result_back(owner, model, executed):
    model.replies.extend(
        [Reply(tool_calls=[("toolu_1", "counter_tool", {"note": "x"})]), Reply(text="Done.")]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "count please")

    assert executed == ["counter:x"]
    call = events(frames, "tool_call")[0]["data"]
    result = events(frames, "tool_result")[0]["data"]
    assert call == {"call_id": "toolu_1", "name": "counter_tool", "arguments": {"note": "x"}}
    assert (result["status"], result["content"]) == ("ok", "counted")
    second = model.requests[1].body["messages"]
    assert second[-2]["content"][-1]["type"] == "tool_use"
    assert second[-1]["content"][0]["tool_use_id"] == "toolu_1"
    assert second[-1]["content"][0]["content"] == "counted"
    assert events(frames, "turn_finished")[0]["data"]["reason"] == "end_turn"
    await socket.disconnect()


async def test_the_tools_array_is_byte_identical_across_ten_turns_and_cached(
    owner, model, executed
):
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    turns = [await chat(socket, f"message {n}") for n in range(10)]

    arrays = {json.dumps(seen.body["tools"]) for seen in model.requests}
    assert len(arrays) == 1
    fingerprints = {events(t, "turn_started")[0]["data"]["fingerprint"] for t in turns}
    assert len(fingerprints) == 1
    reads = [events(t, "usage")[0]["data"]["cache_read_input_tokens"] for t in turns]
    assert reads[0] == 0
    assert all(read > 0 for read in reads[1:])
    tools = model.requests[0].body["tools"]
    assert [t.get("cache_control") for t in tools].count({"type": "ephemeral"}) == 1
    assert tools[-1]["cache_control"] == {"type": "ephemeral"}
    await socket.disconnect()


async def test_an_intent_in_a_chat_frame_is_merged_stored_and_applies_from_that_turn(
    owner, model, executed
):
    session = await new_session(owner, intent={"web_search": True, "disabled": ["slow"]})
    socket = await open_socket(session.pk, owner)

    await chat(socket, "first")
    await chat(socket, "second", intent={"disabled": ["counter_tool"]})
    await chat(socket, "third")

    first, second, third = (tool_names(seen) for seen in model.requests)
    assert "counter_tool" in first
    assert "slow" not in first
    assert "counter_tool" not in second
    assert "slow" in second
    assert second == third
    session = await reload(session)
    assert session.tool_intent["disabled"] == ["counter_tool"]
    assert session.tool_intent["web_search"] is True
    await socket.disconnect()


async def test_an_intent_changed_during_a_turn_waits_for_the_next_turn(owner, model, executed):
    model.replies.extend(
        [Reply(tool_calls=[("toolu_g", "guarded", {})]), Reply(text="ok"), Reply(text="next")]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go"})
    await until(socket, ("approval_request",))

    await database_sync_to_async(_set_intent)(session, {"disabled": ["counter_tool"]})
    await send(socket, {"type": "approve", "call_id": "toolu_g", "allow": True})
    await until(socket)
    await chat(socket, "again")

    first, same_turn, next_turn = (tool_names(seen) for seen in model.requests)
    assert first == same_turn
    assert "counter_tool" in same_turn
    assert "counter_tool" not in next_turn
    await socket.disconnect()


def _set_intent(session, intent):
    from sessions_app.services import session_update

    session.refresh_from_db()
    session_update(user=session.owner, session=session, version=session.version, intent=intent)


async def test_call_tool_never_changes_the_array_and_unwraps_the_real_tool(owner, model, executed):
    model.replies.extend(
        [
            Reply(tool_calls=[("toolu_s", "tool_search", {"query": "select:deep_lookup"})]),
            Reply(
                tool_calls=[
                    ("toolu_d", "call_tool", {"name": "deep_lookup", "arguments": {"topic": "x"}})
                ]
            ),
            Reply(text="found it"),
        ]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "look it up")

    assert len({json.dumps(seen.body["tools"]) for seen in model.requests}) == 1
    assert "deep_lookup" not in tool_names(model.requests[0])
    assert "deep_lookup" in model.requests[0].body["system"][-1]["text"]
    call = events(frames, "tool_call")[1]["data"]
    assert call == {
        "call_id": "toolu_d",
        "name": "deep_lookup",
        "arguments": {"topic": "x"},
        "via": "call_tool",
    }
    assert executed == ["deep:x"]
    replayed = model.requests[2].body["messages"][-2]["content"][-1]
    assert replayed["name"] == "call_tool"
    session = await reload(session)
    assert session.loaded_tools == ["deep_lookup"]
    await socket.disconnect()


async def test_promote_adds_the_found_schema_to_the_next_request_of_the_turn(
    owner, model, executed
):
    agent = await new_agent(owner, strategy="promote")
    model.replies.extend(
        [
            Reply(tool_calls=[("toolu_s", "tool_search", {"query": "select:deep_lookup"})]),
            Reply(tool_calls=[("toolu_d", "deep_lookup", {"topic": "y"})]),
            Reply(text="ok"),
        ]
    )
    session = await new_session(owner, agent=agent.pk)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "find deep_lookup")

    before, after = tool_names(model.requests[0]), tool_names(model.requests[1])
    assert "deep_lookup" not in before
    assert after == [*before, "deep_lookup"]
    assert executed == ["deep:y"]
    assert (
        events(frames, "usage")[0]["data"]["fingerprint"]
        != events(frames, "usage")[1]["data"]["fingerprint"]
    )
    await socket.disconnect()


async def test_native_sends_deferred_tools_flagged_and_answers_search_with_references(
    owner, model, executed
):
    agent = await new_agent(owner, strategy="native")
    model.replies.extend(
        [
            Reply(tool_calls=[("toolu_s", "tool_search", {"query": "select:deep_lookup"})]),
            Reply(tool_calls=[("toolu_d", "deep_lookup", {"topic": "z"})]),
            Reply(text="ok"),
        ]
    )
    session = await new_session(owner, agent=agent.pk)
    socket = await open_socket(session.pk, owner)

    await chat(socket, "native please")

    tools = {tool["name"]: tool for tool in model.requests[0].body["tools"]}
    assert tools["deep_lookup"]["defer_loading"] is True
    assert "cache_control" not in tools["deep_lookup"]
    marked = [name for name, tool in tools.items() if "cache_control" in tool]
    assert len(marked) == 1
    assert not tools[marked[0]].get("defer_loading")
    assert json.dumps(model.requests[0].body["tools"]) == json.dumps(
        model.requests[1].body["tools"]
    )
    result = model.requests[1].body["messages"][-1]["content"][0]
    assert result["content"][0] == {"type": "tool_reference", "tool_name": "deep_lookup"}
    assert executed == ["deep:z"]
    await socket.disconnect()


async def test_a_finished_turn_is_freed_at_once_leaving_the_collector_nothing_of_ours(
    owner, model, executed
):
    # What a reference cycle holds waits for the garbage collector, whose pass over a
    # loaded server's young objects stalled every socket it serves (toolhub.lib.collector).
    agent = await new_agent(owner, strategy="promote")
    session = await new_session(owner, agent=agent.pk)
    socket = await open_socket(session.pk, owner)
    await chat(socket, "warm up")
    await wait_for_turns()
    gc.collect()
    model.replies.extend(
        [
            Reply(tool_calls=[("toolu_s", "tool_search", {"query": "select:deep_lookup"})]),
            Reply(tool_calls=[("toolu_d", "deep_lookup", {"topic": "y"})]),
            Reply(tool_calls=[("toolu_c", "counter_tool", {"note": "z"})]),
            Reply(text="ok"),
        ]
    )
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        frames = await chat(socket, "look it up, then count")
        await wait_for_turns()
        gc.collect()
        ours = sorted(
            {
                type(garbage).__qualname__
                for garbage in gc.garbage
                if type(garbage).__module__.split(".")[0]
                in {"agent_app", "sessions_app", "profiles_app", "toolhub"}
            }
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert executed == ["deep:y", "counter:z"]
    assert events(frames, "turn_finished")
    assert ours == []
    await socket.disconnect()


async def test_crafted_calls_outside_the_contract_never_run(owner, staff, model, executed):
    await database_sync_to_async(_disable)(staff, "guarded")
    await database_sync_to_async(_profile)(owner, "only-time", ["current_time", "counter_tool"])
    model.replies.extend(
        [
            Reply(
                tool_calls=[
                    ("toolu_1", "guarded", {}),
                    ("toolu_2", "plan_danger", {}),
                    ("toolu_3", "no_such_tool", {"a": 1}),
                    ("toolu_4", "call_tool", {"name": "guarded", "arguments": {}}),
                ]
            ),
            Reply(text="ok"),
        ]
    )
    session = await new_session(owner, intent={"toolset": "only-time"})
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "try them all")

    assert executed == []
    results = [f["data"] for f in events(frames, "tool_result")]
    # A tool a rule removed is vetoed, with the rule; a name no tool has is an error.
    assert [(r["call_id"], r["status"], r["content"]) for r in results] == [
        # The first rule that removed it speaks: the profile, before the operator.
        (
            "toolu_1",
            "vetoed",
            "guarded is not offered in this chat: not in the profile 'only-time'",
        ),
        (
            "toolu_2",
            "vetoed",
            "plan_danger is not offered in this chat: not in the profile 'only-time'",
        ),
        ("toolu_3", "error", "there is no tool named no_such_tool here"),
        ("toolu_4", "error", "there is no tool named call_tool here"),
    ]
    sent = model.requests[1].body["messages"][-1]["content"]
    assert [block["is_error"] for block in sent] == [True] * 4
    await socket.disconnect()


def _disable(staff, tool):
    from profiles_app.services import tool_disable_globally

    tool_disable_globally(user=staff, tool=tool, reason="leaks secrets")


def _profile(user, name, tools):
    from profiles_app.services import profile_create

    profile_create(user=user, name=name, mode="only", tools=tools)


async def test_a_global_disable_made_during_a_turn_vetoes_the_next_execution(
    owner, staff, model, executed
):
    model.replies.extend([Reply(tool_calls=[("toolu_g", "guarded", {})]), Reply(text="ok")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go"})
    await until(socket, ("approval_request",))

    await database_sync_to_async(_disable)(staff, "guarded")
    await send(socket, {"type": "approve", "call_id": "toolu_g", "allow": True})
    frames = await until(socket)

    result = events(frames, "tool_result")[0]["data"]
    assert result["status"] == "vetoed"
    assert "leaks secrets" in result["reason"]
    assert executed == []
    await socket.disconnect()


async def test_the_model_is_told_an_operator_turned_the_tool_off_and_the_card_says_who(
    owner, staff, model, executed
):
    from sessions_app.transcript import session_transcript, transcript_html

    await database_sync_to_async(_disable)(staff, "counter_tool")
    model.replies.extend(
        [
            Reply(tool_calls=[("toolu_d", "counter_tool", {})]),
            Reply(text="An operator turned it off."),
        ]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "count please")

    told = {
        block["tool_use_id"]: block["content"]
        for block in model.requests[1].body["messages"][-1]["content"]
    }
    assert told["toolu_d"] == "counter_tool is turned off by an operator: leaks secrets"
    card = events(frames, "tool_result")[0]["data"]
    assert (card["status"], card["reason"]) == (
        "vetoed",
        "turned off by an operator (ops): leaks secrets",
    )
    transcript = await database_sync_to_async(session_transcript)(session_id=session.pk)
    page = "".join(transcript_html(transcript, session_id=session.pk))
    assert "(turned off by an operator (ops): leaks secrets)" in page
    assert executed == []
    await socket.disconnect()


async def test_a_disable_committed_between_turns_leaves_the_next_turns_array(
    owner, staff, model, executed
):
    model.replies.extend([Reply(text="one"), Reply(text="two")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "first"})
    first = events(await until(socket), "turn_started")[0]["data"]

    # The turn's claim reads the disables' token; this process's copy is older than it.
    await database_sync_to_async(_disable)(staff, "counter_tool")
    await send(socket, {"type": "chat", "text": "second"})
    second = events(await until(socket), "turn_started")[0]["data"]
    await socket.disconnect()

    assert "counter_tool" in first["resident"]
    assert "counter_tool" not in second["resident"]
    assert first["fingerprint"] != second["fingerprint"]


@pytest.mark.parametrize(
    ("answer", "status", "ran"),
    [(True, "ok", ["guarded:a"]), (False, "denied", []), (None, "denied", [])],
    ids=["allow", "deny", "timeout"],
)
async def test_approval_allows_denies_or_times_out(
    owner, model, executed, settings, answer, status, ran
):
    settings.TOOLHUB_APPROVAL_TIMEOUT = 0.5 if answer is None else 30
    model.replies.extend(
        [Reply(tool_calls=[("toolu_g", "guarded", {"target": "a"})]), Reply(text="ok")]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go"})
    request = events(await until(socket, ("approval_request",)), "approval_request")[0]
    assert request["data"] == {
        "call_id": "toolu_g",
        "name": "guarded",
        "arguments": {"target": "a"},
        "policy": {"policy": "ask", "by": "author", "why": "guarded asks before it runs"},
        "chat_allowable": True,
    }

    if answer is not None:
        await send(socket, {"type": "approve", "call_id": "toolu_g", "allow": answer})
    frames = await until(socket)

    result = events(frames, "tool_result")[0]["data"]
    assert result["status"] == status
    assert executed == ran
    if answer is None:
        assert "no answer within" in result["reason"]
    await send(socket, {"type": "approve", "call_id": "toolu_g", "allow": True})
    assert (await receive(socket))["code"] == "unknown_call"
    await socket.disconnect()


async def test_a_calls_duration_is_how_long_it_ran_not_how_long_its_approval_waited(
    owner, model, executed
):
    model.replies.extend(
        [Reply(tool_calls=[("toolu_g", "guarded", {"target": "a"})]), Reply(text="ok")]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "go"})
    await until(socket, ("approval_request",))
    await asyncio.sleep(1.5)  # the person reads the card before allowing it
    await send(socket, {"type": "approve", "call_id": "toolu_g", "allow": True})
    frames = await until(socket)
    await socket.disconnect()

    result = events(frames, "tool_result")[0]["data"]
    assert executed == ["guarded:a"]
    assert result["elapsed_ms"] < 1500


async def test_cancel_mid_stream_closes_the_provider_stream(owner, model):
    hold = threading.Event()
    model.replies.append(Reply(text="one two three four", hold=hold))
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    try:
        await send(socket, {"type": "chat", "text": "talk"})
        await until(socket, ("text_delta",))
        await send(socket, {"type": "cancel"})
        frames = await until(socket)
    finally:
        hold.set()

    assert events(frames, "turn_finished")[0]["data"]["reason"] == "cancelled"
    assert events(frames, "assistant_message")[0]["data"]["text"].startswith("one")
    assert model.wait_for_disconnects(1) >= 1
    await socket.disconnect()


async def test_cancel_mid_tool_stops_it_and_pairs_every_call(owner, model, executed):
    model.replies.append(
        Reply(tool_calls=[("toolu_s", "slow", {}), ("toolu_c", "counter_tool", {})])
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "slow down"})
    await until(socket, ("tool_call",))
    while "slow" not in executed:
        await asyncio.sleep(0.01)

    await send(socket, {"type": "cancel"})
    frames = await until(socket)

    results = {f["data"]["call_id"]: f["data"]["status"] for f in events(frames, "tool_result")}
    assert results == {"toolu_s": "cancelled", "toolu_c": "cancelled"}
    assert executed == ["slow"]
    assert events(frames, "turn_finished")[0]["data"]["reason"] == "cancelled"
    assert len(model.requests) == 1
    await socket.disconnect()


async def test_a_second_chat_while_a_turn_runs_is_refused(owner, model):
    hold = threading.Event()
    model.replies.append(Reply(text="busy busy", hold=hold))
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    try:
        await send(socket, {"type": "chat", "text": "first"})
        await until(socket, ("text_delta",))
        await send(socket, {"type": "chat", "text": "second"})
        error = await receive(socket)
    finally:
        hold.set()

    assert (error["type"], error["code"], error["ref"]) == ("error", "turn_in_progress", "chat")
    await until(socket)
    log = await stored(session.pk)
    assert [e["data"]["text"] for e in log if e["kind"] == "user_message"] == ["first"]
    await socket.disconnect()


async def test_a_dropped_socket_does_not_stop_the_turn_and_resume_replays_exactly_once(
    owner, model
):
    model.replies.append(Reply(text=" ".join(f"w{n}" for n in range(30)), delay=0.03))
    session = await new_session(owner)
    first = await open_socket(session.pk, owner)
    await send(first, {"type": "chat", "text": "long answer"})
    seen = await until(first, ("text_delta",))
    await first.disconnect()

    second = await open_socket(session.pk, owner)
    await send(second, {"type": "resume", "after_seq": seen[-1]["seq"]})
    rest = await until(second)

    seqs = [f["seq"] for f in events(seen + rest)]
    assert seqs == list(range(1, seqs[-1] + 1))
    assert events(rest, "turn_finished")[0]["data"]["reason"] == "end_turn"
    third = await open_socket(session.pk, owner)
    await send(third, {"type": "resume", "after_seq": 0})
    replay = await until(third)
    assert [f["seq"] for f in events(replay)] == seqs
    # A seq past the chat's last event is another chat's, or a client's mistake: said so.
    await send(third, {"type": "resume", "after_seq": 10_000})
    refused = await receive(third)
    assert (refused["code"], refused["ref"]) == ("bad_frame", "resume")
    assert "past this chat's last event" in refused["message"]
    await send(third, {"type": "cancel"})
    assert (await receive(third))["code"] == "no_turn"
    await second.disconnect()
    await third.disconnect()


async def test_a_socket_gets_no_events_before_it_resumes(owner, model):
    session = await new_session(owner)
    watcher = await open_socket(session.pk, owner)
    talker = await open_socket(session.pk, owner)

    await chat(talker, "hello")

    assert await watcher.receive_nothing(timeout=0.3)
    await send(watcher, {"type": "resume", "after_seq": 0})
    assert events(await until(watcher), "user_message")[0]["data"]["text"] == "hello"
    await watcher.disconnect()
    await talker.disconnect()


@pytest.mark.parametrize(
    ("raw", "code", "ref"),
    [
        ("{not json", "bad_json", None),
        ("[1, 2]", "bad_frame", None),
        ('{"text": "no type"}', "bad_frame", None),
        ('{"type": "dance"}', "unknown_type", "dance"),
        ('{"type": "chat"}', "bad_frame", "chat"),
        ('{"type": "chat", "text": "   "}', "bad_frame", "chat"),
        (json.dumps({"type": "chat", "text": "x" * 32_001}), "too_large", "chat"),
        (json.dumps({"type": "chat", "text": "x" * 300_000}), "too_large", None),
        ('{"type": "chat", "text": "hi", "intent": {"colour": 1}}', "invalid_intent", "chat"),
        ('{"type": "chat", "text": "hi", "intent": {"toolset": "nope"}}', "invalid_intent", "chat"),
        ('{"type": "approve", "call_id": 3, "allow": true}', "bad_frame", "approve"),
        ('{"type": "approve", "call_id": "x", "allow": "yes"}', "bad_frame", "approve"),
        ('{"type": "approve", "call_id": "x", "allow": true}', "unknown_call", "approve"),
        ('{"type": "resume", "after_seq": -1}', "bad_frame", "resume"),
        ('{"type": "resume", "after_seq": "3"}', "bad_frame", "resume"),
        ('{"type": "resume", "after_seq": 1.5}', "bad_frame", "resume"),
        (json.dumps({"type": "resume", "after_seq": 10**30}), "bad_frame", "resume"),
        (json.dumps({"type": "resume", "after_seq": 2**63}), "bad_frame", "resume"),
        ('{"type": "resume", "after_seq": 5}', "bad_frame", "resume"),
        ('{"type": "resume", "after_seq": 0, "render": "yes"}', "bad_frame", "resume"),
        ('{"type": "edit", "text": "changed"}', "bad_frame", "edit"),
        ('{"type": "edit", "seq": true, "text": "changed"}', "bad_frame", "edit"),
        ('{"type": "edit", "seq": 1, "text": "  "}', "bad_frame", "edit"),
        ('{"type": "edit", "seq": 1, "text": "x"}', "stale_message", "edit"),
        ('{"type": "regenerate"}', "nothing_to_regenerate", "regenerate"),
        ('{"type": "regenerate", "intent": {"colour": 1}}', "invalid_intent", "regenerate"),
        ('{"type": "cancel"}', "no_turn", "cancel"),
        # An answer never becomes a message of its own: no question waits here.
        ('{"type": "chat", "text": "yes", "answer": true}', "no_question", "chat"),
        ('{"type": "chat", "text": "yes", "answer": "yes"}', "bad_frame", "chat"),
        ('{"type": "chat", "text": "yes", "answer": true, "intent": {}}', "bad_frame", "chat"),
        (
            json.dumps(
                {
                    "type": "chat",
                    "text": "yes",
                    "answer": True,
                    "files": ["00000000-0000-4000-8000-000000000000"],
                }
            ),
            "bad_frame",
            "chat",
        ),
    ],
)
async def test_a_bad_frame_gets_an_error_and_the_socket_stays_usable(owner, model, raw, code, ref):
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    await socket.send_to(text_data=raw)
    error = await receive(socket)

    assert (error["type"], error["code"], error["ref"]) == ("error", code, ref)
    assert error["message"]
    frames = await chat(socket, "still here?")
    assert events(frames, "turn_finished")[0]["data"]["reason"] == "end_turn"
    assert [e["data"]["text"] for e in await stored(session.pk) if e["kind"] == "user_message"] == [
        "still here?"
    ]
    await socket.disconnect()


async def test_a_retryable_provider_error_is_retried_then_succeeds(owner, model):
    model.replies.extend([Reply(status=500), Reply(status=529), Reply(text="recovered")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "try")

    assert len(model.requests) == 3
    assert events(frames, "assistant_message")[0]["data"]["text"] == "recovered"
    assert events(frames, "turn_finished")[0]["data"]["reason"] == "end_turn"
    await socket.disconnect()


async def test_a_rejected_request_fails_the_turn_and_loses_nothing(owner, model):
    model.replies.extend([Reply(status=400, text="bad tools"), Reply(text="second try works")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "first message")

    failed = events(frames, "turn_failed")[0]["data"]
    assert failed["code"] == "provider_rejected"
    assert "bad tools" in failed["message"]
    assert not events(frames, "turn_finished")
    assert len(model.requests) == 1
    await chat(socket, "second message")
    texts = [b["text"] for b in model.requests[1].body["messages"][0]["content"]]
    assert texts == ["first message", "second message"]
    await socket.disconnect()


async def test_a_malformed_stream_fails_the_turn_cleanly(owner, model):
    model.replies.append(Reply(text="half a reply", malformed=True))
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "go")

    assert events(frames)[-1]["kind"] == "turn_failed"
    await socket.disconnect()


async def test_plan_mode_hides_tools_unsafe_in_plan(owner, model, executed):
    session = await new_session(owner, plan_mode=True)
    socket = await open_socket(session.pk, owner)
    model.replies.extend([Reply(tool_calls=[("toolu_p", "plan_danger", {})]), Reply(text="ok")])

    frames = await chat(socket, "plan it")

    assert "plan_danger" not in tool_names(model.requests[0])
    assert "counter_tool" in tool_names(model.requests[0])
    result = events(frames, "tool_result")[0]["data"]
    assert (result["status"], result["content"]) == ("vetoed", "plan_danger is hidden in plan mode")
    assert executed == []
    await socket.disconnect()


async def test_the_demo_model_loads_a_deferred_tool_through_tool_search(owner, settings, executed):
    settings.TOOLHUB_PROVIDER = "demo"
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "please use deep_lookup: otters")

    calls = [f["data"] for f in events(frames, "tool_call")]
    assert [c["name"] for c in calls] == ["tool_search", "deep_lookup"]
    assert calls[0]["arguments"] == {"query": "select:deep_lookup"}
    assert calls[1]["via"] == "call_tool"
    assert executed == ["deep:otters"]
    assert events(frames, "turn_started")[0]["data"]["demo"] is True
    await socket.disconnect()


async def test_after_a_stop_the_demo_answers_the_next_message_not_the_stopped_tool(
    owner, settings, executed
):
    settings.TOOLHUB_PROVIDER = "demo"
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "use slow"})
    while "slow" not in executed:
        await asyncio.sleep(0.01)
    await send(socket, {"type": "cancel"})
    stopped = await until(socket)

    frames = await chat(socket, "what time is it")

    assert events(stopped, "tool_result")[0]["data"]["status"] == "cancelled"
    answer = events(frames, "assistant_message")[0]["data"]["text"]
    assert answer.startswith("You said: *what time is it*")
    assert "reported an error" not in answer
    await socket.disconnect()


async def test_the_demo_model_answers_in_text_and_says_it_is_a_demo(owner, settings):
    settings.TOOLHUB_PROVIDER = "demo"
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "hello there")

    message = events(frames, "assistant_message")[0]["data"]
    assert "demo model" in message["text"]
    assert "<em>hello there</em>" in message["html"]
    assert events(frames, "turn_started")[0]["data"]["provider"] == "demo"
    await socket.disconnect()


async def test_an_attended_turn_asks_the_person_and_takes_the_next_chat_as_the_answer(owner, model):
    model.replies.extend(
        [
            Reply(
                tool_calls=[
                    ("toolu_q", "ask_user_question", {"question": "Colour?", "options": ["red"]})
                ]
            ),
            Reply(text="Blue it is."),
        ]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "pick a colour for me"})
    await until(socket, ("tool_call",))

    await send(socket, {"type": "chat", "text": "blue"})
    frames = await until(socket)

    assert "ask_user_question" in tool_names(model.requests[0])
    result = events(frames, "tool_result")[0]["data"]
    assert (result["status"], result["content"]) == ("ok", "The person answered: blue")
    log = await stored(session.pk)
    assert [e["data"]["text"] for e in log if e["kind"] == "user_message"] == [
        "pick a colour for me"
    ]
    await socket.disconnect()


async def test_an_answer_is_taken_while_the_question_waits_and_refused_once_it_stopped(
    owner, model
):
    ask = ("toolu_q", "ask_user_question", {"question": "Colour?", "options": ["red"]})
    model.replies.extend(
        [Reply(tool_calls=[ask]), Reply(text="Red it is."), Reply(tool_calls=[ask])]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "pick a colour for me"})
    await until(socket, ("tool_call",))

    await send(socket, {"type": "chat", "text": "red", "answer": True})
    frames = await until(socket)
    result = events(frames, "tool_result")[0]["data"]
    assert (result["status"], result["content"]) == ("ok", "The person answered: red")

    # Asked again, then stopped (another tab's Stop) before the answer arrives.
    await send(socket, {"type": "chat", "text": "and another"})
    await until(socket, ("tool_call",))
    await send(socket, {"type": "cancel"})
    await until(socket)
    await send(socket, {"type": "chat", "text": "blue", "answer": True})
    refused = await receive(socket)

    assert (refused["type"], refused["code"], refused["ref"]) == ("error", "no_question", "chat")
    assert "no longer waiting" in refused["message"]
    log = await stored(session.pk)
    assert [e["data"]["text"] for e in log if e["kind"] == "user_message"] == [
        "pick a colour for me",
        "and another",
    ]
    assert len(model.requests) == 3
    await socket.disconnect()


@database_sync_to_async
def _abandon_a_turn(session):
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.eventlog import events_append
    from sessions_app.models import ChatSession

    events_append(
        session_id=session.pk,
        turn="dead-turn",
        items=[
            ("user_message", {"text": "before the crash"}),
            ("tool_call", {"call_id": "toolu_dead", "name": "counter_tool", "arguments": {}}),
        ],
    )
    ChatSession.objects.filter(pk=session.pk).update(
        turn_id="dead-turn", turn_lease=timezone.now() - timedelta(seconds=1)
    )


async def test_a_turn_whose_process_died_is_closed_and_paired_by_the_next_one(
    owner, model, executed
):
    session = await new_session(owner)
    await _abandon_a_turn(session)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "resume", "after_seq": 0})
    await until(socket, ("tool_call",))

    await send(socket, {"type": "chat", "text": "after the crash"})
    frames = await until(socket, ("turn_finished",))

    dead = [f for f in events(frames) if f["turn"] == "dead-turn"]
    assert [(f["kind"], f["data"].get("status")) for f in dead] == [
        ("tool_result", "lost"),
        ("turn_failed", None),
    ]
    sent = model.requests[0].body["messages"]
    assert sent[1]["content"][0]["id"] == "toolu_dead"
    assert sent[2]["content"][0]["tool_use_id"] == "toolu_dead"
    assert sent[2]["content"][0]["is_error"] is True
    assert executed == []
    await socket.disconnect()


async def test_a_model_that_never_stops_calling_tools_ends_at_the_step_limit(
    owner, model, executed, settings
):
    settings.TOOLHUB_MAX_STEPS = 3
    model.responder = lambda body: Reply(
        tool_calls=[(f"toolu_{len(executed)}", "counter_tool", {})]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "loop forever")

    assert events(frames, "turn_finished")[0]["data"]["reason"] == "max_steps"
    assert len(model.requests) == 3
    calls = [f["data"]["call_id"] for f in events(frames, "tool_call")]
    results = [f["data"]["call_id"] for f in events(frames, "tool_result")]
    assert calls == results
    assert len(executed) == 3
    await socket.disconnect()


async def _streaming_slow_tool(owner, model):
    """A turn running ``slow``, and the socket that started it, once its tail arrived."""
    model.replies.extend([Reply(tool_calls=[("toolu_s", "slow", {})]), Reply(text="ok")])
    session = await new_session(owner)
    talker = await open_socket(session.pk, owner)
    await send(talker, {"type": "chat", "text": "work"})
    live = await receive(talker)
    while live["type"] != "tail":
        live = await receive(talker)
    return session, talker, live


async def test_a_socket_that_resumes_during_a_streaming_tool_gets_its_current_tail_once(
    owner, model, executed
):
    session, talker, live = await _streaming_slow_tool(owner, model)

    late = await open_socket(session.pk, owner)
    await send(late, {"type": "resume", "after_seq": 0})
    replay = await until(late, ("usage",))
    tail = await receive(late)
    await send(talker, {"type": "cancel"})
    rest = await until(late)

    assert live["call_id"] == "toolu_s"
    assert live["tail"] == "working...\n"
    assert (tail["type"], tail["call_id"], tail["tail"]) == ("tail", "toolu_s", "working...\n")
    assert tail["bytes_total"] == len("working...\n")
    assert [f["type"] for f in rest].count("tail") == 0
    assert events(replay + rest)[-1]["data"]["reason"] == "cancelled"
    await talker.disconnect()
    await late.disconnect()


async def test_a_tail_is_kept_for_resumes_before_any_socket_can_receive_it(
    owner, model, executed, monkeypatch
):
    import agent_app.turns.tails as tails_module
    from agent_app.turns.loop import on_db_thread
    from sessions_app.models import ChatSession

    sent = tails_module.notify_tail
    kept_when_sent = []

    def readable_now(*, session_id):
        turn_id = ChatSession.objects.get(pk=session_id).turn_id
        return tails_module.running_tails(session_id=session_id, turn_id=turn_id)

    async def watched(session_id, frame):
        # What a socket that resumes the moment this tail reaches another would read.
        kept_when_sent.append(await on_db_thread(readable_now, session_id=session_id))
        await sent(session_id, frame)

    monkeypatch.setattr(tails_module, "notify_tail", watched)
    _, talker, live = await _streaming_slow_tool(owner, model)
    await send(talker, {"type": "cancel"})
    await until(talker)

    assert kept_when_sent == [[live]]
    await talker.disconnect()


async def test_a_socket_sends_each_tail_of_a_call_once_and_never_an_older_one(
    owner, model, executed
):
    def tail_like(live, text, elapsed_ms, call_id="toolu_s"):
        return {**live, "call_id": call_id, "tail": text, "bytes_total": len(text),
                "elapsed_ms": elapsed_ms}  # fmt: skip

    session, talker, live = await _streaming_slow_tool(owner, model)
    late = await open_socket(session.pk, owner)
    await send(late, {"type": "resume", "after_seq": 0})
    replay = await until(late, ("usage",))
    stored = await receive(late)
    older = tail_like(live, "work", 0)
    grown = tail_like(live, "working...\nmore\n", live["elapsed_ms"] + 1000)
    other = tail_like(live, "x", 5, call_id="toolu_other")
    # The live copy of the tail its resume read comes after it, then an older one.
    await _tails_to_group(session.pk, live, older, grown, other)
    sent_live = [await receive(late) for _ in range(2)]
    nothing_more = await late.receive_nothing(timeout=0.3)
    await send(late, {"type": "resume", "after_seq": events(replay)[-1]["seq"]})
    resumed = await receive(late)
    await send(talker, {"type": "cancel"})
    await until(late)

    assert stored == live
    assert sent_live == [grown, other]
    assert nothing_more
    # A resume sends the stored tail again, though this socket had a newer one.
    assert resumed == live
    await talker.disconnect()
    await late.disconnect()


async def _tails_to_group(session_id, *frames):
    """Send ``frames`` to the session's sockets as a pump does."""
    from channels.layers import get_channel_layer

    from agent_app.delivery import session_group

    for frame in frames:
        await get_channel_layer().group_send(
            session_group(session_id), {"type": "session.tail", "frame": frame}
        )


async def test_a_call_id_used_again_in_a_turn_gets_its_own_shorter_tail(owner, model, executed):
    # Providers reuse ids (OpenAI-compatible servers may send none: call_0, call_1, …).
    model.replies.extend(
        [
            Reply(tool_calls=[("call_0", "chatty", {})]),
            Reply(tool_calls=[("call_0", "slow", {})]),
            Reply(text="ok"),
        ]
    )
    session = await new_session(owner)
    talker = await open_socket(session.pk, owner)
    await send(talker, {"type": "chat", "text": "work"})
    tails = []
    while len(tails) < 2:
        frame = await receive(talker)
        if frame["type"] == "tail":
            tails.append(frame)
    await send(talker, {"type": "cancel"})
    await until(talker)

    assert [(t["call_id"], t["tail"]) for t in tails] == [
        ("call_0", "a long line of output, longer than slow's\n"),
        ("call_0", "working...\n"),
    ]
    await talker.disconnect()


async def test_only_the_running_turns_tails_reach_a_socket_that_resumes(owner, model, executed):
    from agent_app.turns.loop import on_db_thread
    from agent_app.turns.tails import _tails_put

    session = await new_session(owner)
    talker = await open_socket(session.pk, owner)
    first = events(await chat(talker, "hello"))
    # As when a turn's process died mid-call: its last tail was never forgotten.
    left = {"type": "tail", "turn": first[-1]["turn"], "call_id": "toolu_s",
            "tail": "a dead turn's output", "bytes_total": 20, "elapsed_ms": 40}  # fmt: skip
    await on_db_thread(
        _tails_put, session_id=session.pk, turn_id=left["turn"], call_id="toolu_s", frame=left
    )
    model.replies.extend([Reply(tool_calls=[("toolu_s", "slow", {})]), Reply(text="ok")])
    await send(talker, {"type": "chat", "text": "work"})
    live = await receive(talker)
    while live["type"] != "tail":
        live = await receive(talker)
    late = await open_socket(session.pk, owner)
    await send(late, {"type": "resume", "after_seq": first[-1]["seq"]})
    await until(late, ("usage",))
    resumed = await receive(late)
    # The dead turn's tail sent live again, as a worker still running its call would.
    await _tails_to_group(session.pk, {**left, "bytes_total": 99})
    nothing_more = await late.receive_nothing(timeout=0.5)
    await send(talker, {"type": "cancel"})
    await until(late)

    assert resumed == live
    assert live["turn"] != left["turn"]
    assert nothing_more
    await talker.disconnect()
    await late.disconnect()


async def test_a_malformed_live_tail_is_dropped_and_the_socket_goes_on(owner, model, executed):
    session, talker, live = await _streaming_slow_tool(owner, model)
    forged = [
        "not a frame",
        ["a", "list"],
        {**live, "call_id": ["unhashable"]},
        {**live, "bytes_total": "99"},
        {**live, "tail": "<script>", "extra": 1},
        {key: value for key, value in live.items() if key != "turn"},
    ]
    await _tails_to_group(session.pk, *forged, {**live, "bytes_total": 99, "tail": "next"})
    after = await receive(talker)
    await send(talker, {"type": "cancel"})
    rest = await until(talker)

    assert (after["type"], after["tail"]) == ("tail", "next")
    assert events(rest)[-1]["data"]["reason"] == "cancelled"
    await talker.disconnect()


async def test_live_events_the_channel_layer_dropped_still_reach_the_socket(
    owner, model, monkeypatch
):
    import agent_app.turns.events as events_module

    sent = events_module.notify_events

    async def lossy(session_id, batch):
        # As when a process's channel-layer inbox is over capacity: the end is dropped.
        if not any(event.kind == "turn_finished" for event in batch):
            await sent(session_id, batch)

    monkeypatch.setattr(events_module, "notify_events", lossy)
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "hello")

    assert events(frames)[-1]["kind"] == "turn_finished"
    assert [f["seq"] for f in events(frames)] == list(range(1, len(events(frames)) + 1))
    await socket.disconnect()


async def test_an_internal_failure_mid_tools_still_pairs_every_announced_call(
    owner, model, executed, monkeypatch
):
    import agent_app.turns.runner as runner

    def broken(**_):
        raise RuntimeError("disables unreadable")

    monkeypatch.setattr(runner, "session_call_rules", broken)
    model.replies.append(
        Reply(tool_calls=[("toolu_a", "counter_tool", {}), ("toolu_b", "counter_tool", {})])
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "count twice")

    results = [f["data"] for f in events(frames, "tool_result")]
    assert [(r["call_id"], r["status"]) for r in results] == [
        ("toolu_a", "error"),
        ("toolu_b", "error"),
    ]
    assert events(frames)[-1]["kind"] == "turn_failed"
    assert events(frames)[-1]["data"]["code"] == "internal"
    assert executed == []
    monkeypatch.undo()
    await chat(socket, "again")
    sent = model.requests[-1].body["messages"]
    assert [b["tool_use_id"] for b in sent[2]["content"] if b["type"] == "tool_result"] == [
        "toolu_a",
        "toolu_b",
    ]
    await socket.disconnect()


async def test_a_resume_past_the_end_replays_nothing_but_still_gets_what_comes_next(owner, model):
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "resume", "after_seq": 10_000})

    frames = await chat(socket, "hello")

    assert [f["seq"] for f in events(frames)] == list(range(1, len(events(frames)) + 1))
    await socket.disconnect()


async def test_a_turn_whose_process_died_is_ended_by_the_reaper_without_a_new_message(
    owner, model, executed
):
    from agent_app.turns import reap_once

    session = await new_session(owner)
    await _abandon_a_turn(session)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "resume", "after_seq": 0})
    await until(socket, ("tool_call",))

    # A round now (this process's own reaper, running since an earlier turn, may be first).
    await reap_once()
    ended = await until(socket, ("turn_failed",))

    dead = events(ended)
    assert [(f["kind"], f["data"].get("status")) for f in dead] == [
        ("tool_result", "lost"),
        ("turn_failed", None),
    ]
    assert dead[-1]["data"]["code"] == "lost"
    frames = await chat(socket, "after the crash")
    assert events(frames)[-1]["data"]["reason"] == "end_turn"
    assert await reap_once() == 0
    await socket.disconnect()


async def _turn_whose_lease_lapsed(owner, model):
    """A turn of this process, held mid-reply, whose lease ran out (a stalled loop: slow,
    not dead). Returns its socket, its session and the event that lets the reply end."""
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.models import ChatSession

    hold = threading.Event()
    model.replies.append(Reply(text="slow words here", hold=hold))
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "chat", "text": "first"})
    await until(socket, ("text_delta",))
    await database_sync_to_async(ChatSession.objects.filter(pk=session.pk).update)(
        turn_lease=timezone.now() - timedelta(seconds=1)
    )
    return socket, session, hold


async def test_the_reaper_never_ends_a_turn_of_its_own_process_whose_lease_lapsed(
    owner, model, executed
):
    from agent_app.turns import reap_once

    socket, _, hold = await _turn_whose_lease_lapsed(owner, model)

    assert await reap_once() == 0
    hold.set()
    frames = await until(socket, ("turn_finished",))
    assert events(frames)[-1]["data"]["reason"] == "end_turn"
    await socket.disconnect()


async def test_a_runner_that_lost_its_claim_stops_writing(owner, model, executed):
    socket, session, hold = await _turn_whose_lease_lapsed(owner, model)

    # Another turn takes the session over.
    await send(socket, {"type": "chat", "text": "second"})
    closed = await until(socket, ("turn_failed",))
    await until(socket, ("turn_started",))
    hold.set()
    frames = await until(socket, ("turn_finished",))
    await asyncio.sleep(0.5)

    log = await stored(session.pk)
    first = [e for e in log if e["turn"] == log[0]["turn"]]
    assert first[-1]["kind"] == "turn_failed"
    assert first[-1]["data"]["code"] == "lost"
    assert events(closed)[-1]["turn"] == log[0]["turn"]
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert events(frames)[-1]["data"]["reason"] == "end_turn"
    await socket.disconnect()


def _system_text(seen) -> str:
    """The agent's own prompt: the first system block (the catalog, when something is
    deferred, is the second)."""
    return seen.body["system"][0]["text"]


async def test_an_edited_agent_reaches_the_very_next_turn(owner, model):
    from profiles_app.services import agent_update

    agent = await new_agent(owner, system_prompt="You are version one.")
    session = await new_session(owner, agent=agent.pk)
    socket = await open_socket(session.pk, owner)
    await chat(socket, "first")

    # Through the service (the version moves) …
    await database_sync_to_async(agent_update)(
        user=owner, agent=agent, version=agent.version, system_prompt="You are version two."
    )
    await chat(socket, "second")
    # … and through a plain save, as the admin does (only the timestamp moves).
    agent = await database_sync_to_async(type(agent).objects.get)(pk=agent.pk)
    agent.system_prompt = "You are version three."
    await database_sync_to_async(agent.save)()
    await chat(socket, "third")

    assert [_system_text(seen) for seen in model.requests] == [
        "You are version one.",
        "You are version two.",
        "You are version three.",
    ]
    await socket.disconnect()


@database_sync_to_async
def _store_elsewhere(session, text):
    """What another server process does: events stored without passing through this
    process's memory of the session."""
    from django.db.models import F

    from sessions_app.models import ChatSession, SessionEvent

    ChatSession.objects.filter(pk=session.pk).update(last_seq=F("last_seq") + 1)
    seq = ChatSession.objects.values_list("last_seq", flat=True).get(pk=session.pk)
    SessionEvent.objects.create(session=session, seq=seq, kind="user_message", data={"text": text})


@database_sync_to_async
def _store_and_roll_back(session, text):
    from django.db import transaction

    from sessions_app.eventlog import events_append

    try:
        with transaction.atomic():
            events_append(session_id=session.pk, turn="", items=[("user_message", {"text": text})])
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass


def _texts(seen) -> list[str]:
    return [
        block.get("text")
        for message in seen.body["messages"]
        for block in message["content"]
        if block.get("type") == "text"
    ]


async def test_the_history_sent_is_the_stored_log_whoever_wrote_it(owner, model):
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await chat(socket, "first")

    await _store_and_roll_back(session, "never stored")
    await _store_elsewhere(session, "stored by another server")
    await chat(socket, "second")

    texts = _texts(model.requests[-1])
    assert "stored by another server" in texts
    assert "never stored" not in texts
    assert texts[-1] == "second"
    await socket.disconnect()


async def test_a_control_message_that_comes_before_its_turn_listens_still_reaches_it():
    from agent_app.turns.control import control_channel, control_send, listen

    channel = await control_channel()
    await control_send(channel, "turn-early", {"type": "turn.cancel"})
    await asyncio.sleep(0.2)

    heard = []
    unlisten = listen("turn-early", heard.append)
    unlisten()

    assert [message["type"] for message in heard] == ["turn.cancel"]


@database_sync_to_async
def _flush_after_losing_the_claim(session):
    from agent_app.turns.claim import LostClaim, persist
    from sessions_app.models import ChatSession, ProviderCall, SessionEvent

    ChatSession.objects.filter(pk=session.pk).update(turn_id="the-new-turn")
    call = {"provider": "anthropic", "model": "m", "fingerprint": "f" * 64}
    with pytest.raises(LostClaim):
        persist(
            session_id=session.pk,
            turn="the-old-turn",
            items=[("usage", {"input_tokens": 1}), ("turn_finished", {"reason": "end_turn"})],
            call=call,
            loaded=["web_fetch"],
            release=True,
        )
    stored = ChatSession.objects.values("last_seq", "turn_id", "loaded_tools").get(pk=session.pk)
    return (
        stored,
        SessionEvent.objects.filter(session=session).count(),
        ProviderCall.objects.filter(session=session).count(),
    )


async def test_a_flush_after_the_claim_was_lost_stores_no_events_no_call_and_no_change(owner):
    session = await new_session(owner)

    stored, events_stored, calls_stored = await _flush_after_losing_the_claim(session)

    assert stored == {"last_seq": 0, "turn_id": "the-new-turn", "loaded_tools": []}
    assert (events_stored, calls_stored) == (0, 0)


async def test_a_cached_tool_runs_once_per_person_for_the_same_call(
    owner, other_user, model, settings, local_http
):
    settings.TOOLHUB_FETCH_ALLOW_PRIVATE = True
    local_http["/news"] = (200, "text/plain; charset=utf-8", b"today's news", {})
    url = f"{local_http.base}/news"

    async def fetch(user, turns: int) -> list[str]:
        contents = []
        session = await new_session(user)
        socket = await open_socket(session.pk, user)
        for n in range(turns):
            model.replies.extend(
                [Reply(tool_calls=[(f"toolu_{n}", "web_fetch", {"url": url})]), Reply(text="ok")]
            )
            frames = await chat(socket, "what's new?")
            result = events(frames, "tool_result")[0]["data"]
            contents.append(result["content"] + (" (cached)" if result.get("cached") else ""))
        await socket.disconnect()
        return contents

    mine = await fetch(owner, 2)
    after_mine = len(local_http.requests)
    theirs = await fetch(other_user, 1)

    assert all("today's news" in content for content in mine + theirs)
    assert [content.endswith("(cached)") for content in mine + theirs] == [False, True, False]
    # The second call of the same person came from the cache; another person's did not.
    assert after_mine == 1
    assert len(local_http.requests) == 2


async def test_a_page_cut_for_the_model_is_kept_whole_for_its_owner_only(
    owner, other_user, model, settings, local_http, api
):
    import re

    settings.TOOLHUB_FETCH_ALLOW_PRIVATE = True
    page = "".join(f"line {n}: {'words ' * 10}\n" for n in range(2_000)).encode()
    local_http["/long"] = (200, "text/plain; charset=utf-8", page, {})
    model.replies.extend(
        [
            Reply(tool_calls=[("toolu_l", "web_fetch", {"url": f"{local_http.base}/long"})]),
            Reply(text="read it"),
        ]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    frames = await chat(socket, "read the long page")
    await socket.disconnect()

    content = events(frames, "tool_result")[0]["data"]["content"]
    assert len(content) < len(page)
    ref = re.search(r"full output: (/api/sessions/\S+/results/\S+/)", content).group(1)
    mine = await database_sync_to_async(lambda: api(owner).get(ref))()
    theirs = await database_sync_to_async(lambda: api(other_user).get(ref))()
    assert mine.status_code == 200
    assert "line 1999:" in mine.json()["text"]
    assert mine.json()["tool"] == "web_fetch"
    assert theirs.status_code == 404


async def test_an_approval_answered_in_one_tab_is_shown_answered_in_the_other_at_once(
    owner, model, executed
):
    model.replies.extend(
        [Reply(tool_calls=[("toolu_g", "guarded", {"target": "a"})]), Reply(text="ok")]
    )
    session = await new_session(owner)
    tabs = [await open_socket(session.pk, owner) for _ in range(2)]
    for tab in tabs:
        await send(tab, {"type": "resume", "after_seq": 0, "render": True})
    await send(tabs[0], {"type": "chat", "text": "go"})
    asked = [events(await until(tab, ("approval_request",)), "approval_request")[0] for tab in tabs]
    assert all('data-approve="allow"' in frame["items"][0][1] for frame in asked)

    await send(tabs[0], {"type": "approve", "call_id": "toolu_g", "allow": True})
    answered = [
        events(await until(tab, ("approval_answered",)), "approval_answered")[0] for tab in tabs
    ]
    await send(tabs[1], {"type": "approve", "call_id": "toolu_g", "allow": False})
    late = await receive(tabs[1])

    for frame in answered:
        assert frame["data"] == {"call_id": "toolu_g", "outcome": "allowed", "allow": True}
        ((card_id, html),) = frame["items"]
        assert card_id == asked[0]["items"][0][0]
        assert "data-approve" not in html
        assert "Allowed by you." in html
    assert (late["code"], late["message"]) == (
        "unknown_call",
        "That call is not waiting for approval any more: it was answered, or its turn ended.",
    )
    for tab in tabs:
        await until(tab)
        await tab.disconnect()
    assert executed == ["guarded:a"]


async def test_a_socket_that_did_not_ask_for_rendered_items_gets_the_events_alone(owner, model):
    model.replies.append(Reply(text="hello"))
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "resume", "after_seq": 0})

    frames = await chat(socket, "hi")

    assert [f["kind"] for f in events(frames)][:2] == ["user_message", "turn_started"]
    assert not any("items" in frame for frame in frames)
    await socket.disconnect()


def _message_texts(messages) -> list[str]:
    return [
        block["text"]
        for message in messages
        for block in message["content"]
        if block.get("type") == "text"
    ]


@database_sync_to_async
def _page_texts(session) -> list[str]:
    from sessions_app.transcript import session_transcript
    from sessions_app.transcript_items import Message

    items = session_transcript(session_id=session.pk).items.values()
    return [item.text for item in items if isinstance(item, Message)]


@database_sync_to_async
def _answer_versions(session) -> list[tuple[int, int] | None]:
    """Each shown turn's answer's version and how many it has ("2/2"), or None."""
    from sessions_app.transcript import session_transcript
    from sessions_app.transcript_items import TurnEnd

    items = session_transcript(session_id=session.pk).items.values()
    return [
        None if end.versions is None else (end.versions.number, end.versions.count)
        for end in items
        if isinstance(end, TurnEnd)
    ]


async def test_regenerate_asks_the_last_message_again_and_keeps_the_answer_it_replaces(
    owner, model
):
    model.replies.extend([Reply(text="A"), Reply(text="B"), Reply(text="C")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await send(socket, {"type": "resume", "after_seq": 0, "render": True})
    await chat(socket, "first")
    asked = events(await chat(socket, "second"), "user_message")[0]

    await send(socket, {"type": "regenerate"})
    frames = await until(socket)

    rewind = events(frames, "rewind")[0]
    # The page drops everything after "to" (the answer being replaced); the question
    # stays where it was and is not stored again: the new answer is a version of B.
    assert rewind["data"] == {"to": asked["seq"]}
    assert events(frames, "user_message") == []
    assert _message_texts(model.requests[2].body["messages"]) == ["first", "A", "second"]
    assert await _page_texts(session) == ["first", "A", "second", "C"]
    assert await _answer_versions(session) == [None, (2, 2)]
    await socket.disconnect()


async def test_an_edited_message_is_sent_again_and_the_conversation_goes_on_from_there(
    owner, model
):
    model.replies.extend([Reply(text="A"), Reply(text="B"), Reply(text="A2"), Reply(text="D")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    first = events(await chat(socket, "first"), "user_message")[0]
    await chat(socket, "second")

    await send(socket, {"type": "edit", "seq": first["seq"], "text": "first, changed"})
    await until(socket)
    await chat(socket, "third")

    assert _message_texts(model.requests[2].body["messages"]) == ["first, changed"]
    assert _message_texts(model.requests[3].body["messages"]) == [
        "first, changed",
        "A2",
        "third",
    ]
    assert await _page_texts(session) == ["first, changed", "A2", "third", "D"]
    await socket.disconnect()


async def test_after_switching_back_to_the_first_version_the_provider_gets_that_branch(
    owner, model
):
    from sessions_app.services import session_branch_switch

    model.replies.extend([Reply(text="A"), Reply(text="B"), Reply(text="A2"), Reply(text="C")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    first = events(await chat(socket, "first"), "user_message")[0]
    await chat(socket, "second")
    await send(socket, {"type": "edit", "seq": first["seq"], "text": "first, changed"})
    edited = events(await until(socket), "user_message")[0]

    await database_sync_to_async(session_branch_switch)(
        session=session, message=edited["seq"], version=first["seq"]
    )
    await chat(socket, "third")

    assert _message_texts(model.requests[3].body["messages"]) == [
        "first",
        "A",
        "second",
        "B",
        "third",
    ]
    assert await _page_texts(session) == ["first", "A", "second", "B", "third", "C"]
    await socket.disconnect()


async def test_an_edit_of_a_message_an_earlier_edit_dropped_is_refused_and_stores_nothing(
    owner, model
):
    model.replies.extend([Reply(text="A"), Reply(text="B"), Reply(text="A2")])
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    first = events(await chat(socket, "first"), "user_message")[0]
    second = events(await chat(socket, "second"), "user_message")[0]
    await send(socket, {"type": "edit", "seq": first["seq"], "text": "first, changed"})
    await until(socket)
    before = await _page_texts(session)

    await send(socket, {"type": "edit", "seq": second["seq"], "text": "second, changed"})
    refused = await receive(socket)

    assert (refused["code"], refused["ref"]) == ("stale_message", "edit")
    assert before == ["first, changed", "A2"]
    assert await _page_texts(session) == before
    assert len(model.requests) == 3
    await socket.disconnect()


@pytest.mark.parametrize("seq", [2, 99], ids=["an answer", "no such message"])
async def test_an_edit_of_anything_but_a_message_in_the_chat_is_refused_and_stores_nothing(
    owner, model, seq
):
    model.replies.append(Reply(text="A"))
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)
    await chat(socket, "first")
    before = await _page_texts(session)

    await send(socket, {"type": "edit", "seq": seq, "text": "changed"})
    refused = await receive(socket)

    assert (refused["code"], refused["ref"]) == ("stale_message", "edit")
    assert await _page_texts(session) == before
    assert len(model.requests) == 1
    await send(socket, {"type": "regenerate", "intent": {"colour": 1}})
    assert (await receive(socket))["code"] == "invalid_intent"
    await socket.disconnect()


async def test_a_real_model_titles_the_chat_after_its_first_answer_unless_renamed(
    owner, model, settings
):
    settings.TOOLHUB_AUTO_TITLES = True
    model.replies.extend(
        [Reply(text="Sea otters use rocks."), Reply(text='"Otter tool use."'), Reply(text="ok")]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    await chat(socket, "how do otters open shellfish? " * 4)
    titled = await until(socket, ("title",))
    await chat(socket, "thanks")

    assert events(titled, "title")[0]["data"] == {"title": "Otter tool use"}
    request = model.requests[1].body
    assert "title" in request["system"][0]["text"]
    assert "tools" not in request
    assert "Sea otters use rocks." in request["messages"][0]["content"][0]["text"]
    assert (await _title(session)) == "Otter tool use"
    # One title, after the first answer only.
    assert len(model.requests) == 3
    await socket.disconnect()


async def test_a_title_whose_live_message_was_dropped_still_reaches_the_open_page(
    owner, model, settings, monkeypatch
):
    """The title comes after the turn's end, so no later event reveals its loss: the turn's
    end says a title follows, and the socket reads the log for it when the stream is quiet."""
    from agent_app import delivery
    from agent_app.turns import titles

    async def dropped(session_id, events) -> None:
        """The channel layer dropping the live message, as it does when a process is behind."""

    monkeypatch.setattr(titles, "notify_events", dropped)
    monkeypatch.setattr(delivery, "CATCH_UP_SECONDS", 0.2)
    settings.TOOLHUB_AUTO_TITLES = True
    # The title is written only once the page has the turn's end.
    written = threading.Event()
    model.replies.extend(
        [Reply(text="Sea otters use rocks."), Reply(text="Otter tool use", hold=written)]
    )
    session = await new_session(owner)
    socket = await open_socket(session.pk, owner)

    (ended,) = events(await chat(socket, "how do otters open shellfish?"), "turn_finished")
    written.set()
    titled = await until(socket, ("title",), timeout=10)

    assert ended["data"] == {"reason": "end_turn", "title_follows": True}
    assert events(titled, "title")[0]["data"] == {"title": "Otter tool use"}
    await socket.disconnect()


@database_sync_to_async
def _title(session) -> str:
    session.refresh_from_db()
    return session.title


@database_sync_to_async
def _provider_gone(agent) -> None:
    from django.db.models import F

    from profiles_app.models import Agent

    # A provider this server no longer has (a row from another deployment), written as
    # every write is, at a new version.
    Agent.objects.filter(pk=agent.pk).update(provider="gone", version=F("version") + 1)


async def test_a_chat_whose_provider_is_gone_fails_saying_so_and_still_keeps_or_refuses_the_frame(
    owner, model
):
    model.replies.append(Reply(text="A"))
    agent = await new_agent(owner)
    session = await new_session(owner, agent=agent.pk)
    socket = await open_socket(session.pk, owner)
    first = events(await chat(socket, "first"), "user_message")[0]
    await _provider_gone(agent)

    failed = await chat(socket, "again", intent={"web_search": False})
    await send(socket, {"type": "edit", "seq": first["seq"] + 1, "text": "not a message"})
    refused = await receive(socket)

    (ended,) = events(failed, "turn_failed")
    assert ended["data"]["code"] == "provider_unknown"
    assert "gone" in ended["data"]["message"]
    # The intent the failed turn's frame carried is kept; a stale edit stores nothing.
    assert (await reload(session)).tool_intent["web_search"] is False
    assert (refused["code"], refused["ref"]) == ("stale_message", "edit")
    assert [e["kind"] for e in await stored(session.pk)][-1] == "turn_failed"
    await socket.disconnect()
