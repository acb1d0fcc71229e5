"""A person's settings (what new chats start with, the theme, compact cards) and their
usage, on the settings page and through the API, with the same rules and errors."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from profiles_app.models import Agent, Preferences
from profiles_app.services import personal_settings, profile_create
from sessions_app.models import ProviderCall
from sessions_app.services import session_create, session_new_or_empty, session_trash

pytestmark = pytest.mark.django_db


def _call(session, model, **tokens):
    return ProviderCall.objects.create(
        session=session, turn="t", model=model, fingerprint="f" * 64, **tokens
    )


def _save(client, **fields):
    form = {"new_chat_agent": "", "new_chat_toolset": "default", "theme": "system"}
    return client.post(reverse("settings"), {**form, **fields})


def test_new_chats_start_with_the_chosen_agent_and_profile_even_an_empty_one_made_before(
    client, owner, other_user
):
    agent = Agent.objects.create(owner=owner, name="Reviewer", model="claude-sonnet-4-5")
    profile_create(user=owner, name="narrow", mode="only", tools=["read"])
    client.force_login(owner)
    earlier_empty = session_new_or_empty(user=owner)
    assert earlier_empty.agent.name == "default"

    saved = _save(client, new_chat_agent=str(agent.pk), new_chat_toolset="narrow")
    assert saved.status_code == 302
    assert "Settings saved." in client.get(saved["Location"]).content.decode()

    chat = session_new_or_empty(user=owner)
    assert chat.pk == earlier_empty.pk
    assert (chat.agent_id, chat.tool_intent["toolset"]) == (agent.pk, "narrow")
    page = client.get(reverse("chat_session", args=[chat.pk])).content.decode()
    assert '<option value="narrow" selected>' in page

    # Changing an existing chat's agent to null means default, not the new-chat choice.
    later = session_create(user=owner)
    assert later.agent_id == agent.pk
    from sessions_app.services import session_update

    later = session_update(user=owner, session=later, version=later.version, agent=None)
    assert later.agent.name == "default"

    # An agent the person can no longer use (given away here) falls back to default.
    Agent.objects.filter(pk=agent.pk).update(owner=other_user)
    assert session_create(user=owner).agent.name == "default"


def test_a_setting_the_page_cannot_take_is_refused_with_the_reason_and_nothing_stored(
    client, owner, other_user
):
    theirs = Agent.objects.create(owner=other_user, name="Theirs")
    client.force_login(owner)

    for fields, reason in [
        ({"theme": "sepia"}, "theme is system, light or dark"),
        ({"new_chat_agent": str(theirs.pk)}, "no such agent"),
        ({"new_chat_agent": "²"}, "no such agent"),
        ({"new_chat_toolset": "nope"}, "no profile or preset named &#x27;nope&#x27;"),
        ({"new_chat_toolset": "a\x00b"}, "toolset must be a profile&#x27;s name"),
        ({"new_chat_toolset": "x" * 5_000}, "toolset must be a profile&#x27;s name"),
    ]:
        answer = _save(client, compact_cards="on", **fields)
        assert answer.status_code == 400, fields
        page = answer.content.decode()
        assert reason in page, fields
        # The other choices are drawn as sent, not lost.
        assert 'name="compact_cards" checked' in page, fields
    assert personal_settings(user=owner).compact_cards is False
    assert personal_settings(user=owner).new_chat_agent is None


def test_the_theme_and_compact_cards_are_drawn_on_every_page_from_the_choice(client, owner):
    client.force_login(owner)
    chat = session_create(user=owner)
    assert "data-theme" not in client.get(reverse("settings")).content.decode()

    _save(client, theme="dark", compact_cards="on")
    for url in (reverse("settings"), reverse("programs"), reverse("chat_session", args=[chat.pk])):
        assert '<html lang="en" data-theme="dark">' in client.get(url).content.decode()
    assert (
        'class="messages-list transcript compact"'
        in client.get(reverse("chat_session", args=[chat.pk])).content.decode()
    )

    # A change made elsewhere (the API, another browser) shows on the next page.
    Preferences.objects.filter(user=owner).update(theme="light")
    assert 'data-theme="light"' in client.get(reverse("programs")).content.decode()


def test_usage_sums_tokens_by_model_with_cache_and_cost_and_only_the_persons_own(
    client, api, owner, other_user
):
    first, second = session_create(user=owner), session_create(user=owner, title="Second")
    _call(first, "claude-sonnet-4-5", input_tokens=1_000, output_tokens=100)
    _call(
        first,
        "claude-sonnet-4-5",
        input_tokens=10,
        output_tokens=50,
        cache_read_input_tokens=2_000,
        cache_creation_input_tokens=400,
    )
    _call(second, "llama3", input_tokens=70, output_tokens=7)
    _call(session_create(user=other_user), "claude-sonnet-4-5", input_tokens=99_999)
    session_trash(user=owner, session=second)

    usage = api(owner).get("/api/usage/").json()
    sonnet = next(row for row in usage["by_model"] if row["model"] == "claude-sonnet-4-5")
    assert sonnet == {
        "model": "claude-sonnet-4-5",
        "calls": 2,
        "input_tokens": 1_010,
        "output_tokens": 150,
        "cache_read_input_tokens": 2_000,
        "cache_creation_input_tokens": 400,
        # (1010 + 400 * 1.25 + 2000 * 0.1) * $3 + 150 * $15, per million tokens.
        "cost_usd": round((1_010 + 500 + 200) * 3 / 1e6 + 150 * 15 / 1e6, 6),
    }
    llama = next(row for row in usage["by_model"] if row["model"] == "llama3")
    assert llama["cost_usd"] is None
    assert usage["total"]["calls"] == 3
    assert usage["total"]["cost_usd"] is None
    assert [(chat["title"], chat["deleted"]) for chat in usage["chats"]] == [
        ("", False),
        ("Second", True),
    ]

    one = api(owner).get(f"/api/sessions/{first.pk}/usage/").json()
    assert [row["model"] for row in one["by_model"]] == ["claude-sonnet-4-5"]
    assert api(other_user).get(f"/api/sessions/{first.pk}/usage/").status_code == 404

    client.force_login(owner)
    page = client.get(reverse("settings")).content.decode()
    assert "<code>claude-sonnet-4-5</code>" in page
    assert "<code>llama3</code>" in page
    assert "unknown" in page  # llama3's cost, and so the total's: never "$0.0000"
    assert "$0.0000" not in page
    assert 'Second <span class="muted">(in the bin)</span>' in page
    assert "99,999" not in page


def test_the_settings_page_costs_the_same_queries_with_one_call_or_many(client, owner):
    client.force_login(owner)
    chat = session_create(user=owner)
    _call(chat, "claude-sonnet-4-5", input_tokens=1)
    client.get(reverse("settings"))
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("settings"))
    for index in range(30):
        _call(session_create(user=owner), f"model-{index % 5}", input_tokens=index)
    with CaptureQueriesContext(connection) as many:
        client.get(reverse("settings"))
    assert 0 < len(many.captured_queries) == len(few.captured_queries)


def test_the_settings_api_takes_the_same_fields_with_strict_types(api, owner, other_user):
    theirs = Agent.objects.create(owner=other_user, name="Theirs")
    profile_create(user=owner, name="narrow")

    assert api(owner).get("/api/settings/").json() == {
        "new_chat_agent": None,
        "new_chat_toolset": "",
        "theme": "system",
        "compact_cards": False,
    }
    changed = api(owner).patch(
        "/api/settings/",
        {"theme": "light", "compact_cards": True, "new_chat_toolset": "narrow"},
        format="json",
    )
    assert changed.status_code == 200, changed.content
    assert changed.json() == {
        "new_chat_agent": None,
        "new_chat_toolset": "narrow",
        "theme": "light",
        "compact_cards": True,
    }
    mine = Agent.objects.create(owner=owner, name="Mine")
    chose = api(owner).patch("/api/settings/", {"new_chat_agent": mine.pk}, format="json")
    assert chose.json()["new_chat_agent"] == mine.pk
    # An agent the person can no longer use reads as default, as new chats see it.
    Agent.objects.filter(pk=mine.pk).update(owner=other_user)
    assert api(owner).get("/api/settings/").json()["new_chat_agent"] is None
    for body in (
        {"compact_cards": "yes"},
        {"theme": "sepia"},
        {"new_chat_agent": theirs.pk},
        {"new_chat_agent": "1"},
    ):
        answer = api(owner).patch("/api/settings/", body, format="json")
        assert answer.status_code == 400, body
        assert answer.json()["code"] == "invalid", body
    assert api(owner).get("/api/settings/").json()["theme"] == "light"
    # A key the schema does not name is ignored, as every PATCH of the API ignores it.
    extra = api(owner).patch("/api/settings/", {"colour": "red", "theme": "dark"}, format="json")
    assert (extra.status_code, extra.json()["theme"]) == (200, "dark")
    assert api().get("/api/settings/").status_code == 401


def test_the_composer_picks_the_chats_agent_and_the_inspector_names_it_and_its_model(
    client, owner, other_user
):
    mine = Agent.objects.create(owner=owner, name="Reviewer", model="claude-sonnet-4-5")
    theirs = Agent.objects.create(owner=other_user, name="Theirs")
    chat = session_create(user=owner)
    client.force_login(owner)
    page = client.get(reverse("chat_session", args=[chat.pk])).content.decode()
    assert f'<option value="{mine.pk}">Reviewer</option>' in page
    assert "Theirs" not in page

    url = reverse("chat_options", args=[chat.pk])
    picked = client.post(url, {"agent": str(mine.pk)}).content.decode()
    # Applied at once: the panel comes back drawn for the chat as stored, saying so.
    assert "From your next message, Reviewer answers." in picked
    assert f'<option value="{mine.pk}" selected>Reviewer</option>' in picked
    assert "Its model: claude-sonnet-4-5" in picked
    page = client.get(reverse("chat_session", args=[chat.pk])).content.decode()
    assert f'<option value="{mine.pk}" selected>Reviewer</option>' in page
    inspector = client.get(reverse("chat_inspector", args=[chat.pk])).content.decode()
    said = "<strong>Reviewer</strong> answers, with the model <code>claude-sonnet-4-5</code>."
    assert said in inspector

    refused = client.post(url, {"agent": str(theirs.pk)})
    assert refused.status_code == 400
    # The panel still shows the agent that answers, with why the choice did not apply.
    assert "Not changed: no such agent" in refused.content.decode()
    assert f'<option value="{mine.pk}" selected>Reviewer</option>' in refused.content.decode()
    chat.refresh_from_db()
    assert chat.agent_id == mine.pk
    stranger = client.__class__()
    stranger.force_login(other_user)
    assert stranger.post(url, {"agent": str(theirs.pk)}).status_code == 404
    chat.refresh_from_db()
    assert chat.agent_id == mine.pk
