"""Turns started over REST (unattended, channel ``api``), the event log endpoint, and the
OpenAI-compatible provider over real HTTP."""

from __future__ import annotations

import base64
import contextlib
import threading

import pytest

from tests.fakes import FakeOpenAI, Reply
from tests.integration.chat import rest_events_until_done
from toolhub.tools import ToolResult, function
from toolhub.tools.images import ToolImage

pytestmark = pytest.mark.django_db(transaction=True)


def _session(client) -> str:
    response = client.post("/api/sessions/", {}, format="json")
    assert response.status_code == 201
    return response.json()["id"]


def test_a_rest_message_starts_an_unattended_turn_without_ask_user_question(api, owner, model):
    client = api(owner)
    session_id = _session(client)
    model.replies.append(Reply(text="Answered over the API."))

    response = client.post(
        f"/api/sessions/{session_id}/messages/", {"text": "hello api"}, format="json"
    )

    assert response.status_code == 202
    turn = response.json()["turn"]
    events = rest_events_until_done(client, session_id)
    assert {e["turn"] for e in events} == {turn}
    assert [e["kind"] for e in events][-1] == "turn_finished"
    names = [tool["name"] for tool in model.requests[0].body["tools"]]
    assert "ask_user_question" not in names
    assert "read" in names
    started = next(e for e in events if e["kind"] == "turn_started")
    assert "ask_user_question" not in started["data"]["resident"]


def test_a_rest_message_is_refused_while_a_turn_runs_and_for_bad_input(
    api, owner, other_user, model
):
    client = api(owner)
    session_id = _session(client)
    hold = threading.Event()
    model.replies.append(Reply(text="slow answer", hold=hold))
    url = f"/api/sessions/{session_id}/messages/"
    try:
        assert client.post(url, {"text": "first"}, format="json").status_code == 202
        model.wait_for_requests(1)
        busy = client.post(url, {"text": "second"}, format="json")
    finally:
        hold.set()

    assert (busy.status_code, busy.json()["code"]) == (409, "turn_in_progress")
    assert client.post(url, {"text": "x" * 32_001}, format="json").status_code == 400
    assert client.post(url, {"text": 5}, format="json").status_code == 400
    assert api(other_user).post(url, {"text": "hi"}, format="json").status_code == 404
    events = rest_events_until_done(client, session_id)
    assert [e["data"]["text"] for e in events if e["kind"] == "user_message"] == ["first"]


def test_the_openai_provider_runs_a_tool_turn_over_chat_completions(
    api, owner, settings, registry_state
):
    calls = []

    def shout(text: str) -> str:
        """Shout the text.

        Args:
            text: What to shout.
        """
        calls.append(text)
        return text.upper()

    registry_state.register(function(shout, register_globally=False))
    client = api(owner)
    session_id = _session(client)
    with FakeOpenAI(api_key="sk-local") as server:
        settings.TOOLHUB_PROVIDER = "openai"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "sk-local"
        server.replies.extend(
            [Reply(tool_calls=[("call_1", "shout", {"text": "hey"})]), Reply(text="Done.")]
        )
        client.post(f"/api/sessions/{session_id}/messages/", {"text": "shout hey"}, format="json")
        events = rest_events_until_done(client, session_id)

    assert calls == ["hey"]
    result = next(e for e in events if e["kind"] == "tool_result")["data"]
    assert (result["status"], result["content"]) == ("ok", "HEY")
    second = server.requests[1].body["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "shout"
    assert second[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "HEY"}
    usage = next(e for e in events if e["kind"] == "usage")["data"]
    assert usage["input_tokens"] > 0
    assert [e["kind"] for e in events][-1] == "turn_finished"


def test_every_provider_call_is_recorded_with_our_estimate_beside_the_reported_usage(
    api, owner, model
):
    from sessions_app.models import ProviderCall

    client = api(owner)
    session_id = _session(client)
    client.post(f"/api/sessions/{session_id}/messages/", {"text": "count me"}, format="json")
    events = rest_events_until_done(client, session_id)

    call = ProviderCall.objects.get(session_id=session_id)
    usage = next(e for e in events if e["kind"] == "usage")["data"]
    assert call.provider == "anthropic"
    assert call.fingerprint == usage["fingerprint"]
    assert call.input_tokens + call.cache_creation_input_tokens > 0
    assert call.estimated_input_tokens > call.resident_tokens > 0


@pytest.mark.django_db
def test_full_results_are_bounded_per_session_and_in_size(owner, settings):
    from sessions_app.models import FullResult
    from sessions_app.services import PersonalResultStore, session_create

    settings.TOOLHUB_FULL_RESULTS_PER_SESSION = 2
    settings.TOOLHUB_FULL_RESULT_MAX_CHARS = 10
    session = session_create(user=owner)
    store = PersonalResultStore(session.pk)

    refs = [store.put(tool="web_fetch", text=f"page {n} " * 5, ctx=None) for n in range(3)]

    kept = list(FullResult.objects.filter(session=session).order_by("created"))
    assert [str(row.pk) in ref for row, ref in zip(kept, refs[1:], strict=True)] == [True, True]
    assert kept[-1].text.startswith("page 2 pag")
    assert "cut at 10 characters" in kept[-1].text
    assert kept[-1].chars == len("page 2 " * 5)


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_an_image_a_tool_returns_reaches_the_model_as_an_image_and_shows_in_its_card(
    api, owner, model, registry_state, settings, client, provider
):
    def chart() -> ToolResult:
        """Draw the chart."""
        return ToolResult(
            content="the chart", images=(ToolImage("image/png", PNG),), structured={"bars": 3}
        )

    def forged() -> ToolResult:
        """Claim a PNG is a JPEG, past the check a tool's author should have used."""
        return ToolResult(content="forged", images=(ToolImage("image/jpeg", PNG),))

    for fn in (chart, forged):
        registry_state.register(function(fn, register_globally=False))
    session_id = _session(api(owner))
    replies = [
        Reply(tool_calls=[("call_1", "chart", {}), ("call_2", "forged", {})]),
        Reply(text="A chart."),
    ]
    with contextlib.ExitStack() as stack:
        server = model
        if provider == "openai":
            server = stack.enter_context(FakeOpenAI(api_key="sk-local"))
            settings.TOOLHUB_PROVIDER = "openai"
            settings.OPENAI_BASE_URL = f"{server.url}/v1"
            settings.OPENAI_API_KEY = "sk-local"
        server.replies.extend(replies)
        api(owner).post(f"/api/sessions/{session_id}/messages/", {"text": "chart"}, format="json")
        events = rest_events_until_done(api(owner), session_id)

    assert [e["kind"] for e in events][-1] == "turn_finished"
    kept = next(e for e in events if e["kind"] == "tool_result")["data"]
    assert kept["structured"] == {"bars": 3}
    second = server.requests[1].body["messages"]
    if provider == "anthropic":
        chart_result, forged_result = second[-1]["content"]
        assert chart_result["content"][0] == {"type": "text", "text": "the chart"}
        assert chart_result["content"][1]["source"] == {
            "type": "base64",
            "media_type": "image/png",
            "data": PNG,
        }
        # Checked again as it is read: the forged image never reaches the provider.
        assert forged_result["content"] == "forged"
    else:
        assert second[-3:-1] == [
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": "the chart\n[image 1, sent in the next message]",
            },
            {"role": "tool", "tool_call_id": "call_2", "content": "forged"},
        ]
        pictures = second[-1]
        assert pictures["role"] == "user"
        assert pictures["content"][1] == {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{PNG}"},
        }
        assert len(pictures["content"]) == 2
    client.force_login(owner)
    page = client.get(f"/chat/{session_id}/").content.decode()
    assert page.count(f'src="data:image/png;base64,{PNG}"') == 1
    assert 'alt="Image 1 that chart returned"' in page
    assert "data:image/jpeg" not in page
    assert "Structured content" in page
    assert "&quot;bars&quot;: 3" in page


@pytest.mark.parametrize("images", [(), (ToolImage("image/png", PNG),)], ids=["text", "image"])
def test_the_demo_model_quotes_a_tools_text_with_or_without_images(
    api, owner, registry_state, settings, images
):
    def chart() -> ToolResult:
        """Draw the chart."""
        return ToolResult(content="the chart", images=images)

    registry_state.register(function(chart, register_globally=False))
    settings.TOOLHUB_PROVIDER = "demo"
    client = api(owner)
    session_id = _session(client)

    client.post(f"/api/sessions/{session_id}/messages/", {"text": "use chart"}, format="json")
    events = rest_events_until_done(client, session_id)

    assert [e["kind"] for e in events][-1] == "turn_finished"
    said = [e["data"]["text"] for e in events if e["kind"] == "assistant_message"]
    assert said[-1] == "The tool returned: ` the chart `\n"
