"""The admin's change forms obey the services' rules and leave the services' audit entry.

Each bad value is posted as a staff member would type it into the admin; the page must
refuse it with the message the API gives for the same value, store nothing, and a good
change must leave one change-log entry by the operator (Django's own entry is not
written beside it).
"""

from __future__ import annotations

import html
import json

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry

from agent_app.models import McpServer
from profiles_app import services as profile_services
from profiles_app.models import Agent, ToolProfile
from sessions_app import services as session_services
from sessions_app.models import ChatSession

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(django_user_model, client):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123-xyz")
    client.force_login(user)
    return user


def _page(response) -> str:
    return html.unescape(response.content.decode())


def _profile_form(**fields) -> dict[str, str]:
    form = {"name": "reading", "mode": "only", "tools": '["read"]', "approvals": "{}"}
    form.update(fields)
    return form


@pytest.mark.parametrize(
    ("mode", "tools", "message"),
    [
        ("only", '{"x": 1}', "tools must be a list of tool names"),
        ("only", '"read"', "tools must be a list of tool names"),
        ("only", '["x y"]', "tools: 'x y' is not a tool name"),
        ("all_except", '["tool_search"]', "tool_search cannot be removed from a profile"),
        ("only", "[" + ", ".join(['"read"'] * 1) + ", 7]", "tools: 7 is not a tool name"),
    ],
)
def test_the_profile_admin_refuses_what_the_service_refuses_with_its_message(
    client, root, mode, tools, message
):
    response = client.post(
        "/admin/profiles_app/toolprofile/add/", _profile_form(mode=mode, tools=tools)
    )

    assert response.status_code == 200
    assert message in _page(response)
    assert not ToolProfile.objects.exists()
    assert not LogEntry.objects.exists()


def test_a_profile_changed_in_the_admin_is_stored_as_the_service_stores_it_and_audited(
    client, root, owner
):
    profile = profile_services.profile_create(user=owner, name="mine", mode="only", tools=["read"])
    url = f"/admin/profiles_app/toolprofile/{profile.pk}/change/"

    response = client.post(url, _profile_form(name="mine", tools='["grep", "grep", "read"]'))

    assert response.status_code == 302, _page(response)[-3000:]
    profile.refresh_from_db()
    # Duplicates are folded as the API folds them; the version moves as on any write.
    assert (profile.tools, profile.owner, profile.version) == (["grep", "read"], owner, 2)
    entry = LogEntry.objects.get()
    assert (entry.user, entry.action_flag) == (root, CHANGE)
    assert entry.get_change_message() == "changed approvals, mode, name, tools"


def test_an_only_profile_of_a_string_never_reaches_a_turn(client, root, owner):
    profile = profile_services.profile_create(user=owner, name="mine", mode="only", tools=["read"])

    response = client.post(
        f"/admin/profiles_app/toolprofile/{profile.pk}/change/",
        _profile_form(name="mine", tools='"read"'),
    )

    profile.refresh_from_db()
    assert response.status_code == 200
    assert profile.tools == ["read"]


def test_a_shared_profile_added_in_the_admin_is_the_services_with_one_entry(client, root):
    response = client.post("/admin/profiles_app/toolprofile/add/", _profile_form())

    assert response.status_code == 302, _page(response)[-3000:]
    profile = ToolProfile.objects.get()
    assert (profile.name, profile.owner, profile.tools) == ("reading", None, ["read"])
    entry = LogEntry.objects.get()
    assert (entry.user, entry.action_flag) == (root, ADDITION)
    assert entry.get_change_message() == "created shared profile reading"


def test_deleting_a_persons_profile_in_the_admin_is_audited(client, root, owner):
    profile = profile_services.profile_create(user=owner, name="mine")

    response = client.post(f"/admin/profiles_app/toolprofile/{profile.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not ToolProfile.objects.exists()
    entry = LogEntry.objects.get()
    assert (entry.user, entry.action_flag) == (root, DELETION)


def _agent_form(agent: Agent, **fields) -> dict[str, str]:
    form = {
        "name": agent.name,
        "description": agent.description,
        "system_prompt": agent.system_prompt,
        "provider": agent.provider,
        "model": agent.model,
        "context_window": "" if agent.context_window is None else str(agent.context_window),
        "tool_intent": json.dumps(agent.tool_intent),
        "strategy": agent.strategy,
        "tier_budget": "",
    }
    form.update(fields)
    return form


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("tool_intent", '{"disabled": ["tool_search"]}', "tool_search cannot be removed"),
        ("tool_intent", '{"toolset": "nobody-has-this"}', "nobody-has-this"),
        ("context_window", "5", "The context window must be a whole number of tokens"),
        ("name", "default", "'default' is a built-in preset name"),
    ],
)
def test_the_agent_admin_refuses_what_the_service_refuses(
    client, root, owner, field, value, message
):
    agent = profile_services.agent_create(user=owner, name="helper")

    response = client.post(
        f"/admin/profiles_app/agent/{agent.pk}/change/", _agent_form(agent, **{field: value})
    )

    assert response.status_code == 200
    assert message in _page(response)
    agent.refresh_from_db()
    assert (agent.version, getattr(agent, field) != value) == (1, True)
    assert not LogEntry.objects.exists()


def test_an_agent_changed_in_the_admin_names_only_profiles_its_owner_may_use(
    client, root, owner, other_user
):
    profile_services.profile_create(user=other_user, name="others")
    agent = profile_services.agent_create(user=owner, name="helper")
    url = f"/admin/profiles_app/agent/{agent.pk}/change/"

    refused = client.post(url, _agent_form(agent, tool_intent='{"toolset": "others"}'))
    changed = client.post(url, _agent_form(agent, system_prompt="Be brief."))

    assert refused.status_code == 200
    assert changed.status_code == 302, _page(changed)[-3000:]
    agent.refresh_from_db()
    assert (agent.system_prompt, agent.tool_intent.get("toolset")) == ("Be brief.", None)
    assert [(entry.user, entry.action_flag) for entry in LogEntry.objects.all()] == [(root, CHANGE)]


def _session_form(session: ChatSession, **fields) -> dict[str, str]:
    form = {
        "title": session.title,
        "agent": str(session.agent_id),
        "tool_intent": json.dumps(session.tool_intent),
        "allowed_tools": json.dumps(session.allowed_tools),
    }
    form.update(fields)
    return form


def test_the_chat_admin_refuses_a_meta_tool_removal_and_audits_a_change(client, root, owner):
    session = session_services.session_create(user=owner)
    url = f"/admin/sessions_app/chatsession/{session.pk}/change/"

    refused = client.post(url, _session_form(session, tool_intent='{"disabled": ["tool_search"]}'))
    bad_list = client.post(url, _session_form(session, allowed_tools='"bash"'))
    changed = client.post(url, _session_form(session, title="Renamed", plan_mode="on"))

    assert refused.status_code == bad_list.status_code == 200
    assert "tool_search cannot be removed from a chat" in _page(refused)
    assert "allowed_tools must be a list of tool names" in _page(bad_list)
    assert changed.status_code == 302, _page(changed)[-3000:]
    session.refresh_from_db()
    assert (session.title, session.plan_mode, session.version) == ("Renamed", True, 2)
    assert "tool_search" not in session.tool_intent.get("disabled", [])
    assert [(entry.user, entry.action_flag) for entry in LogEntry.objects.all()] == [(root, CHANGE)]


def test_chats_are_not_started_in_the_admin(client, root):
    assert client.get("/admin/sessions_app/chatsession/add/").status_code == 403


def test_an_mcp_server_added_in_the_admin_is_checked_and_audited_as_the_api_does(client, root):
    form = {
        "name": "files",
        "transport": "stdio",
        "command": "",
        "args": "[]",
        "url": "",
        "timeout": "30",
        "timeout_ceiling": "120",
        "auth": "none",
    }

    refused = client.post("/admin/agent_app/mcpserver/add/", form)
    bad_env = client.post(
        "/admin/agent_app/mcpserver/add/",
        {**form, "command": "npx", "env_update": '{"TOKEN": 5}'},
    )
    added = client.post("/admin/agent_app/mcpserver/add/", {**form, "command": "npx"})

    assert refused.status_code == bad_env.status_code == 200
    assert "needs a command" in _page(refused)
    assert "env" in _page(bad_env)
    assert added.status_code == 302, _page(added)[-3000:]
    server = McpServer.objects.get()
    assert server.created_by == root
    entry = LogEntry.objects.get()
    assert (entry.user, entry.action_flag, entry.get_change_message()) == (
        root,
        ADDITION,
        "added",
    )
