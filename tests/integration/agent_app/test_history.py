"""The provider conversation rebuilt from stored events."""

from __future__ import annotations

from agent_app.history import messages_from_events


def test_calls_replay_as_stored_and_results_follow_them():
    events = [
        ("user_message", {"text": "find it"}),
        ("assistant_message", {"text": "Looking."}),
        ("tool_call", {"call_id": "a", "name": "deep", "arguments": {"q": 1}, "via": "call_tool"}),
        ("tool_result", {"call_id": "a", "name": "deep", "status": "vetoed", "content": "no"}),
        ("assistant_message", {"text": "Done."}),
    ]

    messages = messages_from_events(events)

    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    call = messages[1]["content"][1]
    assert call == {
        "type": "tool_use",
        "id": "a",
        "name": "call_tool",
        "input": {"name": "deep", "arguments": {"q": 1}},
    }
    assert messages[2]["content"][0]["is_error"] is True


def test_a_call_the_log_never_answered_gets_an_error_result_before_the_next_message():
    events = [
        ("user_message", {"text": "go"}),
        ("tool_call", {"call_id": "lost", "name": "bash", "arguments": {}}),
        ("user_message", {"text": "hello again"}),
    ]

    messages = messages_from_events(events)

    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    result, text = messages[2]["content"]
    assert (result["tool_use_id"], result["is_error"]) == ("lost", True)
    assert text == {"type": "text", "text": "hello again"}


def test_native_references_replay_only_for_tools_the_request_carries():
    events = [
        ("user_message", {"text": "load"}),
        ("tool_call", {"call_id": "s", "name": "tool_search", "arguments": {"query": "x"}}),
        (
            "tool_result",
            {
                "call_id": "s",
                "name": "tool_search",
                "status": "ok",
                "content": "{...}",
                "references": ["kept", "gone"],
            },
        ),
    ]

    messages = messages_from_events(events, native=True, loadable=frozenset({"kept"}))

    assert messages[-1]["content"][0]["content"] == [
        {"type": "tool_reference", "tool_name": "kept"}
    ]
