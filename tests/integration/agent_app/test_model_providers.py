"""Model providers staff connect in the app, and the model a person picks per chat
(docs/models.md): the models endpoints of the fake Anthropic and OpenAI servers are asked
over real HTTP, the key is write-only and sealed, and a chat's turn goes to the provider
and model it picked, with that model's window and prices.
"""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.urls import reverse

from profiles_app.models import Agent, ProviderConnection
from profiles_app.services.connections import provider_offer
from sessions_app.models import ProviderCall
from sessions_app.transcript import session_transcript
from tests.conftest import closed_port_url
from tests.fakes import FakeAnthropic, FakeOpenAI
from tests.integration.chat import rest_turn

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "sk-test-0123456789-secret"


def _save(client, **fields):
    form = {"name": "local", "kind": "openai", "base_url": "", "api_key": "", "manual": ""}
    return client.post(reverse("ops_provider_save"), {**form, **fields}, follow=True)


def _stored_key_column(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT api_key FROM profiles_app_providerconnection WHERE name = %s", [name]
        )
        return cursor.fetchone()[0]


def test_staff_connect_a_compatible_server_whose_models_are_listed_and_whose_key_never_shows(
    client, staff, owner
):
    with FakeOpenAI(
        models={"llama-a": {"max_model_len": 8192}, "llama-b": {}}, api_key=SECRET
    ) as fake:
        client.force_login(staff)
        saved = _save(client, base_url=f"{fake.url}/v1", api_key=SECRET)

        page = saved.content.decode()
        assert "Saved local: it lists 2 models." in page
        assert re.search(r"<code>llama-a</code></td><td>8,192</td>", page)
        # Asked with the key; the key is never sent back, and is sealed at rest.
        (listing,) = [seen for seen in fake.lookups if seen.path == "/v1/models"]
        assert listing.headers["authorization"] == f"Bearer {SECRET}"
        assert SECRET not in page
        assert SECRET not in _stored_key_column("local")
        assert ProviderConnection.objects.get(name="local").api_key == SECRET

        # Saved again with the box empty, the key stays; "Remove the stored key" clears it.
        _save(client, base_url=f"{fake.url}/v1", manual="llama-c")
        assert ProviderConnection.objects.get(name="local").api_key == SECRET
        _save(client, base_url=f"{fake.url}/v1", clear_key="on")
        assert ProviderConnection.objects.get(name="local").api_key == ""

    # Nobody but staff sees or changes them.
    client.force_login(owner)
    assert client.get(reverse("ops_providers")).status_code == 404
    assert client.post(reverse("ops_provider_save"), {"name": "mine"}).status_code == 404
    assert client.post(reverse("ops_provider_delete", args=["local"])).status_code == 404
    assert list(ProviderConnection.objects.values_list("name", flat=True)) == ["local"]


def test_a_provider_that_cannot_list_its_models_offers_the_ones_staff_wrote(client, staff):
    client.force_login(staff)

    saved = _save(client, base_url=closed_port_url("http"), manual="model-x, 32000, 1, 2")

    assert "its models could not be listed" in saved.content.decode()
    offer = provider_offer("local")
    assert [(m.id, m.window, m.input, m.output) for m in offer.models] == [
        ("model-x", 32000, 1.0, 2.0)
    ]
    # A bad line is refused saying which, and nothing typed is lost.
    for manual, said in [
        ("ok-model\nbad model id, 10", "line 2"),
        ("m, 12", "line 1: the window is in tokens"),
        ("m, 8000, cheap", "line 1: a price is a number"),
        ("m, 8000, nan", "line 1: a price is out of range"),
    ]:
        refused = _save(client, name="other", base_url=closed_port_url("http"), manual=manual)
        assert refused.status_code == 400
        assert said in refused.content.decode()
        assert manual.split("\n")[0] in refused.content.decode()
    assert not ProviderConnection.objects.filter(name="other").exists()
    for name, said in [
        ("demo", "needs no connection"),
        ("Bad Name", "lower-case"),
        ("x" * 41, "1 to 40"),
    ]:
        assert said in _save(client, name=name, base_url="http://h/v1").content.decode()


def _pick(client, session_id, value: str):
    return client.post(reverse("chat_options", args=[session_id]), {"model": value})


def test_a_chat_picks_a_connections_model_and_its_turn_goes_there_with_its_window_and_price(
    client, api, staff, owner
):
    with FakeOpenAI(models={"llama-b": {"max_model_len": 16000}, "llama-z": {}}) as fake:
        client.force_login(staff)
        _save(client, base_url=f"{fake.url}/v1", manual="llama-b, , 0.5, 1.5")
        rest = api(owner)
        session = rest.post("/api/sessions/", {}, format="json").json()["id"]
        client.force_login(owner)

        picked = _pick(client, session, "local:llama-b")
        assert "From your next message, the model is llama-b." in picked.content.decode()
        events = rest_turn(rest, session)

        (started,) = [e["data"] for e in events if e["kind"] == "turn_started"]
        assert (started["model"], started["context_window"], started["price"]) == (
            "llama-b",
            16000,
            [0.5, 1.5],
        )
        asked = [seen for seen in fake.requests if seen.path == "/v1/chat/completions"]
        assert asked[0].body["model"] == "llama-b"
        # Each call keeps the prices it was made at, for the usage page.
        call = ProviderCall.objects.get(session_id=session)
        assert (call.price_input, call.price_output) == (0.5, 1.5)
        end = session_transcript(session_id=session).context
        assert end.cost.startswith("$") or end.cost == "under $0.0001"
        inspector = client.get(reverse("chat_inspector", args=[session])).content.decode()
        assert "with the model <code>llama-b</code>" in inspector

        # The API lists the same models and picks one as the composer does.
        listed = {offer["name"]: offer for offer in rest.get("/api/models/").json()}
        assert [m["id"] for m in listed["local"]["models"]] == ["llama-b", "llama-z"]
        assert listed["local"]["models"][0] == {
            "id": "llama-b",
            "window": 16000,
            "input": 0.5,
            "output": 1.5,
        }
        fetched = rest.get(f"/api/sessions/{session}/")
        assert fetched.json()["model"] == "local:llama-b"
        for value, status in (("local:nope", 400), ("local:llama-z", 200)):
            patched = rest.patch(
                f"/api/sessions/{session}/",
                {"model": value},
                format="json",
                HTTP_IF_MATCH=rest.get(f"/api/sessions/{session}/")["ETag"],
            )
            assert patched.status_code == status, patched.content
        assert rest.get(f"/api/sessions/{session}/").json()["model"] == "local:llama-z"

        # Only what a provider offers can be picked; a refusal changes nothing.
        for value in ("local:nope", "nosuch:llama-b", "local", ":llama-b", "local:llama-b\x00"):
            assert _pick(client, session, value).status_code == 400, value
        connection = ProviderConnection.objects.get(name="local")
        connection.enabled = False
        connection.save()
        assert _pick(client, session, "local:llama-z").status_code == 400

        # Back to the agent's model.
        assert "the agent&#x27;s model answers" in _pick(client, session, "").content.decode()
        (started,) = [e["data"] for e in rest_turn(rest, session) if e["kind"] == "turn_started"]
        assert started["model"] == "demo"


def test_an_anthropic_connection_lists_every_page_of_models_and_a_chat_uses_one(
    client, api, staff, owner
):
    models = {"claude-a": 100_000, "claude-b": 200_000, "claude-c": 50_000}
    with FakeAnthropic(models=models, page_size=2) as fake:
        client.force_login(staff)
        saved = _save(client, name="anth", kind="anthropic", base_url=fake.url, api_key="ak-1")
        assert "Saved anth: it lists 3 models." in saved.content.decode()
        assert sum(seen.path == "/v1/models" for seen in fake.lookups) == 2

        rest = api(owner)
        session = rest.post("/api/sessions/", {}, format="json").json()["id"]
        client.force_login(owner)
        _pick(client, session, "anth:claude-b")
        (started,) = [e["data"] for e in rest_turn(rest, session) if e["kind"] == "turn_started"]
        assert (started["model"], started["context_window"]) == ("claude-b", 200_000)
        sent = [seen for seen in fake.requests if seen.path == "/v1/messages"]
        assert sent[0].body["model"] == "claude-b"
        # The SDK sends the key as x-api-key or, in 2.x, as a bearer token.
        headers = sent[0].headers
        assert "ak-1" in (headers.get("x-api-key"), headers.get("authorization", "")[7:])

        # Removed by staff, the chat's next turn says the provider is gone.
        client.force_login(staff)
        client.post(reverse("ops_provider_delete", args=["anth"]))
        failed = [e["data"] for e in rest_turn(rest, session) if e["kind"] == "turn_failed"]
        assert "no provider named 'anth'" in failed[0]["message"]


def test_an_agent_names_a_connection_as_its_provider_and_its_chats_use_it(
    client, api, staff, owner
):
    with FakeOpenAI(models={"llama-a": {}}) as fake:
        client.force_login(staff)
        _save(client, base_url=f"{fake.url}/v1")
        agent = Agent.objects.create(owner=owner, name="Local", provider="local")
        rest = api(owner)
        session = rest.post("/api/sessions/", {"agent": agent.pk}, format="json").json()["id"]

        (started,) = [e["data"] for e in rest_turn(rest, session) if e["kind"] == "turn_started"]

        # The agent names no model: the connection's first.
        assert started["model"] == "llama-a"
        for field, value in (
            ("provider", "nowhere"),
            ("provider", "\ud800"),
            ("strategy", "\ud800"),
        ):
            unknown = rest.patch(
                f"/api/agents/{agent.pk}/",
                data=json.dumps({field: value, "version": 1}),
                content_type="application/json",
            )
            # Refused, the odd value not echoed (a lone surrogate cannot be encoded).
            assert unknown.status_code == 400, (field, value)


def test_what_a_provider_or_a_form_sends_that_cannot_be_stored_is_refused_not_a_500(
    client, staff, owner, caplog
):
    client.force_login(staff)
    odd = {"a\x00b": {}, "\ud800x": {}, "has space": {}, "x" * 101: {}, "good-one": {}}
    with FakeOpenAI(models=odd) as fake:
        saved = _save(client, base_url=f"{fake.url}/v1")
        # Only the ids that can be stored and shown are kept.
        assert "Saved local: it lists 1 model." in saved.content.decode()
        assert [m.id for m in provider_offer("local").models] == ["good-one"]

    # A key with a letter no HTTP header can carry is refused before it is stored: it
    # would fail every request, with the key in the error.
    refused = _save(client, name="other", base_url="http://h.example/v1", api_key="sk-ключ-1")
    assert (refused.status_code, "printable ASCII" in refused.content.decode()) == (400, True)
    for fields in (
        {"manual": "# a note \x00\nm-1"},
        {"manual": "m, " + " " * 30_000 + "1000"},
        {"base_url": "http://h/v1\x00"},
        {"base_url": "http://[::1/v1"},
        {"base_url": "ftp://h/v1"},
    ):
        answer = _save(client, name="other", **{"base_url": "http://h.example/v1", **fields})
        assert answer.status_code == 400, fields
    assert not ProviderConnection.objects.filter(name="other").exists()
    for action in ("refresh", "delete"):
        assert client.post(f"/ops/providers/%00/{action}/").status_code == 404
        assert client.post(f"/ops/providers/{'x' * 300}/{action}/").status_code == 404
    assert "ключ" not in caplog.text


def test_a_pick_no_longer_offered_stays_shown_and_urls_are_for_staff(client, staff, owner):
    client.force_login(staff)
    _save(client, base_url="http://user:pw@inner.example:8000/v1", manual="m-1")
    from sessions_app.services import session_create

    chat = session_create(user=owner)
    client.force_login(owner)
    _pick(client, chat.pk, "local:m-1")
    ProviderConnection.objects.filter(name="local").delete()

    panel = client.get(reverse("chat_options", args=[chat.pk])).content.decode()
    assert '<option value="local:m-1" selected>m-1 at local: no longer offered</option>' in panel
    page = client.get(reverse("agents")).content.decode()
    assert "inner.example" not in page


def test_calls_are_priced_at_the_prices_they_were_made_at(owner):
    from sessions_app.models import ProviderCall
    from sessions_app.services import session_create
    from sessions_app.usage import usage_of

    chat = session_create(user=owner)
    million = {"input_tokens": 1_000_000, "output_tokens": 1_000_000, "fingerprint": "f"}
    # One model id at two providers with their own prices, and a call of before prices.
    ProviderCall.objects.create(
        session=chat, turn="a", model="gpt-x", price_input=0, price_output=0, **million
    )
    ProviderCall.objects.create(
        session=chat, turn="b", model="gpt-x", price_input=10, price_output=30, **million
    )
    ProviderCall.objects.create(session=chat, turn="c", model="claude-sonnet-4-6", **million)

    usage = usage_of(user=owner)

    assert usage.by_model["gpt-x"].cost == pytest.approx(40.0)
    assert usage.by_model["claude-sonnet-4-6"].cost == pytest.approx(18.0)
    assert usage.chats[0].tokens.cost == pytest.approx(58.0)


def test_choices_made_at_once_from_many_tabs_each_apply_whole_or_say_not_changed(
    client, owner, staff
):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections
    from django.test import Client

    from sessions_app.models import ChatSession
    from sessions_app.services import session_create

    chat = session_create(user=owner)
    url = reverse("chat_options", args=[chat.pk])
    picks = [
        {"tools": state, "plan_mode": mode}
        for state in ("on", "off", "follow")
        for mode in ("on", "off")
    ] * 3

    def choose(pick: dict) -> tuple[dict, int, str]:
        tab = Client()
        tab.force_login(owner)
        try:
            answer = tab.post(url, pick)
            return pick, answer.status_code, answer.content.decode()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(choose, picks))

    assert {status for _, status, _ in answers} <= {200, 409}
    applied = [(pick, page) for pick, status, page in answers if status == 200]
    assert applied
    for pick, page in applied:
        # Each applied answer shows its own choices, both of them: never half a request.
        assert f'value="{pick["tools"]}" checked' in page
        assert ('id="plan-mode" name="plan_mode" checked' in page) == (pick["plan_mode"] == "on")
    for _, status, page in answers:
        if status == 409:
            assert "Not changed:" in page
    stored = ChatSession.objects.get(pk=chat.pk)
    shown = {"on": True, "off": False, "follow": None}
    assert (stored.tool_intent.get("enabled"), stored.plan_mode) in {
        (shown[pick["tools"]], pick["plan_mode"] == "on") for pick, _ in applied
    }


def test_a_connection_another_process_turns_off_stops_being_offered_within_two_seconds(
    staff, monkeypatch
):
    from profiles_app.services import connections

    ProviderConnection.objects.create(name="elsewhere", kind="openai", base_url="http://x/v1")
    clock = [1_000.0]
    monkeypatch.setattr(connections.time, "monotonic", lambda: clock[0])
    assert "elsewhere" in [offer.name for offer in connections.provider_offers()]

    # Another process's write: no signal reaches this one.
    ProviderConnection.objects.filter(name="elsewhere").update(enabled=False)
    clock[0] += connections.OFFERS_SECONDS / 2
    still = [offer.name for offer in connections.provider_offers()]
    clock[0] += connections.OFFERS_SECONDS
    later = [offer.name for offer in connections.provider_offers()]

    assert "elsewhere" in still
    assert "elsewhere" not in later
