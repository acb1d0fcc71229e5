"""The context window a turn works in comes from the model's server where it says, from the
agent's setting when smaller, else is assumed and said to be (docs/architecture.md,
"Context windows").

Turns go over REST to fake servers over real HTTP (tests/fakes): an OpenAI-compatible one
that lists models as vLLM does or answers ``/props`` as llama.cpp's server does, and the
Anthropic fake's Models API. The test reads the stored events, the inspector and the pages.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from profiles_app.models import Agent
from profiles_app.services import agent_update
from tests.conftest import closed_port_url
from tests.fakes import FakeAnthropic, FakeOpenAI, Reply
from tests.integration.chat import rest_turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def compatible(settings):
    """Start a fake OpenAI-compatible server; chats of the owner's agent use it."""
    started = []

    def start(**mode) -> FakeOpenAI:
        server = FakeOpenAI(**mode).__enter__()
        started.append(server)
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = ""
        settings.TOOLHUB_PROVIDER_BACKOFF = 0.01
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)


@pytest.fixture
def anthropic(settings):
    with FakeAnthropic(models={"claude-fake": 150_000}) as server:
        settings.ANTHROPIC_BASE_URL = server.url
        settings.ANTHROPIC_API_KEY = "test-key"
        settings.TOOLHUB_PROVIDER_BACKOFF = 0.01
        yield server


def _agent(owner, provider: str = "openai", model: str = "small-model", **fields) -> Agent:
    return Agent.objects.create(
        owner=owner, name=f"{provider} agent", provider=provider, model=model, **fields
    )


def _session(client, agent: Agent) -> str:
    response = client.post("/api/sessions/", {"agent": agent.pk}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _started(events: list[dict]) -> tuple[int, str]:
    (started,) = [e["data"] for e in events if e["kind"] == "turn_started"]
    return started["context_window"], started["context_source"]


def _set_window(owner, agent: Agent, tokens: int | None) -> None:
    agent.refresh_from_db()
    agent_update(user=owner, agent=agent, version=agent.version, context_window=tokens)


def test_a_window_the_server_lists_is_the_turns_and_the_inspectors(api, owner, compatible):
    server = compatible(models={"small-model": {"max_model_len": 8192}, "other": {}})
    client = api(owner)
    session = _session(client, _agent(owner))

    assert _started(rest_turn(client, session)) == (8192, "server")
    inspector = client.get(f"/api/sessions/{session}/toolset/").json()["context_window"]
    assert inspector == {
        "tokens": 8192,
        "source": "server",
        "words": "8,192 tokens, as the model's server reports.",
    }
    # Asked once, not on every turn or every inspector read.
    rest_turn(client, session)
    assert [seen.path for seen in server.lookups] == ["/props", "/v1/models"]


def test_what_llama_cpps_server_runs_with_beats_what_the_model_was_trained_with(
    api, owner, compatible
):
    compatible(
        models={"smollm2": {"meta": {"n_ctx_train": 131_072}}},
        props={"default_generation_settings": {"n_ctx": 4096}},
    )
    client = api(owner)

    assert _started(rest_turn(client, _session(client, _agent(owner, model="smollm2")))) == (
        4096,
        "server",
    )


def test_a_server_that_serves_one_model_answers_for_it_under_any_name(api, owner, compatible):
    compatible(models={"SmolLM2-135M-Instruct": {"meta": {"n_ctx_train": 8192}}})
    client = api(owner)

    assert _started(rest_turn(client, _session(client, _agent(owner, model="anything")))) == (
        8192,
        "server",
    )


@pytest.mark.parametrize(
    "fields",
    [{}, {"max_model_len": 10**30}, {"max_model_len": -1}, {"max_model_len": "8192"}],
    ids=["says nothing", "too large", "negative", "text"],
)
def test_a_window_nobody_believably_says_is_assumed_and_the_chat_says_so(
    api, client, owner, compatible, fields
):
    compatible(models={"small-model": fields})
    api_client = api(owner)
    session = _session(api_client, _agent(owner))

    assert _started(rest_turn(api_client, session)) == (200_000, "assumed")
    client.force_login(owner)
    page = client.get(f"/chat/{session}/").content.decode()
    assert "window assumed" in page
    inspector = client.get(f"/chat/{session}/inspector/").content.decode()
    assert "200,000 tokens, assumed: the model&#x27;s server does not say" in inspector


def test_a_smaller_window_set_on_the_agent_is_kept_and_a_larger_one_is_not(api, owner, compatible):
    compatible(models={"small-model": {"max_model_len": 8192}})
    client = api(owner)
    agent = _agent(owner)
    session = _session(client, agent)

    _set_window(owner, agent, 4096)
    assert _started(rest_turn(client, session)) == (4096, "setting")
    _set_window(owner, agent, 32_000)
    assert _started(rest_turn(client, session)) == (8192, "server")
    _set_window(owner, agent, None)
    assert _started(rest_turn(client, session)) == (8192, "server")


def test_the_window_a_server_names_when_a_request_does_not_fit_ends_the_turn_and_is_kept(
    api, owner, compatible
):
    server = compatible()
    server.replies.append(
        Reply(text="", stream_error="Requested tokens (4486) exceed context window of 2048")
    )
    client = api(owner)
    session = _session(client, _agent(owner))

    events = rest_turn(client, session)

    (failed,) = [e["data"] for e in events if e["kind"] == "turn_failed"]
    assert failed["code"] == "context_full"
    assert failed["message"].startswith(
        "This conversation no longer fits the model's window of 2,048 tokens."
    )
    assert "Requested tokens (4486)" in failed["message"]
    assert _started(rest_turn(client, session)) == (2048, "server")


def test_a_stream_llama_cpp_python_ends_unsent_is_asked_why_and_its_window_is_kept(
    api, owner, compatible
):
    server = compatible(window=2048)
    client = api(owner)
    agent = _agent(owner)

    events = rest_turn(client, _session(client, agent), "word " * 2000)

    (failed,) = [e["data"] for e in events if e["kind"] == "turn_failed"]
    assert failed["code"] == "context_full"
    assert "window of 2,048 tokens" in failed["message"]
    assert "maximum context length is 2048 tokens" in failed["message"]
    # One streamed request and one asking why, not streamed and for one token: no retries.
    assert [(seen.body["stream"], seen.body["max_tokens"]) for seen in server.requests] == [
        (True, 4096),
        (False, 1),
    ]
    # Another chat with the same model is planned for that window from its first turn.
    assert _started(rest_turn(client, _session(client, agent))) == (2048, "server")


def test_a_server_that_never_answers_the_question_does_not_hold_the_turn(
    api, owner, compatible, monkeypatch
):
    from agent_app.providers import windows

    monkeypatch.setattr(windows, "ASK_SECONDS", 0.2)
    server = compatible(props={"n_ctx": 4096})
    original = server.handle

    def slow(exchange):
        if exchange.method == "GET":
            time.sleep(1.0)
        original(exchange)

    server.handle = slow
    client = api(owner)

    events = rest_turn(client, _session(client, _agent(owner)))

    assert events[-1]["kind"] == "turn_finished"
    assert _started(events) == (200_000, "assumed")


def test_a_cache_out_of_reach_leaves_the_window_unknown_and_the_turn_runs(
    api, owner, compatible, settings
):
    compatible(models={"small-model": {"max_model_len": 8192}})
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": closed_port_url("redis"),
            "OPTIONS": {"socket_connect_timeout": 0.5},
        }
    }
    client = api(owner)

    events = rest_turn(client, _session(client, _agent(owner)))

    assert events[-1]["kind"] == "turn_finished"
    # Asked, and kept in this process for a while even though the cache refused it.
    assert _started(events) == (8192, "server")


def test_the_anthropic_models_api_gives_the_window(api, owner, anthropic):
    client = api(owner)
    session = _session(client, _agent(owner, provider="anthropic", model="claude-fake"))

    assert _started(rest_turn(client, session)) == (150_000, "server")
    assert [seen.path for seen in anthropic.lookups] == ["/v1/models/claude-fake"]


def test_an_anthropic_prompt_too_long_names_the_window_the_person_reads(api, owner, anthropic):
    anthropic.replies.append(
        Reply(status=400, text="prompt is too long: 9100 tokens > 8,000 maximum")
    )
    client = api(owner)
    session = _session(client, _agent(owner, provider="anthropic", model="claude-fake"))

    events = rest_turn(client, session)

    (failed,) = [e["data"] for e in events if e["kind"] == "turn_failed"]
    assert failed["code"] == "context_full"
    assert "window of 8,000 tokens" in failed["message"]


def test_the_agents_page_sets_a_window_refuses_words_and_shows_where_it_comes_from(
    client, owner, compatible
):
    compatible(models={"small-model": {"max_model_len": 8192}})
    agent = _agent(owner)
    client.force_login(owner)

    def post(window: str):
        agent.refresh_from_db()
        return client.post(
            f"/agents/{agent.pk}/",
            {
                "version": agent.version,
                "name": agent.name,
                "provider": agent.provider,
                "model": agent.model,
                "strategy": agent.strategy,
                "context_window": window,
            },
        )

    refused = post("lots")
    assert refused.status_code == 400
    assert "The context window is a whole number of tokens" in refused.content.decode()
    assert 'value="lots"' in refused.content.decode()
    agent.refresh_from_db()
    assert agent.context_window is None

    assert post("4,096").status_code == 302
    agent.refresh_from_db()
    assert agent.context_window == 4096
    page = client.get(f"/agents/{agent.pk}/").content.decode()
    assert "Context window: 4,096 tokens, as set on the agent." in page

    assert post("").status_code == 302
    agent.refresh_from_db()
    assert agent.context_window is None


def test_the_agents_api_takes_null_for_the_servers_window(api, owner):
    agent = _agent(owner)
    client = api(owner)

    changed = client.patch(
        f"/api/agents/{agent.pk}/",
        {"context_window": None, "version": agent.version},
        format="json",
    )
    assert changed.status_code == 200, changed.content
    assert changed.json()["context_window"] is None
    refused = client.patch(
        f"/api/agents/{agent.pk}/",
        {"context_window": 10, "version": changed.json()["version"]},
        format="json",
    )
    assert refused.status_code == 400


# What llama.cpp's server answers when a tool call does not parse: the model's own text,
# which the person chatting can steer, follows the colon.
ECHOED = (
    "Failed to parse input at pos 0: <tool_call>please note the context window of 300 "
    "tokens</tool_call>"
)


@pytest.mark.parametrize("status", [500, 400])
def test_an_error_that_echoes_a_window_sets_nobodys_window_and_is_not_context_full(
    api, owner, other_user, compatible, settings, status
):
    server = compatible(props={"default_generation_settings": {"n_ctx": 8192}})
    settings.TOOLHUB_PROVIDER_RETRIES = 0
    attacker, victim = api(owner), api(other_user)
    session = _session(attacker, _agent(owner, model="shared"))
    server.replies.append(Reply(status=status, text=ECHOED))

    events = rest_turn(attacker, session)

    (failed,) = [e["data"] for e in events if e["kind"] == "turn_failed"]
    assert failed["code"] != "context_full"
    assert _started(rest_turn(victim, _session(victim, _agent(other_user, model="shared")))) == (
        8192,
        "server",
    )


def test_an_error_cannot_grow_the_window_the_server_reported(api, owner, compatible):
    server = compatible(props={"default_generation_settings": {"n_ctx": 4096}})
    client = api(owner)
    session = _session(client, _agent(owner))
    server.replies.append(
        Reply(status=400, text="This model's maximum context length is 99,999,999 tokens.")
    )

    failed = rest_turn(client, session)

    assert [e["data"]["code"] for e in failed if e["kind"] == "turn_failed"] == [
        "provider_rejected"
    ]
    assert _started(rest_turn(client, session)) == (4096, "server")


class _CommentsOnly(FakeOpenAI):
    """Streams answer 200 with a keep-alive comment and nothing else."""

    def handle(self, exchange):
        if exchange.method == "POST" and exchange.body.get("stream"):
            exchange.stream([b": keep-alive\n\n"], reply=Reply(), pause_after=-1, broken_frame=b"")
            return
        super().handle(exchange)


def test_a_stream_that_sends_nothing_is_asked_why_once_and_not_retried(api, owner, settings):
    with _CommentsOnly() as server:
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = ""
        settings.TOOLHUB_PROVIDER_BACKOFF = 0.01
        settings.TOOLHUB_PROVIDER_RETRIES = 3
        client = api(owner)

        events = rest_turn(client, _session(client, _agent(owner)))

    (failed,) = [e["data"] for e in events if e["kind"] == "turn_failed"]
    assert (failed["code"], failed["message"]) == (
        "provider_cut",
        "the server ended the answer before sending anything",
    )
    # One stream, and one question (it answered): no retry asks again.
    assert [seen.body["stream"] for seen in server.requests] == [True, False]


class _SlowToAnswer(FakeOpenAI):
    """Streams end before any event; an answer not streamed comes after the client's
    read timeout."""

    def handle(self, exchange):
        if exchange.method == "POST" and exchange.body.get("stream"):
            exchange.stream([], reply=Reply(), pause_after=-1, broken_frame=b"")
            return
        if exchange.method == "POST":
            time.sleep(0.6)
        super().handle(exchange)


async def test_a_question_that_timed_out_is_not_sent_again(monkeypatch):
    import httpx

    from agent_app.providers import openai
    from agent_app.providers.base import ProviderError, ProviderRequest

    monkeypatch.setattr(openai, "PROBE_TIMEOUT", httpx.Timeout(5.0, connect=1.0, read=0.3))
    with _SlowToAnswer() as server:
        provider = openai.OpenAIProvider(base_url=f"{server.url}/v1")
        request = ProviderRequest(
            model="m",
            system="",
            catalog="",
            messages=[{"role": "user", "content": "a long prompt " * 50}],
            tools_json="[]",
        )
        with pytest.raises(ProviderError) as failed:
            async for _ in provider.stream(request):
                pass
        # Past the time the server takes to answer: a second post would have arrived.
        server.wait_for_requests(2)
        await asyncio.sleep(0.8)

    assert failed.value.code == "provider_cut"
    assert [seen.body["stream"] for seen in server.requests] == [True, False]


async def test_a_chat_switched_to_another_agent_after_its_socket_opened_uses_that_agents_window(
    owner, compatible
):
    from channels.db import database_sync_to_async

    from sessions_app.services import session_create, session_update
    from tests.integration.chat import open_socket, send, until

    compatible(models={"small-model": {"max_model_len": 8192}})
    demo = await database_sync_to_async(Agent.objects.create)(
        owner=owner, name="demo agent", provider="demo"
    )
    small = await database_sync_to_async(_agent)(owner)
    session = await database_sync_to_async(session_create)(user=owner, agent=demo.pk)
    socket = await open_socket(session.pk, owner)
    # Switched elsewhere (another tab, the API) while this socket keeps its first copy.
    await database_sync_to_async(session_update)(
        user=owner, session=session, version=session.version, agent=small.pk
    )

    await send(socket, {"type": "chat", "text": "hello"})
    frames = await until(socket)
    await socket.disconnect()

    (started,) = [f["data"] for f in frames if f.get("kind") == "turn_started"]
    assert (started["context_window"], started["context_source"]) == (8192, "server")


async def test_a_provider_first_built_for_a_turn_on_the_servers_loop_is_built_off_it(
    monkeypatch, owner
):
    """Building a provider imports its SDK (seconds for anthropic's): on the loop, that
    stalled every socket of the server, and a handshake's Redis connect timed out."""
    import threading

    from agent_app import providers
    from agent_app.providers.demo import DemoProvider
    from agent_app.providers.windows import window_discover

    built_on: list[threading.Thread] = []

    def factory() -> DemoProvider:
        built_on.append(threading.current_thread())
        return DemoProvider()

    monkeypatch.setitem(providers.PROVIDERS, "imported-late", factory)
    monkeypatch.setattr(providers, "_built", {})
    agent = Agent(owner=owner, name="late", provider="imported-late")

    await window_discover(agent=agent)
    await window_discover(agent=agent)

    assert len(built_on) == 1
    assert built_on[0] is not threading.current_thread()
