"""The chat pages: the shell a person's browser draws the conversation into, and the
session actions beside it."""

from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def _session(user, **fields):
    from sessions_app.services import session_create

    return session_create(user=user, **fields)


def test_a_person_without_chats_is_offered_a_new_one(client, owner):
    client.force_login(owner)

    response = client.get(reverse("chat"))

    assert response.status_code == 200
    assert "No chats yet" in response.content.decode()


def test_the_chat_page_opens_the_latest_chat_with_its_socket_and_intent(client, owner):
    session = _session(owner, intent={"toolset": "safe", "enabled": False})
    client.force_login(owner)

    response = client.get(reverse("chat"), follow=True)

    page = response.content.decode()
    assert response.redirect_chain[-1][0] == reverse("chat_session", args=[session.pk])
    assert f'data-ws="/ws/sessions/{session.pk}/"' in page
    assert '<option value="safe" selected>' in page
    assert 'id="tools-off" name="tools" value="off" checked' in page


def test_another_persons_chat_is_a_404_for_the_page_and_its_actions(client, owner, other_user):
    from sessions_app.models import ChatSession

    session = _session(owner)
    client.force_login(other_user)

    assert client.get(reverse("chat_session", args=[session.pk])).status_code == 404
    assert client.post(reverse("chat_delete", args=[session.pk])).status_code == 404
    assert ChatSession.objects.filter(pk=session.pk).exists()


def test_new_rename_and_delete_a_chat(client, owner):
    from sessions_app.models import ChatSession

    client.force_login(owner)
    created = client.post(reverse("chat_new"))
    session = ChatSession.objects.get(owner=owner)
    assert created["Location"] == reverse("chat_session", args=[session.pk])

    rename = reverse("chat_rename", args=[session.pk])
    client.post(rename, {"title": "Trip plans"})
    session.refresh_from_db()
    assert session.title == "Trip plans"

    # The page's own messages move the version (the composer's intent is stored with
    # each): a rename after them still applies.
    from sessions_app.services import session_intent_merge

    session_intent_merge(session=session, patch={"enabled": True})
    client.post(rename, {"title": "Trip plans, day 2"})
    session.refresh_from_db()
    assert session.title == "Trip plans, day 2"

    client.post(reverse("chat_delete", args=[session.pk]))
    assert not ChatSession.objects.filter(pk=session.pk).exists()


def test_a_new_chat_opens_with_the_profile_the_person_chose_for_new_chats(client, owner):
    from profiles_app.services import new_chat_default_set, profile_create

    profile_create(user=owner, name="focus")
    new_chat_default_set(user=owner, toolset="focus")
    client.force_login(owner)

    page = client.post(reverse("chat_new"), follow=True).content.decode()

    assert '<option value="focus" selected>focus</option>' in page


def test_a_visitor_who_is_not_signed_in_is_sent_to_sign_in(client):
    response = client.get(reverse("chat"))

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_the_inspector_shows_the_next_turns_tools_and_why_others_are_hidden(client, owner, staff):
    from profiles_app.services import profile_create, tool_disable_globally

    profile_create(user=owner, name="lean", tools=["bash"])
    tool_disable_globally(user=staff, tool="web_fetch", reason="leaks secrets")
    session = _session(owner, intent={"toolset": "lean"})
    client.force_login(owner)

    page = client.get(reverse("chat_inspector", args=[session.pk])).content.decode()

    assert 'id="hidden-bash"' in page
    assert "disabled globally by ops: leaks secrets" in page
    assert "Resident tools" in page
    assert "No model call yet." in page


def test_the_inspector_says_when_the_chats_profile_is_gone(client, owner):
    from profiles_app.services import profile_create, profile_delete

    profile = profile_create(user=owner, name="lean")
    session = _session(owner, intent={"toolset": "lean"})
    profile_delete(user=owner, profile=profile, version=profile.version)
    client.force_login(owner)

    response = client.get(reverse("chat_inspector", args=[session.pk]))

    assert response.status_code == 200
    assert "pick another toolset" in response.content.decode()


def test_another_persons_inspector_is_a_404(client, owner, other_user):
    session = _session(owner)
    client.force_login(other_user)

    assert client.get(reverse("chat_inspector", args=[session.pk])).status_code == 404


def test_plan_mode_is_switched_from_the_composer_at_once(client, owner, other_user):
    session = _session(owner)
    client.force_login(owner)
    url = reverse("chat_plan_mode", args=[session.pk])

    on = client.post(url, {"plan_mode": "on"})
    session.refresh_from_db()
    assert (on.status_code, on["HX-Trigger"], session.plan_mode) == (204, "toolhub:turn-end", True)
    client.post(url, {})
    session.refresh_from_db()
    assert session.plan_mode is False

    client.force_login(other_user)
    assert client.post(url, {"plan_mode": "on"}).status_code == 404
    session.refresh_from_db()
    assert session.plan_mode is False


def _checked(page: str, name: str) -> list[str]:
    import re

    return re.findall(rf'name="{name}" value="(\w+)" checked', page)


@pytest.mark.parametrize(
    ("stored", "shown"),
    [(None, "follow"), (True, "on"), (False, "off")],
)
def test_the_composer_opens_on_the_stored_override_of_tools_and_web_search(
    client, owner, stored, shown
):
    session = _session(owner, intent={"enabled": stored, "web_search": stored})
    client.force_login(owner)

    page = client.get(reverse("chat_session", args=[session.pk])).content.decode()

    assert _checked(page, "tools") == [shown]
    assert _checked(page, "web_search") == [shown]
    assert 'id="composer-follow" type="application/json"' in page


def _follow_data(page: str) -> dict:
    import json
    import re

    found = re.search(r'<script id="composer-follow" type="application/json">(.*?)</script>', page)
    return json.loads(found.group(1))


def test_web_search_on_follow_says_what_each_profile_gives(client, owner, monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", "test-key")
    session = _session(owner, intent={"toolset": "research"})
    client.force_login(owner)

    page = client.get(reverse("chat_session", args=[session.pk])).content.decode()

    web = _follow_data(page)["web_search"]
    assert web["research"] == {
        "on": True,
        "hint": "Follow: on (the research profile has it).",
        "unavailable": "",
    }
    assert web["default"]["hint"] == "Follow: on (the default profile has it)."
    assert web["files"] == {
        "on": False,
        "hint": "Follow: off (not in the 'files' toolset).",
        "unavailable": "",
    }
    # The first render already shows the chat's own profile (research), before any script.
    assert "Follow: on (the research profile has it)." in page
    assert 'id="web-search-on" name="web_search" value="on" disabled' not in page


def test_tools_on_follow_say_when_the_agent_turns_them_off(client, owner, monkeypatch):
    from profiles_app.models import Agent

    monkeypatch.setenv("BRAVE_API_KEY", "test-key")

    agent = Agent.objects.create(owner=owner, name="quiet", tool_intent={"enabled": False})
    session = _session(owner, agent=agent.pk)
    client.force_login(owner)

    page = client.get(reverse("chat_session", args=[session.pk])).content.decode()

    assert _follow_data(page)["tools"] == {
        "on": False,
        "hint": "Follow: off (the agent \u201cquiet\u201d has tools off).",
        "unavailable": "",
    }
    assert _checked(page, "tools") == ["follow"]
    # Tools off on follow: web search follows them off, and the page says so first.
    assert '<p data-hint="no_tools">Tools are off, so web search is too.</p>' in page


def test_web_search_that_cannot_run_says_why_and_cannot_be_switched_on(
    client, owner, staff, monkeypatch
):
    from profiles_app.services import tool_disable_globally

    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    session = _session(owner)
    client.force_login(owner)

    page = client.get(reverse("chat_session", args=[session.pk])).content.decode()

    assert _follow_data(page)["web_search"]["research"]["unavailable"] == "needs BRAVE_API_KEY"
    assert 'id="web-search-on" name="web_search" value="on" disabled' in page
    assert "Unavailable: needs BRAVE_API_KEY." in page

    monkeypatch.setenv("BRAVE_API_KEY", "test-key")
    tool_disable_globally(user=staff, tool="web_search", reason="quota spent")
    page = client.get(reverse("chat_session", args=[session.pk])).content.decode()

    assert "Unavailable: disabled globally by ops: quota spent." in page
