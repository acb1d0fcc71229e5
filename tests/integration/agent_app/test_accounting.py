"""What is counted is what is sent, and the inspector shows what the next turn sends.

Turns run over REST against the fake Anthropic and OpenAI servers, through the real
anthropic SDK and httpx. Each request the fake received is read back from its raw bytes:
the tools array is cut out of the body exactly, its tokens are counted with tiktoken, and
compared with what the turn recorded (``usage``) and what the inspector showed before it.
"""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from tests.fakes import FakeAnthropic, FakeOpenAI, Reply
from toolhub.tools import function
from toolhub.tools.tokens import count

pytestmark = pytest.mark.django_db(transaction=True)

FAKES = {"anthropic": FakeAnthropic, "openai": FakeOpenAI}
COMBINATIONS = [
    ("anthropic", "call_tool"),
    ("anthropic", "promote"),
    ("anthropic", "native"),
    ("openai", "call_tool"),
    ("openai", "promote"),
    # OpenAI cannot carry deferred tools: the turn falls back to call_tool, and so must
    # the inspector.
    ("openai", "native"),
]


def _lookup(topic: str) -> str:
    """Look a topic up in the deep archive.

    Args:
        topic: What to look up.
    """
    return f"deep facts about {topic}"


def _note(text: str) -> str:
    """Write a short note down.

    Args:
        text: The note.
    """
    return "noted"


@pytest.fixture
def test_tools(registry_state):
    registry_state.register(
        function(_lookup, name="deep_lookup", defer=True, register_globally=False)
    )
    registry_state.register(function(_note, name="jot", register_globally=False))
    return registry_state


@pytest.fixture
def fake(request, settings):
    provider = request.param
    with FAKES[provider]() as server:
        settings.TOOLHUB_PROVIDER = provider
        settings.ANTHROPIC_BASE_URL = server.url
        settings.ANTHROPIC_API_KEY = "test-key"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = ""
        settings.TOOLHUB_PROVIDER_BACKOFF = 0.01
        server.provider = provider
        yield server


def _agent(owner, provider: str, strategy: str, **fields):
    from profiles_app.models import Agent

    return Agent.objects.create(
        owner=owner, name=f"{provider} {strategy}", provider=provider, strategy=strategy, **fields
    )


def _session(client, agent) -> str:
    response = client.post("/api/sessions/", {"agent": agent.pk}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _turn(client, session_id: str, text: str) -> list[dict]:
    """Run one REST turn to its end; its events."""
    seen = client.get(f"/api/sessions/{session_id}/events/?after=0").json()["events"]
    after = seen[-1]["seq"] if seen else 0
    started = client.post(f"/api/sessions/{session_id}/messages/", {"text": text}, format="json")
    assert started.status_code == 202, started.content
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events = client.get(f"/api/sessions/{session_id}/events/?after={after}").json()["events"]
        if any(e["kind"] in ("turn_finished", "turn_failed") for e in events):
            assert events[-1]["kind"] == "turn_finished", events[-1]
            return events
        time.sleep(0.05)
    raise AssertionError("the turn did not end")


def _tools_segment(raw: bytes) -> str:
    """The tools array exactly as the body carried it: toolhub puts it last."""
    text = raw.decode()
    start = text.rindex('"tools":') + len('"tools":')
    assert text.endswith("}")
    return text[start:-1]


def _references(body: dict) -> set[str]:
    return {
        item["tool_name"]
        for message in body.get("messages", [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list)
        for item in block["content"]
        if item.get("type") == "tool_reference"
    }


def _name(tool: dict) -> str:
    return tool["function"]["name"] if "function" in tool else tool["name"]


def _billed_tokens(seen) -> int:
    """Tokens of the array the provider bills, from the bytes it received: every entry but
    those sent with ``defer_loading`` that no ``tool_reference`` loaded."""
    segment = _tools_segment(seen.raw)
    entries = [line.removesuffix(",") for line in segment.split("\n")[1:-1]]
    assert [json.loads(entry) for entry in entries] == seen.body["tools"]
    loaded = _references(seen.body)
    billed = [
        entry
        for entry in entries
        if not json.loads(entry).get("defer_loading") or _name(json.loads(entry)) in loaded
    ]
    return count("[\n" + ",\n".join(billed) + "\n]" if billed else "[]")


def _script(fake, strategy: str) -> None:
    """tool_search loads deep_lookup, then the model calls it, then answers."""
    search = Reply(tool_calls=[("call_s", "tool_search", {"query": "select:deep_lookup"})])
    if strategy == "call_tool" or (strategy == "native" and fake.provider == "openai"):
        call = ("call_d", "call_tool", {"name": "deep_lookup", "arguments": {"topic": "tides"}})
    else:
        call = ("call_d", "deep_lookup", {"topic": "tides"})
    fake.replies.extend([search, Reply(tool_calls=[call]), Reply(text="Tides are tidal.")])


@pytest.mark.parametrize(
    ("fake", "strategy"), COMBINATIONS, indirect=["fake"], ids=[f"{p}-{s}" for p, s in COMBINATIONS]
)
def test_the_tokens_and_fingerprint_recorded_are_those_of_the_tools_bytes_the_server_received(
    api, owner, test_tools, fake, strategy
):
    from sessions_app.models import ProviderCall

    client = api(owner)
    session_id = _session(client, _agent(owner, fake.provider, strategy))
    _script(fake, strategy)

    events = _turn(client, session_id, "look up tides")

    results = [e["data"] for e in events if e["kind"] == "tool_result"]
    assert [(r["name"], r["status"]) for r in results] == [
        ("tool_search", "ok"),
        ("deep_lookup", "ok"),
    ]
    usages = [e["data"] for e in events if e["kind"] == "usage"]
    assert len(usages) == len(fake.requests) == 3
    for usage, seen in zip(usages, fake.requests, strict=True):
        segment = _tools_segment(seen.raw)
        assert usage["fingerprint"] == hashlib.sha256(segment.encode()).hexdigest()
        assert usage["resident_tokens"] == _billed_tokens(seen)
    calls = ProviderCall.objects.filter(session_id=session_id).order_by("id")
    assert [c.resident_tokens for c in calls] == [u["resident_tokens"] for u in usages]
    if strategy == "promote":
        # The loaded tool joined the array: the count followed the bytes.
        assert usages[2]["resident_tokens"] > usages[0]["resident_tokens"]
    if strategy == "native" and fake.provider == "anthropic":
        # Deferred schemas travel but are not billed until a tool_reference loads them.
        assert any(tool.get("defer_loading") for tool in fake.requests[0].body["tools"])
        assert usages[0]["resident_tokens"] < count(_tools_segment(fake.requests[0].raw))
        assert usages[2]["resident_tokens"] > usages[0]["resident_tokens"]


@pytest.mark.parametrize(
    ("fake", "strategy"), COMBINATIONS, indirect=["fake"], ids=[f"{p}-{s}" for p, s in COMBINATIONS]
)
def test_the_inspector_shows_exactly_what_the_next_turn_first_sends(
    api, owner, test_tools, fake, strategy
):
    client = api(owner)
    session_id = _session(client, _agent(owner, fake.provider, strategy))
    _script(fake, strategy)
    fake.replies.append(Reply(text="Again."))

    # The second turn starts with deep_lookup restored as loaded (promote: in the array).
    for number, text in enumerate(["look up tides", "and again"]):
        shown = client.get(f"/api/sessions/{session_id}/toolset/?channel=api").json()
        before = len(fake.requests)
        events = _turn(client, session_id, text)
        first = fake.requests[before]
        started = next(e["data"] for e in events if e["kind"] == "turn_started")
        usage = next(e["data"] for e in events if e["kind"] == "usage")
        segment = _tools_segment(first.raw)

        expected_strategy = (
            "call_tool" if strategy == "native" and fake.provider == "openai" else strategy
        )
        assert shown["strategy"] == started["strategy"] == expected_strategy
        assert shown["provider"] == fake.provider
        assert shown["fingerprint"] == started["fingerprint"] == usage["fingerprint"]
        assert shown["fingerprint"] == hashlib.sha256(segment.encode()).hexdigest()
        assert shown["tokens"]["resident"] == usage["resident_tokens"] == _billed_tokens(first)
        assert shown["tokens"]["catalog"] == usage["catalog_tokens"]
        names = [_name(tool) for tool in first.body["tools"]]
        loaded = _references(first.body)
        billed = [
            _name(t)
            for t in first.body["tools"]
            if not t.get("defer_loading") or t["name"] in loaded
        ]
        shown_names = [tool["name"] for tool in shown["resident"]]
        assert started["resident"] == shown_names == billed
        if number == 1 and strategy == "promote":
            assert "deep_lookup" in names


def test_an_openai_count_is_of_the_function_wrapper_it_sends(api, owner, test_tools, settings):
    with FakeOpenAI() as server:
        settings.TOOLHUB_PROVIDER = "openai"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        client = api(owner)
        session_id = _session(client, _agent(owner, "openai", "call_tool"))
        server.replies.append(Reply(text="Fine."))
        events = _turn(client, session_id, "hello")

    sent = server.requests[0].body["tools"]
    assert all(set(tool) == {"type", "function"} for tool in sent)
    usage = next(e["data"] for e in events if e["kind"] == "usage")
    assert usage["resident_tokens"] == count(_tools_segment(server.requests[0].raw))
    # The Anthropic-form array (what resolution lays out) is not what is counted.
    from toolhub.tools.schema import canonical_json
    from toolhub.tools.wire import layout_array

    anthropic_form = "".join(
        layout_array(
            [
                canonical_json(
                    {
                        "name": tool["function"]["name"],
                        "description": tool["function"]["description"],
                        "input_schema": tool["function"]["parameters"],
                    }
                )
                for tool in sent
            ]
        )
    )
    assert count(anthropic_form) != usage["resident_tokens"]


@pytest.mark.parametrize("fake", ["anthropic"], indirect=True)
def test_with_thousands_of_tools_the_provider_gets_a_catalog_of_sources_within_the_budget(
    api, owner, registry_state, fake
):
    from tests.catalogs import server_tools
    from toolhub.tools.catalog import GROUPED_HEADER

    for tool in server_tools(3_000):
        registry_state.register(tool)
    client = api(owner)
    session_id = _session(client, _agent(owner, fake.provider, "call_tool"))
    pattern = Reply(tool_calls=[("call_s", "tool_search", {"query": "select:srv3__*"})])
    fake.replies.extend([pattern, Reply(text="Loaded srv3's tools.")])

    events = _turn(client, session_id, "load every tool of srv3")

    catalog = fake.requests[0].body["system"][-1]["text"]
    assert catalog.startswith(GROUPED_HEADER)
    assert "srv3: 8 tools\n" in catalog
    usage = next(e["data"] for e in events if e["kind"] == "usage")
    assert usage["catalog_tokens"] == count(catalog)
    window = client.get(f"/api/sessions/{session_id}/toolset/").json()["context_window"]
    assert usage["resident_tokens"] + usage["catalog_tokens"] <= window["tokens"] * 0.05
    (result,) = [e["data"] for e in events if e["kind"] == "tool_result"]
    loaded = [json.loads(line)["name"] for line in result["content"].splitlines()]
    assert loaded == sorted(f"srv3__{tool.name.split('__')[1]}" for tool in server_tools(32)[24:])
