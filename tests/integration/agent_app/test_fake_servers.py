"""The fake LLM servers speak the real wire formats: the real `anthropic` SDK and a plain
`httpx` client talk to them over loopback HTTP and parse every event, error and usage field."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import anthropic
import httpx
import pytest

from tests.fakes import FakeAnthropic, FakeOpenAI, Reply

MODEL = "claude-fake-1"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def anthropic_server():
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def claude(anthropic_server):
    # A timeout, so a fake that stops answering fails the test instead of hanging it.
    async with anthropic.AsyncAnthropic(
        base_url=anthropic_server.url, api_key="test", max_retries=0, timeout=10
    ) as client:
        yield client


@pytest.fixture
def openai_server():
    with FakeOpenAI() as server:
        yield server


def _tools(*names: str) -> list[dict[str, Any]]:
    """Tools in the given order, with the cache breakpoint on the last one."""
    tools = [
        {
            "name": name,
            "description": f"The {name} tool, described at length. " * 20,
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
        for name in names
    ]
    tools[-1]["cache_control"] = {"type": "ephemeral"}
    return tools


async def _usage(client: anthropic.AsyncAnthropic, **request: Any) -> anthropic.types.Usage:
    message = await client.messages.create(model=MODEL, max_tokens=64, **request)
    return message.usage


async def test_sdk_streams_text_word_by_word_and_assembles_the_final_message(
    anthropic_server, claude
):
    anthropic_server.replies.append(Reply(text="hello big world", usage_output=7))

    async with claude.messages.stream(model=MODEL, max_tokens=64, messages=HELLO) as stream:
        pieces = [piece async for piece in stream.text_stream]
        message = await stream.get_final_message()

    assert pieces == ["hello ", "big ", "world"]
    assert message.id == "msg_1"
    assert message.content[0].text == "hello big world"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 7
    assert message.usage.input_tokens > 0
    assert message.usage.cache_read_input_tokens == 0


async def test_sdk_assembles_a_streamed_tool_use_into_its_input_dict(anthropic_server, claude):
    tool_input = {"path": "notes/today.md", "lines": [1, 2, 3], "follow": True}
    anthropic_server.replies.append(
        Reply(text="Reading it.", tool_calls=[("toolu_1", "read_file", tool_input)])
    )

    async with claude.messages.stream(model=MODEL, max_tokens=64, messages=HELLO) as stream:
        message = await stream.get_final_message()

    text, tool_use = message.content
    assert text.text == "Reading it."
    assert (tool_use.type, tool_use.id, tool_use.name) == ("tool_use", "toolu_1", "read_file")
    assert tool_use.input == tool_input
    assert message.stop_reason == "tool_use"


async def test_raw_stream_events_parse_as_the_sdk_event_types(anthropic_server, claude):
    anthropic_server.replies.append(Reply(text="a b", tool_calls=[("toolu_9", "noop", {})]))

    stream = await claude.messages.create(model=MODEL, max_tokens=64, messages=HELLO, stream=True)
    events = [event async for event in stream]

    # The SDK drops `ping`; a tool's input arrives as an empty piece and then 2+ pieces.
    assert [event.type for event in events] == [
        "message_start",
        *["content_block_start", "content_block_delta", "content_block_delta"],
        "content_block_stop",
        *["content_block_start", *["content_block_delta"] * 3, "content_block_stop"],
        "message_delta",
        "message_stop",
    ]
    assert isinstance(events[0], anthropic.types.RawMessageStartEvent)
    assert events[0].message.stop_reason is None
    assert events[-2].delta.stop_reason == "tool_use"
    partial = "".join(
        event.delta.partial_json
        for event in events
        if event.type == "content_block_delta" and event.delta.type == "input_json_delta"
    )
    assert partial == "{}"


async def test_beta_stream_sends_its_betas_header_and_parses(anthropic_server, claude):
    deferred = {**_tools("grep")[0], "defer_loading": True}
    anthropic_server.replies.append(Reply(tool_calls=[("toolu_2", "grep", {"pattern": "x"})]))

    stream = await claude.beta.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=HELLO,
        tools=[deferred],
        stream=True,
        betas=["fake-beta-2025-01-01"],
    )
    events = [event async for event in stream]

    seen = anthropic_server.requests[-1]
    assert seen.path == "/v1/messages"
    assert seen.headers["anthropic-beta"] == "fake-beta-2025-01-01"
    assert seen.body["tools"][0]["defer_loading"] is True
    assert events[-1].type == "message_stop"


async def test_non_streaming_create_returns_a_message_whose_usage_adds_up_to_count_tokens(
    anthropic_server, claude
):
    anthropic_server.replies.append(Reply(tool_calls=[("toolu_3", "clock", {"tz": "UTC"})]))
    request = {"messages": HELLO, "tools": _tools("clock"), "system": "Be brief."}

    message = await claude.messages.create(model=MODEL, max_tokens=64, **request)
    counted = await claude.messages.count_tokens(model=MODEL, **request)

    assert message.content[0].input == {"tz": "UTC"}
    usage = message.usage
    total = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
    assert total == counted.input_tokens


async def test_identical_request_with_a_cached_last_tool_reads_the_cache_the_second_time(claude):
    request = {"messages": HELLO, "tools": _tools("read", "write")}

    first = await _usage(claude, **request)
    second = await _usage(claude, **request)

    assert first.cache_creation_input_tokens > 0
    assert first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0
    assert second.input_tokens == first.input_tokens


async def test_reordered_tools_miss_the_cache(claude):
    await _usage(claude, messages=HELLO, tools=_tools("read", "write"))

    reordered = await _usage(claude, messages=HELLO, tools=_tools("write", "read"))

    assert reordered.cache_read_input_tokens == 0
    assert reordered.cache_creation_input_tokens > 0


@pytest.mark.parametrize(("lookback_blocks", "reads"), [(20, True), (1, False)])
async def test_next_turn_reads_the_prefix_the_previous_turn_wrote_within_the_lookback(
    anthropic_server, claude, lookback_blocks, reads
):
    anthropic_server.lookback_blocks = lookback_blocks
    breakpoint = {"cache_control": {"type": "ephemeral"}}
    question = {"type": "text", "text": "What changed? " * 50}
    turn_one = [{"role": "user", "content": [{**question, **breakpoint}]}]
    turn_two = [
        {"role": "user", "content": [question]},
        {"role": "assistant", "content": "Nothing."},
        {"role": "user", "content": [{"type": "text", "text": "Sure?", **breakpoint}]},
    ]

    first = await _usage(claude, system="Be brief.", messages=turn_one)
    second = await _usage(claude, system="Be brief.", messages=turn_two)

    # Moving the breakpoint forward leaves the earlier prefix byte-identical; the API finds
    # it by looking back from the new breakpoint, two blocks here.
    expected_read = first.cache_creation_input_tokens if reads else 0
    assert second.cache_read_input_tokens == expected_read
    assert second.cache_creation_input_tokens > 0


@pytest.mark.parametrize(
    ("status", "error_class", "error_type"),
    [
        (400, anthropic.BadRequestError, "invalid_request_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
async def test_error_replies_raise_the_sdk_error_for_their_status(
    anthropic_server, claude, status, error_class, error_type
):
    anthropic_server.replies.append(Reply(status=status, text="scripted failure"))

    with pytest.raises(error_class) as raised:
        async with claude.messages.stream(model=MODEL, max_tokens=64, messages=HELLO) as stream:
            await stream.get_final_message()

    assert raised.value.status_code == status
    assert raised.value.body["error"] == {"type": error_type, "message": "scripted failure"}


async def test_request_without_credentials_is_refused_with_an_anthropic_error(
    anthropic_server,
):
    body = {"model": MODEL, "max_tokens": 64, "messages": HELLO}
    async with httpx.AsyncClient(base_url=anthropic_server.url, timeout=10) as client:
        response = await client.post("/v1/messages", json=body)

    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert not anthropic_server.replies


async def test_hold_keeps_the_stream_open_until_the_event_is_set(anthropic_server, claude):
    hold = threading.Event()
    anthropic_server.replies.append(Reply(text="one two three", hold=hold))

    async with claude.messages.stream(model=MODEL, max_tokens=64, messages=HELLO) as stream:
        pieces = stream.text_stream
        # The first delta reaches the client while the server is parked on the hold.
        first = await anext(pieces)
        hold.set()
        rest = [piece async for piece in pieces]

    assert [first, *rest] == ["one ", "two ", "three"]
    assert anthropic_server.disconnects == 0


async def test_client_closing_a_held_stream_counts_as_a_disconnect(anthropic_server, claude):
    hold = threading.Event()
    anthropic_server.replies.append(Reply(text="one two three", hold=hold))

    async with claude.messages.stream(model=MODEL, max_tokens=64, messages=HELLO) as stream:
        assert await anext(stream.text_stream) == "one "

    assert await asyncio.to_thread(anthropic_server.wait_for_disconnects, 1) == 1
    assert not hold.is_set()


async def test_malformed_event_fails_the_sdk_stream_after_the_first_delta(anthropic_server, claude):
    anthropic_server.replies.append(Reply(text="one two three", malformed=True))
    received = []

    async def read_all() -> None:
        async with claude.messages.stream(model=MODEL, max_tokens=64, messages=HELLO) as stream:
            async for piece in stream.text_stream:
                received.append(piece)

    # The SDK raises the JSON decoder's error, not an APIError, for an unparsable event.
    with pytest.raises(json.JSONDecodeError):
        await read_all()

    assert received == ["one "]


async def test_requests_are_recorded_and_the_responder_answers_once_replies_run_out(
    anthropic_server, claude
):
    anthropic_server.replies.append(Reply(text="scripted"))
    anthropic_server.responder = lambda body: Reply(text=f"echo {body['messages'][-1]['content']}")

    first = await claude.messages.create(model=MODEL, max_tokens=64, messages=HELLO)
    second = await claude.messages.create(model=MODEL, max_tokens=64, messages=HELLO)

    assert [first.content[0].text, second.content[0].text] == ["scripted", "echo hello"]
    seen = anthropic_server.wait_for_requests(2)
    assert [request.body["messages"] for request in seen] == [HELLO, HELLO]
    assert seen[0].headers["authorization"] == "Bearer test"
    assert json.loads(seen[0].raw) == seen[0].body


async def _openai_events(url: str, body: dict[str, Any], **headers: str) -> list[Any]:
    events = []
    async with (
        httpx.AsyncClient(timeout=10) as client,
        client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def test_openai_stream_carries_text_tool_call_pieces_usage_and_done(openai_server):
    arguments = {"city": "Paris", "days": 3}
    openai_server.replies.append(
        Reply(text="Let me look.", tool_calls=[("call_1", "forecast", arguments)])
    )
    body = {
        "model": "gpt-fake",
        "messages": HELLO,
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    events = await _openai_events(openai_server.url, body)

    assert events[-1] == "[DONE]"
    *chunks, usage_chunk, _ = events
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    assert deltas[0]["role"] == "assistant"
    assert "".join(delta.get("content") or "" for delta in deltas) == "Let me look."
    calls = [call for delta in deltas for call in delta.get("tool_calls", [])]
    assert calls[0] == {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "forecast", "arguments": ""},
    }
    assert all(set(call) == {"index", "function"} for call in calls[1:])
    assert len(calls[1:]) >= 2
    assert json.loads("".join(call["function"]["arguments"] for call in calls)) == arguments
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


async def test_openai_without_include_usage_sends_no_usage_chunk(openai_server):
    openai_server.replies.append(Reply(text="hi there"))

    events = await _openai_events(
        openai_server.url, {"model": "gpt-fake", "messages": HELLO, "stream": True}
    )

    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in event for event in events[:-1])


async def test_openai_checks_the_bearer_key_only_when_one_is_set():
    with FakeOpenAI(api_key="sk-right") as server:
        server.replies.append(Reply(tool_calls=[("call_7", "clock", {"tz": "UTC"})]))
        body = {"model": "gpt-fake", "messages": HELLO}
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            wrong = await client.post(
                "/v1/chat/completions", json=body, headers={"Authorization": "Bearer sk-wrong"}
            )
            right = await client.post(
                "/v1/chat/completions", json=body, headers={"Authorization": "Bearer sk-right"}
            )

    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    completion = right.json()
    assert completion["object"] == "chat.completion"
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert (call["id"], call["function"]["name"]) == ("call_7", "clock")
    assert json.loads(call["function"]["arguments"]) == {"tz": "UTC"}


async def test_openai_error_reply_has_the_openai_error_shape_and_no_stream(openai_server):
    openai_server.replies.append(Reply(status=500, text="boom"))
    body = {"model": "gpt-fake", "messages": HELLO, "stream": True}

    async with httpx.AsyncClient(base_url=openai_server.url, timeout=10) as client:
        response = await client.post("/v1/chat/completions", json=body)

    assert response.status_code == 500
    assert response.json() == {
        "error": {"message": "boom", "type": "server_error", "param": None, "code": None}
    }
