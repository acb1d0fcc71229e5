"""The chat pages: the shell a person's browser draws the conversation into, and the
session actions beside it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def _session(user, **fields):
    from sessions_app.services import session_create

    return session_create(user=user, **fields)


def test_signing_in_lands_in_an_empty_chat_with_starters_its_tools_can_carry_out(
    client, owner, staff
):
    from profiles_app.services import tool_disable_globally
    from sessions_app.models import ChatSession

    client.force_login(owner)

    landed = client.get(reverse("chat"), follow=True)

    session = ChatSession.objects.get(owner=owner)
    page = landed.content.decode()
    assert landed.redirect_chain[-1][0] == reverse("chat_session", args=[session.pk])
    assert '<h1 id="chat-title" title="New chat">New chat</h1>' in page
    assert "What can I help with?" in page
    starters = re.findall(r'data-starter="([^"]*)"', page)
    assert "Use calculate: 0.17 * 2340" in starters
    # calculate loads when needed, and its starter says so.
    assert "the model loads it when needed" in page
    # Landing again reuses the empty chat rather than piling up new ones.
    client.get(reverse("chat"))
    assert ChatSession.objects.filter(owner=owner).count() == 1

    # A tool nobody may use is not offered as a starter.
    tool_disable_globally(user=staff, tool="calculate", reason="maintenance")
    page = client.get(reverse("chat"), follow=True).content.decode()
    assert "Use calculate: 0.17 * 2340" not in re.findall(r'data-starter="([^"]*)"', page)
    assert "Use current_time" in page


def test_a_chat_with_messages_opens_with_its_socket_and_intent_and_no_starters(client, owner):
    from sessions_app.eventlog import event_append

    session = _session(owner, intent={"toolset": "safe", "enabled": False})
    event_append(session_id=session.pk, turn="t", kind="user_message", data={"text": "hi"})
    client.force_login(owner)

    response = client.get(reverse("chat_session", args=[session.pk]))

    page = response.content.decode()
    assert f'data-ws="/ws/sessions/{session.pk}/"' in page
    assert '<option value="safe" selected>' in page
    assert 'id="tools-off" name="tools" value="off" checked' in page
    assert '<h2 id="shortcuts-title">Keyboard shortcuts</h2>' in page
    assert '<h2 id="search-title">Search chats</h2>' in page
    assert "data-starters" not in page


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
    assert client.get(reverse("chat_session", args=[session.pk])).status_code == 404
    assert ChatSession.objects.get(pk=session.pk).deleted is not None


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
    assert "Sent with every message" in page
    assert "No model call yet." in page


def test_the_inspector_says_it_in_words_and_keeps_codes_for_its_details(client, owner, staff):
    from profiles_app.services import profile_create, tool_disable_globally

    profile_create(user=owner, name="lean", tools=["bash"])
    tool_disable_globally(user=staff, tool="grep", reason="too slow today")
    session = _session(owner, intent={"toolset": "lean"}, plan_mode=True)
    client.force_login(owner)

    page = client.get(reverse("chat_inspector", args=[session.pk])).content.decode()
    operator = r'<details class="operator-details">.*?</details>'
    details = " ".join(re.findall(operator, page, re.S))
    plain = " ".join(re.sub(r"<[^>]+>", " ", re.sub(operator, "", page, flags=re.S)).split())

    # Why each tool is not offered, as a sentence a person reads.
    assert "grep turned off by an operator (ops): too slow today" in plain
    assert "bash not in this chat&#x27;s profile" in plain
    assert "write not allowed here: hidden in plan mode" in plain
    # No layer code, fingerprint, strategy or tier outside the Details, where they are.
    for jargon in (r"\bL[1-5][ab]?\b", "(?i)fingerprint", "strategy", r"\btiers?\b", "Ours"):
        assert not re.search(jargon, plain), jargon
        assert re.search(jargon, details) or jargon == "Ours", jargon


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
    url = reverse("chat_options", args=[session.pk])

    on = client.post(url, {"plan_mode": "on"})
    session.refresh_from_db()
    assert (on.status_code, session.plan_mode) == (200, True)
    assert "From your next message, plan mode is on." in on.content.decode()
    assert 'id="plan-mode" name="plan_mode" checked' in on.content.decode()
    client.post(url, {"plan_mode": "off"})
    session.refresh_from_db()
    assert session.plan_mode is False

    client.force_login(other_user)
    assert client.post(url, {"plan_mode": "on"}).status_code == 404
    session.refresh_from_db()
    assert session.plan_mode is False


def test_each_composer_choice_is_stored_when_made_and_a_bad_one_changes_nothing(client, owner):
    session = _session(owner)
    client.force_login(owner)
    url = reverse("chat_options", args=[session.pk])

    for choice, said in [
        ({"toolset": "research"}, "the profile is research"),
        ({"tools": "off"}, "tools off"),
        ({"web_search": "on"}, "web search on"),
    ]:
        answer = client.post(url, choice)
        assert (answer.status_code, f"From your next message, {said}.") == (
            200,
            re.search(r"From your next message, [^<]*", answer.content.decode()).group(0),
        )
    session.refresh_from_db()
    stored = session.tool_intent
    assert (stored["toolset"], stored["enabled"], stored["web_search"]) == ("research", False, True)
    page = client.get(reverse("chat_session", args=[session.pk])).content.decode()
    assert _checked(page, "tools") == ["off"]
    assert '<option value="research" selected>' in page

    version = session.version
    for bad in (
        {"tools": "maybe"},
        {"toolset": "no-such-profile"},
        {"agent": "\uff11"},  # a fullwidth 1: a digit to str.isdigit, not an id
        {"agent": "9" * 30},
        {"plan_mode": "yes"},
        {"colour": "red"},
        {"toolset": "\x00"},
        # All or none: a good choice beside a bad one is not kept either.
        {"model": "demo:demo", "tools": "sideways"},
    ):
        refused = client.post(url, bad)
        assert refused.status_code in (400, 404), bad
        assert "Not changed: " in refused.content.decode(), bad
        # The panel comes back as stored: Tools still shows off.
        assert _checked(refused.content.decode(), "tools") == ["off"], bad
    session.refresh_from_db()
    assert (session.version, session.tool_intent) == (version, stored)


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
        "agent_says": None,
    }
    assert web["default"]["hint"] == "Follow: on (the default profile has it)."
    assert web["files"] == {
        "on": False,
        "hint": "Follow: off (not in the 'files' toolset).",
        "unavailable": "",
        "agent_says": None,
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
        "agent_says": None,
    }
    assert _checked(page, "tools") == ["follow"]
    # Tools off on follow: web search follows them off, and the page says so first.
    assert "<p data-hint>Tools are off, so web search is too.</p>" in page


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

    assert "Unavailable: turned off by an operator (ops): quota spent." in page


def test_a_deleted_chat_can_be_brought_back_with_undo_until_it_is_purged(
    client, owner, other_user, settings
):
    from datetime import timedelta

    from sessions_app.models import ChatSession
    from sessions_app.services import UNDO_SECONDS

    kept = _session(owner, title="Keep me")
    binned = _session(owner, title="Trip plans")
    client.force_login(owner)

    landed = client.post(reverse("chat_delete", args=[binned.pk]), follow=True)
    page = landed.content.decode()
    assert "Deleted “Trip plans”." in page
    assert reverse("chat_restore", args=[binned.pk]) in page
    # Offered once: the next page does not offer it again.
    assert "Deleted “Trip plans”." not in client.get(reverse("chat"), follow=True).content.decode()
    assert "Trip plans" not in client.get(reverse("chat_session", args=[kept.pk])).content.decode()

    client.force_login(other_user)
    assert client.post(reverse("chat_restore", args=[binned.pk])).status_code == 404
    client.force_login(owner)
    restored = client.post(reverse("chat_restore", args=[binned.pk]), follow=True)
    assert restored.redirect_chain[-1][0] == reverse("chat_session", args=[binned.pk])
    assert "“Trip plans” is back." in restored.content.decode()

    client.post(reverse("chat_delete", args=[binned.pk]))
    ChatSession.objects.filter(pk=binned.pk).update(
        deleted=ChatSession.objects.get(pk=binned.pk).deleted - timedelta(seconds=UNDO_SECONDS + 1)
    )
    client.post(reverse("chat_delete", args=[kept.pk]))
    assert not ChatSession.objects.filter(pk=binned.pk).exists()
    # Whoever deletes nothing more, the servers' reapers purge it too.
    from sessions_app.services import sessions_purge_binned

    ChatSession.objects.filter(pk=kept.pk).update(
        deleted=ChatSession.objects.get(pk=kept.pk).deleted - timedelta(seconds=UNDO_SECONDS + 1)
    )
    assert sessions_purge_binned() == 1
    assert client.post(reverse("chat_restore", args=[binned.pk])).status_code == 404


def test_new_chat_reuses_an_empty_one_instead_of_piling_them_up(client, owner):
    from sessions_app.eventlog import event_append
    from sessions_app.models import ChatSession

    client.force_login(owner)
    first = client.post(reverse("chat_new"))["Location"]
    again = client.post(reverse("chat_new"))["Location"]
    assert again == first

    event_append(
        session_id=ChatSession.objects.get(owner=owner).pk,
        turn="t",
        kind="user_message",
        data={"text": "hi"},
    )
    third = client.post(reverse("chat_new"))["Location"]
    assert third != first
    # An empty chat someone set up (plan mode here) is theirs to keep, not reused.
    client.post(f"{third}options/", {"plan_mode": "on"})
    fourth = client.post(reverse("chat_new"))["Location"]
    assert fourth != third
    assert ChatSession.objects.filter(owner=owner).count() == 3


def test_search_finds_the_persons_chats_by_title_and_by_message(client, owner, other_user):
    from sessions_app.eventlog import events_append

    titled = _session(owner, title="Otter facts")
    talked = _session(owner, title="Misc")
    events_append(
        session_id=talked.pk,
        turn="t",
        items=[
            ("user_message", {"text": "tell me about sea OTTERS and their tools please"}),
            ("assistant_message", {"text": "They use rocks.", "html": "<p>They use rocks.</p>"}),
        ],
    )
    theirs = _session(other_user, title="Otters too")
    client.force_login(owner)

    page = client.get(reverse("chat_search"), {"q": "  otter "}).content.decode()

    assert "Otter facts" in page
    assert f"{reverse('chat_session', args=[talked.pk])}#m1" in page
    assert "tell me about sea OTTERS and their tools please" in page
    assert str(theirs.pk) not in page
    assert str(titled.pk) in page
    nothing = client.get(reverse("chat_search"), {"q": "walrus"}).content.decode()
    assert "No chat has “walrus”." in nothing


def test_the_inspector_previews_the_composers_settings_before_any_turn(client, owner):
    import json

    from sessions_app.models import ChatSession

    session = _session(owner)
    client.force_login(owner)
    url = reverse("chat_inspector", args=[session.pk])

    off = client.get(url, {"draft": json.dumps({"enabled": False})}).content.decode()
    bad = client.get(url, {"draft": json.dumps({"toolset": "no-such-profile"})}).content.decode()
    broken = client.get(url, {"draft": "{not json"})

    assert "None: this turn sends no tools." in off
    assert "None: this turn sends no tools." not in client.get(url).content.decode()
    assert "no-such-profile" in bad
    assert broken.status_code == 200
    assert "is not JSON" in broken.content.decode()
    # A preview stores nothing.
    assert ChatSession.objects.get(pk=session.pk).tool_intent == session.tool_intent


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("  hello\n  there ", "hello there"),
        ("word " * 30, "word word word word word word word word word word word…"),
        ("x" * 80, "x" * 59 + "…"),
    ],
)
def test_a_chats_title_comes_from_its_first_message_cut_at_a_word(text, title):
    from toolhub.lib.titles import title_from

    assert title_from(text) == title


def test_a_model_written_title_never_replaces_one_the_person_chose(owner):
    from sessions_app.models import ChatSession
    from sessions_app.services import session_title_from_model, session_update
    from toolhub.lib.titles import title_from

    auto = _session(owner, title=title_from("what about otters"))
    renamed = _session(owner, title="My otters")
    session_update(user=owner, session=renamed, version=renamed.version, title="Mine")

    kept = session_title_from_model(
        session_id=auto.pk, turn="t", question="what about otters", title=' "Otters." '
    )
    refused = session_title_from_model(
        session_id=renamed.pk, turn="t", question="what about otters", title="Otters"
    )

    assert [(e.kind, e.data) for e in kept] == [("title", {"title": "Otters"})]
    assert refused == []
    assert ChatSession.objects.get(pk=auto.pk).title == "Otters"
    assert ChatSession.objects.get(pk=renamed.pk).title == "Mine"


def test_the_chats_list_groups_by_day_pins_and_archives(client, owner, other_user):
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.models import ChatSession

    now = timezone.now()
    ages = {"Fresh": 0, "Older": 1, "Week": 4, "Long ago": 70}
    chats = {title: _session(owner, title=title) for title in ages}
    for title, days in ages.items():
        ChatSession.objects.filter(pk=chats[title].pk).update(updated=now - timedelta(days=days))
    client.force_login(owner)
    url = reverse("chat_session", args=[chats["Fresh"].pk])

    def groups() -> list[tuple[str, list[str]]]:
        page = client.get(url).content.decode()
        start = page.index('aria-label="Chats"')
        nav = page[start : page.index("</nav>", start)]
        found = re.findall(r'class="chat-group"[^>]*>([^<]+)</h2>\s*<ul[^>]*>(.*?)</ul>', nav, re.S)
        return [(label, re.findall(r'title="([^"]+)"', body)) for label, body in found]

    month = f"{now - timedelta(days=70):%B %Y}"
    assert groups() == [
        ("Today", ["Fresh"]),
        ("Yesterday", ["Older"]),
        ("Previous 7 days", ["Week"]),
        (month, ["Long ago"]),
    ]

    client.post(reverse("chat_keep", args=[chats["Long ago"].pk, "pin"]))
    client.post(reverse("chat_keep", args=[chats["Older"].pk, "archive"]))
    assert groups() == [
        ("Pinned", ["Long ago"]),
        ("Today", ["Fresh"]),
        ("Previous 7 days", ["Week"]),
    ]
    page = client.get(url).content.decode()
    assert "Archived (1)" in page
    # Out of the list, still found by search, and brought back.
    found = client.get(reverse("chat_search"), {"q": "Older"}).content.decode()
    assert "Older" in found
    client.post(reverse("chat_keep", args=[chats["Older"].pk, "unarchive"]))
    assert ("Yesterday", ["Older"]) in groups()

    client.force_login(other_user)
    assert client.post(reverse("chat_keep", args=[chats["Fresh"].pk, "pin"])).status_code == 404
    client.force_login(owner)
    assert client.post(reverse("chat_keep", args=[chats["Fresh"].pk, "hide"])).status_code == 404
    assert ChatSession.objects.get(pk=chats["Fresh"].pk).pinned is False
