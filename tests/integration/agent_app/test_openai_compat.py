"""The OpenAI-compatible provider against what real compatible servers do (each a mode of
the fake, tests/fakes/openai_server.py; llama-cpp-python's server does all of them: README,
"The OpenAI-compatible path against a real server").

Turns go over REST (unattended) to the fake over real HTTP; the test reads the stored
events and what the server was sent.
"""

from __future__ import annotations

import time

import pytest

from sessions_app.models import ProviderCall
from tests.fakes import FakeOpenAI, Reply
from toolhub.tools import function

pytestmark = pytest.mark.django_db(transaction=True)


def _clock() -> str:
    """The time now."""
    return "12:00"


@pytest.fixture
def compatible(settings, registry_state):
    """Start a fake compatible server in a mode; the chat's provider is it."""
    registry_state.register(function(_clock, name="current_time_x", register_globally=False))
    started = []

    def start(**mode) -> FakeOpenAI:
        server = FakeOpenAI(**mode).__enter__()
        started.append(server)
        settings.TOOLHUB_PROVIDER = "openai"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = ""
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)


def _turn(client, text: str = "what time is it") -> list[dict]:
    session = client.post("/api/sessions/", {}, format="json").json()["id"]
    assert (
        client.post(f"/api/sessions/{session}/messages/", {"text": text}, format="json").status_code
        == 202
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events = client.get(f"/api/sessions/{session}/events/?after=0").json()["events"]
        if any(e["kind"] in ("turn_finished", "turn_failed") for e in events):
            return events
        time.sleep(0.05)
    raise AssertionError("the turn did not end")


def _kinds(events: list[dict], kind: str) -> list[dict]:
    return [event["data"] for event in events if event["kind"] == kind]


def test_a_server_that_repeats_the_call_name_and_refuses_null_content_runs_the_tool(
    api, owner, compatible
):
    server = compatible(repeat_call_head=True, refuse_null_content=True)
    server.replies.extend(
        [Reply(tool_calls=[("call_1", "current_time_x", {})]), Reply(text="Noon.")]
    )

    events = _turn(api(owner))

    (call,) = _kinds(events, "tool_call")
    (result,) = _kinds(events, "tool_result")
    assert call["name"] == "current_time_x"
    assert (result["status"], result["content"]) == ("ok", "12:00")
    assert _kinds(events, "turn_finished")
    # The request after the call carried the assistant's message with "", not null.
    assistant = next(m for m in server.requests[1].body["messages"] if m["role"] == "assistant")
    assert assistant["content"] == ""
    assert assistant["tool_calls"][0]["function"]["name"] == "current_time_x"


@pytest.mark.parametrize(
    ("reply", "code", "said"),
    [
        (
            Reply(text="The answer is", stream_error="Requested tokens (4486) exceed context"),
            "provider_stream_error",
            "Requested tokens (4486) exceed context",
        ),
        (Reply(text="The answer is", cut=True), "provider_cut", "before it was finished"),
    ],
    ids=["error in the stream", "stream cut"],
)
def test_an_answer_the_server_broke_off_ends_the_turn_with_an_error_and_keeps_the_text(
    api, owner, compatible, reply, code, said
):
    server = compatible()
    server.replies.append(reply)

    events = _turn(api(owner))

    (failed,) = _kinds(events, "turn_failed")
    assert failed["code"] == code
    assert said in failed["message"]
    assert not _kinds(events, "turn_finished")
    assert "".join(d["text"] for d in _kinds(events, "text_delta")) == "The answer is"


def test_a_server_that_sends_no_usage_gets_an_estimate_marked_as_such(api, owner, compatible):
    server = compatible(ignore_stream_options=True)
    server.replies.append(Reply(text="Counted by toolhub, not by the server."))

    events = _turn(api(owner))

    (usage,) = _kinds(events, "usage")
    assert usage["estimated"] is True
    assert usage["input_tokens"] > 100
    assert usage["output_tokens"] > 5
    assert ProviderCall.objects.get().usage_estimated is True
    # It was asked for usage, as every request asks; this server ignores the option.
    assert server.requests[0].body["stream_options"] == {"include_usage": True}


def test_an_error_body_shaped_detail_is_read(api, owner, compatible):
    server = compatible(error_shape="detail")
    server.replies.append(Reply(status=401, text="Invalid API key for this server"))

    events = _turn(api(owner))

    (failed,) = _kinds(events, "turn_failed")
    assert failed["message"] == "HTTP 401: Invalid API key for this server"
