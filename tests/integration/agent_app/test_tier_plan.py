"""The tier plan is decided once per session and kept: an edit of the agent's intent
rebuilds it once, a tool registered later arrives deferred, and only the explicit reset
(API and the inspector's button) decides again, from the person's usage counts."""

from __future__ import annotations

import time

import pytest

from toolhub.tools import function
from toolhub.tools.catalog import smallest_tokens
from toolhub.tools.resolve import CALL_TOOL
from toolhub.tools.wire import array_frame_tokens, tool_tokens

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = ("t_a", "t_b", "t_c", "t_d", "t_e", "t_f")


def _same_size(ref: str) -> str:
    """Fetch a record of the lab by its reference, with its samples, its instruments and
    the notes its technicians wrote, as the lab's records system keeps them.

    Args:
        ref: The record's reference, as printed on the sample's label.
    """
    return f"record {ref}"


@pytest.fixture
def test_tools(registry_state):
    tools = [function(_same_size, name=name, register_globally=False) for name in NAMES]
    for tool in tools:
        registry_state.register(tool)
    return registry_state


def _two_fit(registry) -> int:
    """A budget that holds the array's frame, the meta tools and two of the test tools,
    and the room the catalog needs at the least (toolhub.tools.catalog)."""
    meta = tool_tokens(registry.get("tool_search")) + tool_tokens(CALL_TOOL)
    catalog = smallest_tokens([registry.get(name) for name in NAMES])
    return array_frame_tokens() + meta + 2 * tool_tokens(registry.get("t_a")) + catalog + 3


def _agent(owner, registry, picked=NAMES):
    from profiles_app.models import Agent

    return Agent.objects.create(
        owner=owner,
        name="lab",
        provider="anthropic",
        tier_budget=_two_fit(registry),
        tool_intent={"picked": list(picked)},
    )


def _session(client, agent) -> str:
    response = client.post("/api/sessions/", {"agent": agent.pk}, format="json")
    assert response.status_code == 201
    return response.json()["id"]


def _turn(client, session_id: str) -> dict:
    """One REST turn to its end; its turn_started data."""
    after = client.get(f"/api/sessions/{session_id}/events/?after=0").json()["events"]
    start = after[-1]["seq"] if after else 0
    assert (
        client.post(
            f"/api/sessions/{session_id}/messages/", {"text": "hi"}, format="json"
        ).status_code
        == 202
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events = client.get(f"/api/sessions/{session_id}/events/?after={start}").json()["events"]
        if events and events[-1]["kind"] in ("turn_finished", "turn_failed"):
            return next(e["data"] for e in events if e["kind"] == "turn_started")
        time.sleep(0.05)
    raise AssertionError("the turn did not end")


def _stored_tiers(session_id: str) -> dict:
    from sessions_app.models import ChatSession

    return ChatSession.objects.get(pk=session_id).tier_plan["tiers"]


def _lab_resident(started: dict) -> list[str]:
    return [name for name in started["resident"] if name.startswith("t_")]


def test_an_agent_intent_edit_rebuilds_the_plan_once_and_a_later_tool_arrives_deferred(
    api, owner, model, test_tools
):
    client = api(owner)
    agent = _agent(owner, test_tools)
    session_id = _session(client, agent)

    first = _turn(client, session_id)
    # Over budget, the least used go first, ties by name: only t_e and t_f stay.
    assert _lab_resident(first) == ["t_e", "t_f"]
    assert {name: _stored_tiers(session_id)[name] for name in NAMES} == {
        **dict.fromkeys(NAMES[:4], "listed"),
        "t_e": "core",
        "t_f": "core",
    }

    agent.tool_intent = {"picked": [*NAMES, "t_new"]}
    agent.save()
    rebuilt = _turn(client, session_id)
    kept_after_rebuild = _stored_tiers(session_id)
    test_tools.register(function(_same_size, name="t_new", register_globally=False))
    later = _turn(client, session_id)

    assert _lab_resident(rebuilt) == ["t_e", "t_f"]
    # The rebuilt plan was stored, so the next turn keeps it: the new tool is deferred,
    # and the array (what heads the prompt cache) did not change.
    assert later["fingerprint"] == rebuilt["fingerprint"]
    assert "t_new" not in later["resident"]
    # Not in the stored plan either, so the catalog neither names nor counts it until
    # the plan is made again (toolhub.tools.catalog); the toolset says it is deferred.
    assert "t_new" not in _stored_tiers(session_id)
    assert {n: _stored_tiers(session_id)[n] for n in NAMES} == {
        n: kept_after_rebuild[n] for n in NAMES
    }
    shown = client.get(f"/api/sessions/{session_id}/toolset/").json()
    assert {"name": "t_new", "tier": "deferred"} in shown["catalog"]


def _use(owner, name: str, times: int) -> None:
    """Record past calls of ``name`` in another of the person's chats."""
    from profiles_app.models import Agent
    from sessions_app.models import ChatSession, SessionEvent

    agent = Agent.objects.filter(owner=owner).first()
    other = ChatSession.objects.create(owner=owner, title="earlier", agent=agent)
    for seq in range(1, times + 1):
        SessionEvent.objects.create(
            session=other, seq=seq, turn="t", kind="tool_call", data={"name": name}
        )


def test_the_reset_rebuilds_the_plan_from_usage_counts_and_keeps_it(
    api, owner, other_user, model, test_tools
):
    client = api(owner)
    session_id = _session(client, _agent(owner, test_tools))
    _turn(client, session_id)
    _use(owner, "t_a", 5)

    before = client.get(f"/api/sessions/{session_id}/toolset/").json()
    reset = client.post(f"/api/sessions/{session_id}/toolset/reset/")
    after = _turn(client, session_id)

    # Usage since the plan was made changes nothing until the reset.
    assert "t_a" not in [tool["name"] for tool in before["resident"]]
    assert reset.status_code == 200
    resident = [tool["name"] for tool in reset.json()["resident"]]
    assert [name for name in resident if name.startswith("t_")] == ["t_a", "t_f"]
    assert _stored_tiers(session_id)["t_a"] == "core"
    assert _lab_resident(after) == [name for name in resident if name.startswith("t_")]
    assert reset.json()["fingerprint"] == after["fingerprint"]
    refused = api(other_user).post(f"/api/sessions/{session_id}/toolset/reset/")
    assert refused.status_code == 404


def test_the_inspector_button_rebuilds_the_tiers_and_says_so(
    client, owner, password, model, test_tools
):
    from sessions_app.models import ChatSession

    session = ChatSession.objects.create(owner=owner, title="lab", agent=_agent(owner, test_tools))
    client.login(username=owner.username, password=password)
    url = f"/chat/{session.pk}/inspector/reset/"

    page = client.get(f"/chat/{session.pk}/inspector/")
    _use(owner, "t_b", 3)
    pressed = client.post(url, HTTP_HX_REQUEST="true")
    without_js = client.post(url)

    assert b"Decide again what is sent every time" in page.content
    assert pressed.status_code == 200
    assert b"Decided again from how often you use each tool" in pressed.content
    assert ChatSession.objects.get(pk=session.pk).tier_plan["tiers"]["t_b"] == "core"
    assert (without_js.status_code, without_js["Location"]) == (302, f"/chat/{session.pk}/")


def test_a_reset_keeps_the_strategy_the_turn_uses_so_the_turn_does_not_rebuild_it(
    api, owner, settings, test_tools
):
    from profiles_app.models import Agent
    from sessions_app.models import ChatSession
    from tests.fakes import FakeOpenAI, Reply

    agent = _agent(owner, test_tools)
    # OpenAI cannot carry deferred tools: its turns fall back from native to call_tool.
    Agent.objects.filter(pk=agent.pk).update(provider="openai", strategy="native")
    client = api(owner)
    session_id = _session(client, agent)
    with FakeOpenAI() as server:
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        server.replies.append(Reply(text="ok"))
        reset = client.post(f"/api/sessions/{session_id}/toolset/reset/").json()
        plan = ChatSession.objects.get(pk=session_id).tier_plan
        started = _turn(client, session_id)

    assert reset["strategy"] == started["strategy"] == "call_tool"
    assert started["fingerprint"] == reset["fingerprint"]
    assert ChatSession.objects.get(pk=session_id).tier_plan == plan


def test_before_its_first_turn_a_chat_shows_the_tiers_of_the_usage_counted_at_each_look(
    api, owner, test_tools
):
    from sessions_app.models import ChatSession

    client = api(owner)
    session_id = _session(client, _agent(owner, test_tools))

    def resident() -> list[str]:
        shown = client.get(f"/api/sessions/{session_id}/toolset/").json()
        return [tool["name"] for tool in shown["resident"] if tool["name"].startswith("t_")]

    before = resident()
    _use(owner, "t_a", 5)
    after = resident()

    assert before == ["t_e", "t_f"]
    # No plan is kept yet, so each look makes one from the counts as they are then.
    assert after == ["t_a", "t_f"]
    assert ChatSession.objects.get(pk=session_id).tier_plan is None
