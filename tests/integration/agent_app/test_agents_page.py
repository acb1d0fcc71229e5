"""The Agents page and its API twins: create, edit, duplicate and delete an agent, with
the same rules and errors; another person's agent is a 404, a stale edit is refused."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from agent_app.inspector import inspector_toolset
from profiles_app.models import Agent
from profiles_app.services import default_agent, profile_create
from sessions_app.models import ChatSession
from sessions_app.services import session_create

pytestmark = pytest.mark.django_db


def _form(agent, **fields):
    form = {
        "version": agent.version,
        "name": agent.name,
        "description": agent.description,
        "provider": agent.provider,
        "model": agent.model,
        "system_prompt": agent.system_prompt,
        "toolset": "",
        "strategy": agent.strategy,
    }
    return {**form, **fields}


def test_a_person_creates_an_agent_and_edits_it_on_the_page(client, owner):
    profile_create(user=owner, name="two-tools", mode="only", tools=["read", "glob"])
    client.force_login(owner)

    created = client.post(reverse("agent_new"), {"name": "Reviewer"})
    assert created.status_code == 302
    agent = Agent.objects.get(owner=owner, name="Reviewer")
    page = client.get(created["Location"]).content.decode()
    assert "Agent Reviewer created" in page
    assert "Demo (offline): configured (offline, on this server)" in page
    assert "Anthropic: " in page

    saved = client.post(
        reverse("agent_page", args=[agent.pk]),
        _form(
            agent,
            description="Reads code and says what is wrong",
            provider="demo",
            model="demo-reader",
            system_prompt="Be brief.",
            toolset="two-tools",
            strategy="promote",
            plan_mode="on",
        ),
    )
    assert saved.status_code == 302
    agent.refresh_from_db()
    assert (agent.model, agent.strategy, agent.plan_mode) == ("demo-reader", "promote", True)
    assert agent.tool_intent["toolset"] == "two-tools"
    page = client.get(saved["Location"]).content.decode()
    assert "Agent saved." in page
    assert "Model <code>demo-reader</code>" in page
    assert "tokens of resident tools (2)" in page
    assert "not in the profile &#x27;two-tools&#x27;" in page

    # A new chat with it starts in plan mode, with its tools.
    chat = session_create(user=owner, agent=agent.pk)
    assert chat.plan_mode is True


def test_a_stale_or_invalid_edit_is_refused_with_the_reason_and_changes_nothing(client, owner):
    agent = Agent.objects.create(owner=owner, name="Reviewer")
    client.force_login(owner)
    url = reverse("agent_page", args=[agent.pk])
    client.post(url, _form(agent, model="first"))

    stale = client.post(url, _form(agent, model="second"))
    assert stale.status_code == 409
    assert "the agent changed since you read it" in stale.content.decode()
    agent.refresh_from_db()
    for fields, reason in [
        ({"strategy": "sometimes"}, "unknown strategy"),
        ({"provider": "skynet"}, "unknown provider"),
        ({"toolset": "nope"}, "no profile or preset named &#x27;nope&#x27;"),
        ({"name": " "}, "invalid name &#x27;&#x27;"),
    ]:
        answer = client.post(url, _form(agent, **fields))
        assert answer.status_code == 400, fields
        assert reason in answer.content.decode(), fields
    agent.refresh_from_db()
    assert agent.model == "first"


def test_another_persons_agent_is_a_404_everywhere_and_a_shared_one_is_read_only(
    client, owner, other_user, api
):
    theirs = Agent.objects.create(owner=other_user, name="Theirs")
    shared = Agent.objects.create(owner=None, name="Team")
    client.force_login(owner)
    for name in ("agent_page", "agent_remove"):
        assert client.get(reverse(name, args=[theirs.pk])).status_code == 404
    for name in ("agent_page", "agent_copy", "agent_remove"):
        assert client.post(reverse(name, args=[theirs.pk])).status_code == 404
    assert api(owner).delete(f"/api/agents/{theirs.pk}/", HTTP_IF_MATCH='"1"').status_code == 404

    page = client.get(reverse("agent_page", args=[shared.pk])).content.decode()
    assert "A shared agent: staff edit it." in page
    assert 'name="system_prompt"' not in page
    edit = client.post(reverse("agent_page", args=[shared.pk]), _form(shared, model="x"))
    assert edit.status_code == 403
    shared.refresh_from_db()
    assert shared.model == ""


def test_duplicate_copies_an_agent_as_the_persons_own_under_a_free_name(client, owner, api):
    team = Agent.objects.create(owner=None, name="Team", model="m1", system_prompt="Hi")
    client.force_login(owner)
    first = client.post(reverse("agent_copy", args=[team.pk]))
    second = api(owner).post(f"/api/agents/{team.pk}/duplicate/")
    assert first.status_code == 302
    assert second.status_code == 201
    copies = Agent.objects.filter(owner=owner).order_by("name")
    assert [(a.name, a.model, a.system_prompt) for a in copies] == [
        ("Team copy", "m1", "Hi"),
        ("Team copy 2", "m1", "Hi"),
    ]


def test_deleting_an_agent_moves_its_chats_to_default_and_keeps_them(client, owner, api, staff):
    agent = Agent.objects.create(owner=owner, name="Reviewer")
    chat = session_create(user=owner, agent=agent.pk)
    client.force_login(owner)
    confirm = client.get(reverse("agent_remove", args=[agent.pk])).content.decode()
    assert "Its 1 chat goes on with the <em>default</em> agent" in confirm

    stale = client.post(reverse("agent_remove", args=[agent.pk]), {"version": agent.version - 1})
    assert stale.status_code == 409
    deleted = client.post(reverse("agent_remove", args=[agent.pk]), {"version": agent.version})
    assert deleted.status_code == 302
    assert "its chat goes on with default" in client.get(deleted["Location"]).content.decode()
    assert not Agent.objects.filter(pk=agent.pk).exists()
    assert ChatSession.objects.get(pk=chat.pk).agent_id == default_agent().pk

    # The shared default agent always exists, even for staff; a shared one is audited.
    refused = api(staff).delete(
        f"/api/agents/{default_agent().pk}/", HTTP_IF_MATCH=f'"{default_agent().version}"'
    )
    assert refused.status_code == 409
    team = Agent.objects.create(owner=None, name="Team")
    gone = api(staff).delete(f"/api/agents/{team.pk}/", HTTP_IF_MATCH=f'"{team.version}"')
    assert gone.status_code == 204
    assert LogEntry.objects.filter(change_message="deleted shared agent Team").exists()


def test_the_page_says_which_providers_are_configured_here(client, owner, staff, settings):
    settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL = "", ""
    settings.OPENAI_BASE_URL = "http://user:pw@inner.example:11434/v1"
    agent = Agent.objects.create(owner=owner, name="Reviewer")
    client.force_login(owner)
    page = client.get(reverse("agent_page", args=[agent.pk])).content.decode()
    assert "Anthropic: not configured: no ANTHROPIC_API_KEY is set" in page
    assert "Anthropic — unavailable</option>" in page
    # Where a provider is, an inner host or a credential in its URL, is for staff.
    assert "OpenAI-compatible: configured</li>" in page
    assert "inner.example" not in page
    client.force_login(staff)
    page = client.get(reverse("agents")).content.decode()
    assert "OpenAI-compatible: configured (http://user:pw@inner.example:11434/v1)" in page


def test_a_refused_edit_keeps_what_was_typed(client, owner):
    agent = Agent.objects.create(owner=owner, name="Reviewer", system_prompt="old")
    client.force_login(owner)
    prompt = "A long prompt the person wrote with care.\n" * 50
    refused = client.post(
        reverse("agent_page", args=[agent.pk]),
        _form(agent, system_prompt=prompt, toolset="gone-profile", model="their-model"),
    )
    assert refused.status_code == 400
    page = refused.content.decode()
    assert "A long prompt the person wrote with care." in page
    assert 'value="their-model"' in page
    assert "What you sent is below, not saved" in page
    agent.refresh_from_db()
    assert agent.system_prompt == "old"

    taken = client.post(reverse("agent_new"), {"name": "Reviewer"})
    assert taken.status_code == 409
    assert 'value="Reviewer"' in taken.content.decode()


def test_no_delete_is_offered_where_it_would_be_refused(client, owner, staff):
    team = Agent.objects.create(owner=None, name="Team")
    client.force_login(owner)
    answer = client.get(reverse("agent_remove", args=[team.pk]))
    assert answer.status_code == 403
    assert "shared agents are deleted by staff" in answer.content.decode()
    client.force_login(staff)
    answer = client.get(reverse("agent_remove", args=[default_agent().pk]))
    assert answer.status_code == 409
    assert "the default agent always exists" in answer.content.decode()
    assert Agent.objects.filter(pk=team.pk).exists()


def test_copies_of_a_long_named_agent_all_get_valid_names(client, owner):
    agent = Agent.objects.create(owner=owner, name="A" * 64)
    client.force_login(owner)
    for _ in range(3):
        assert client.post(reverse("agent_copy", args=[agent.pk])).status_code == 302
    names = sorted(Agent.objects.filter(owner=owner).values_list("name", flat=True))
    assert len(names) == 4
    assert all(len(name) <= 64 for name in names)


def test_a_tool_removed_from_an_agent_leaves_its_chats_and_can_be_added_back(client, owner):
    agent = Agent.objects.create(owner=owner, name="Reviewer")
    chat = session_create(user=owner, agent=agent.pk)
    client.force_login(owner)
    page = client.get(reverse("agent_page", args=[agent.pk])).content.decode()
    assert 'id="offered-read"' in page
    assert 'aria-label="Remove read"' in page

    removed = client.post(
        reverse("agent_tool", args=[agent.pk, "remove"]), {"version": agent.version, "tool": "read"}
    )
    assert removed.status_code == 302
    agent.refresh_from_db()
    assert agent.tool_intent["disabled"] == ["read"]
    page = client.get(removed["Location"]).content.decode()
    assert "read removed from Reviewer." in page
    assert 'id="offered-read"' not in page
    assert "removed by the agent" in page
    assert 'aria-label="Add back read"' in page
    # The chat with this agent, which never named the tool, no longer offers it.
    chat.refresh_from_db()
    inspector = inspector_toolset(session=chat)
    assert "read" not in {tool["name"] for tool in inspector["resident"]}
    assert {"name": "read", "layer": "L5", "reason": "removed by the agent"}.items() <= next(
        hidden for hidden in inspector["hidden"] if hidden["name"] == "read"
    ).items()

    added = client.post(
        reverse("agent_tool", args=[agent.pk, "add"]), {"version": agent.version, "tool": "read"}
    )
    assert added.status_code == 302
    agent.refresh_from_db()
    assert agent.tool_intent["disabled"] == []
    chat.refresh_from_db()
    assert "read" in {tool["name"] for tool in inspector_toolset(session=chat)["resident"]}


def test_adding_back_a_tool_outside_the_agents_allow_list_puts_it_on_the_list(client, owner):
    agent = Agent.objects.create(
        owner=owner, name="Narrow", tool_intent={"allowed": ["glob"], "disabled": []}
    )
    client.force_login(owner)
    page = client.get(reverse("agent_page", args=[agent.pk])).content.decode()
    assert "not in the agent&#x27;s allowed tools" in page
    client.post(
        reverse("agent_tool", args=[agent.pk, "add"]), {"version": agent.version, "tool": "read"}
    )
    agent.refresh_from_db()
    assert agent.tool_intent["allowed"] == ["glob", "read"]
    page = client.get(reverse("agent_page", args=[agent.pk])).content.decode()
    assert 'id="offered-read"' in page


def test_agent_tool_edits_that_are_stale_odd_or_not_theirs_are_refused(client, owner, other_user):
    agent = Agent.objects.create(owner=owner, name="Reviewer")
    theirs = Agent.objects.create(owner=other_user, name="Theirs")
    shared = Agent.objects.create(owner=None, name="Team")
    client.force_login(owner)
    url = reverse("agent_tool", args=[agent.pk, "remove"])
    for sent, status, reason in [
        (
            {"version": agent.version + 1, "tool": "read"},
            409,
            "the agent changed since you read it",
        ),
        ({"version": "1x", "tool": "read"}, 409, "the agent changed since you read it"),
        ({"version": agent.version, "tool": "../read"}, 400, "is not a tool name"),
        ({"version": agent.version, "tool": "re\u200dad"}, 400, "is not a tool name"),
        ({"version": agent.version, "tool": "tool_search"}, 400, "cannot be removed from an agent"),
    ]:
        answer = client.post(url, sent)
        assert answer.status_code == status, sent
        assert reason in answer.content.decode(), sent
    agent.refresh_from_db()
    assert agent.tool_intent.get("disabled", []) == []
    assert client.post(reverse("agent_tool", args=[agent.pk, "drop"]), {}).status_code == 404
    assert (
        client.post(
            reverse("agent_tool", args=[theirs.pk, "remove"]),
            {"version": theirs.version, "tool": "read"},
        ).status_code
        == 404
    )
    refused = client.post(
        reverse("agent_tool", args=[shared.pk, "remove"]),
        {"version": shared.version, "tool": "read"},
    )
    assert refused.status_code == 403
    shared.refresh_from_db()
    assert shared.tool_intent.get("disabled", []) == []
    page = client.get(reverse("agent_page", args=[shared.pk])).content.decode()
    assert 'aria-label="Remove read"' not in page
