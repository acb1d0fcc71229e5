"""A person's own credential for an MCP server that takes one: set, replaced and removed
on the MCP credentials page or the API, never shown back to anybody, and used only for
its owner's calls (each person's on a connection of their own). The server is real
(tests/mcp/server.py --asking, whose ``whoami`` says which credential a call came with);
turns run through the session socket against the fake Messages API."""

from __future__ import annotations

import os

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from agent_app import mcp
from agent_app.models import McpCredential, McpServer
from tests.integration.agent_app.test_mcp_asks_chat import new_session, result_of
from tests.integration.agent_app.test_mcp_servers import chat, connected, load_then_call
from tests.integration.chat import open_socket
from tests.mcp import SERVER, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ADA = "pat-of-the-owner-1234"
BOB = "pat-of-the-other-5678"


@pytest.fixture
def personal(registry_state, staff):
    """``ask``, a stdio server that takes each person's own PERSON_TOKEN."""
    server = McpServer.objects.create(
        name="ask",
        transport="stdio",
        command=os.sys.executable,
        args=[str(SERVER), "--asking"],
        user_credential="PERSON_TOKEN",
        created_by=staff,
    )
    mcp.mcp_sync(wait=10)
    wait_for(lambda: connected("ask"), what="the server to connect")
    yield server
    McpServer.objects.all().delete()
    mcp.mcp_sync(wait=10)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


async def whoami(user, model) -> dict:
    load_then_call(model, "ask__whoami", {})
    session = await new_session(user)
    socket = await open_socket(session.pk, user)
    frames = await chat(socket, "who am I to that server?")
    await socket.disconnect()
    return result_of(frames)["data"]


@pytest.mark.processes
async def test_each_persons_calls_go_with_their_own_credential_and_nobody_elses(
    owner, other_user, staff, model, personal, api
):
    url = f"/api/mcp-credentials/{personal.pk}/"
    put = database_sync_to_async(
        lambda user, value: api(user).put(url, {"value": value}, format="json")
    )
    await put(owner, ADA)
    await put(other_user, BOB)

    mine, theirs, nobodys = await whoami(owner, model), await whoami(other_user, model), None
    nobodys = await whoami(staff, model)

    assert mine["content"] == ADA
    assert theirs["content"] == BOB
    assert nobodys["status"] == "error"
    assert "takes your own credential, and you have not added one" in nobodys["content"]
    assert mcp.manager.chats("ask") == 2


@pytest.mark.processes
def test_a_credential_is_never_shown_back_anywhere(owner, staff, personal, api):
    api(owner).put(f"/api/mcp-credentials/{personal.pk}/", {"value": ADA}, format="json")

    listed = api(owner).get("/api/mcp-credentials/")
    page = signed_in(owner).get("/settings/mcp/")
    servers = api(staff).get("/api/mcp-servers/")
    admin = signed_in(_superuser(staff)).get(f"/admin/agent_app/mcpserver/{personal.pk}/change/")

    assert listed.json() == [
        {
            "server_id": personal.pk,
            "server": "ask",
            "transport": "stdio",
            "carried_in": "PERSON_TOKEN",
            "set": True,
            "updated": listed.json()[0]["updated"],
        }
    ]
    assert "Yours is set" in page.content.decode()
    for response in (listed, page, servers, admin):
        assert response.status_code == 200
        assert ADA not in response.content.decode()


def _superuser(user):
    user.is_superuser = True
    user.save()
    return user


@pytest.mark.processes
def test_a_credential_no_variable_can_carry_is_refused_and_the_old_one_kept(owner, personal, api):
    url = f"/api/mcp-credentials/{personal.pk}/"
    api(owner).put(url, {"value": ADA}, format="json")

    refused = api(owner).put(url, {"value": "bad\x00value"}, format="json")
    blank = api(owner).put(url, {"value": "   "}, format="json")

    assert refused.status_code == 400
    assert "bad" not in refused.content.decode()
    assert blank.status_code == 400
    assert McpCredential.objects.get(owner=owner).value == ADA


@pytest.mark.processes
def test_only_servers_that_take_one_have_credentials_and_only_for_their_owner(
    owner, other_user, staff, personal, api
):
    plain = McpServer.objects.create(
        name="plain", transport="stdio", command=os.sys.executable, args=[str(SERVER)]
    )
    api(other_user).put(f"/api/mcp-credentials/{personal.pk}/", {"value": BOB}, format="json")

    not_taken = api(owner).put(f"/api/mcp-credentials/{plain.pk}/", {"value": ADA}, format="json")
    anonymous = api().get("/api/mcp-credentials/")
    mine = api(owner).get("/api/mcp-credentials/").json()
    removed = api(other_user).delete(f"/api/mcp-credentials/{personal.pk}/")

    assert not_taken.status_code == 404
    assert anonymous.status_code == 401
    assert [entry["set"] for entry in mine] == [False]  # the other person's is theirs
    assert removed.status_code == 204
    assert not McpCredential.objects.exists()


@pytest.mark.processes
def test_the_credentials_page_sets_replaces_and_removes_a_persons_own(owner, personal):
    client = signed_in(owner)

    empty = client.get("/settings/mcp/").content.decode()
    client.post("/settings/mcp/", {"server": personal.pk, "value": ADA})
    client.post("/settings/mcp/", {"server": personal.pk, "value": BOB})
    replaced = McpCredential.objects.get(owner=owner).value
    client.post("/settings/mcp/", {"server": personal.pk, "action": "remove"})
    refused = client.post("/settings/mcp/", {"server": personal.pk, "value": "x\x00y"})
    foreign = client.post("/settings/mcp/", {"server": 10_000, "value": ADA})

    assert "Not set" in empty
    assert replaced == BOB
    assert not McpCredential.objects.exists()
    assert refused.status_code == 400
    assert "cannot be sent" in refused.content.decode()
    assert foreign.status_code == 404


@pytest.mark.processes
def test_credentials_are_forgotten_when_where_they_go_changes(owner, staff, personal, api):
    """A person gave their token for one command or URL; re-pointed, the server gets none
    of it until they add it again."""
    api(owner).put(f"/api/mcp-credentials/{personal.pk}/", {"value": ADA}, format="json")
    renamed = api(staff).patch(f"/api/mcp-servers/{personal.pk}/", {"timeout": 30}, format="json")
    kept = McpCredential.objects.count()

    moved = api(staff).patch(
        f"/api/mcp-servers/{personal.pk}/", {"args": [str(SERVER), "--lively"]}, format="json"
    )

    assert renamed.status_code == moved.status_code == 200
    assert kept == 1
    assert not McpCredential.objects.exists()
    from django.contrib.admin.models import LogEntry

    assert "forgot 1 personal credential" in LogEntry.objects.latest("action_time").change_message


def test_a_server_that_signs_in_with_oauth_cannot_take_personal_credentials(staff, api):
    """The grant's bearer token would go with every person's call, over theirs."""
    both = api(staff).post(
        "/api/mcp-servers/",
        {
            "name": "both",
            "transport": "streamable_http",
            "url": "https://mcp.example/mcp",
            "auth": "oauth",
            "user_credential": "Authorization",
        },
        format="json",
    )

    assert both.status_code == 409
    assert "cannot also take each person's own credential" in both.json()["message"]
    assert not McpServer.objects.filter(name="both").exists()
