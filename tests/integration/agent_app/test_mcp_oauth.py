"""OAuth 2.1 MCP servers in the product: a staff member signs in through the real redirect,
the grant is stored, the process's connection uses it, refreshes it and gives it up;
two processes sharing the grant refresh it once; the MCP server's headers go to it alone.

The servers are real: ``tests/mcp/oauth_server.py`` runs the SDK's authorization server
routes over an in-memory provider (it approves every request at once) and the MCP server
they protect, on two local ports. The browser is the Django test client for toolhub's
pages and httpx for the authorization server, each following the other's redirect.
"""

from __future__ import annotations

import asyncio
import html
import re
import time
from typing import cast
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.test import Client

from agent_app import mcp
from agent_app.mcp_grants import DatabaseOAuthStore
from agent_app.models import McpOAuthGrant, McpOAuthSignIn, McpServer
from tests.mcp import free_port, oauth_http_server, wait_for
from toolhub.tools import ToolContext, ToolRegistry, registry
from toolhub.tools.mcp import McpManager
from toolhub.tools.tool import ToolUnavailable

pytestmark = pytest.mark.django_db(transaction=True)


class Remote:
    """The running authorization server and MCP server, and the row that points at it."""

    def __init__(self, as_port: int, mcp_port: int, server: McpServer) -> None:
        self.issuer = f"http://127.0.0.1:{as_port}"
        self.server = server

    def stats(self) -> dict:
        return httpx.get(f"{self.issuer}/test/stats").json()

    def break_refresh(self) -> None:
        httpx.post(f"{self.issuer}/test/revoke-refresh").raise_for_status()


def _remote(staff, tmp_path, *args: str, headers: dict[str, str] | None = None):
    as_port, mcp_port = free_port(), free_port()
    paces = _pace(health_interval=0.2, backoff_initial=0.1, backoff_max=0.5, probe_interval=0.2)
    with oauth_http_server(as_port, mcp_port, *args, log=tmp_path / "oauth-server.log"):
        server = McpServer.objects.create(
            name="remote",
            transport="streamable_http",
            url=f"http://127.0.0.1:{mcp_port}/mcp",
            headers=headers or {},
            auth="oauth",
            created_by=staff,
        )
        try:
            yield Remote(as_port, mcp_port, server)
        finally:
            McpServer.objects.all().delete()
            mcp.mcp_sync(wait=10)
            _pace(**paces)


@pytest.fixture
def remote(staff, tmp_path, registry_state):
    """An OAuth server whose access tokens last an hour."""
    yield from _remote(staff, tmp_path)


@pytest.fixture
def short_lived(staff, tmp_path, registry_state):
    """An OAuth server whose access tokens last three seconds."""
    yield from _remote(staff, tmp_path, "--access-seconds", "3")


@pytest.fixture
def rotating(staff, tmp_path, registry_state):
    """An OAuth server whose access tokens last six seconds, and which takes a refresh
    token presented again after its rotation as stolen: it revokes every token of that
    sign-in (OAuth 2.1's advice to a server that rotates them)."""
    yield from _remote(staff, tmp_path, "--access-seconds", "6", "--reuse-revokes")


@pytest.fixture
def keyed(staff, tmp_path, registry_state):
    """An OAuth server configured with a header of its own, whose tokens last three
    seconds."""
    yield from _remote(
        staff, tmp_path, "--access-seconds", "3", headers={"X-Api-Key": "mcp-server-key"}
    )


@pytest.fixture
def second_process(tmp_path):
    """What another process has: a manager with its own registry and connections, and
    the same database."""
    errlog = (tmp_path / "second-process.log").open("a")
    manager = McpManager(
        ToolRegistry(),
        health_interval=0.2,
        probe_interval=0.2,
        backoff_initial=0.1,
        backoff_max=0.5,
        errlog=errlog,
        oauth_store=DatabaseOAuthStore(),
    )
    yield manager
    manager.stop()
    errlog.close()


def _pace(**knobs: float) -> dict[str, float]:
    was = {name: getattr(mcp.manager, name) for name in knobs}
    for name, value in knobs.items():
        setattr(mcp.manager, name, value)
    return was


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def state_of(name: str) -> str | None:
    status = mcp.manager.statuses().get(name)
    return status.state if status is not None else None


def begin(client: Client, server: McpServer) -> str:
    """Press "Sign in": the authorization server's URL the page moves on to."""
    begun = client.post(f"/ops/mcp/{server.pk}/oauth/sign-in/")
    assert begun.status_code == 200, begun.content.decode()[:2000]
    page = begun.content.decode()
    url = html.unescape(re.search(r'http-equiv="refresh" content="0; url=([^"]+)"', page)[1])
    assert f'href="{html.escape(url)}"' in page
    return url


def sign_in(client: Client, server: McpServer):
    """Press "Sign in" and follow the authorization server back to toolhub's callback:
    the callback's response, and the callback URL (to replay)."""
    # The authorization server approves at once and sends the browser back with a code.
    approved = httpx.get(begin(client, server))
    assert approved.status_code == 302, approved.text
    back = urlsplit(approved.headers["location"])
    assert back.path == f"/ops/mcp/{server.pk}/oauth/callback/"
    callback = f"{back.path}?{back.query}"
    return client.get(callback), callback


def call(tool: str, arguments: dict | None = None):
    return asyncio.run(registry.get(tool).execute(arguments or {}, ToolContext(env={})))


def signed_in_and_connected(staff, remote: Remote) -> McpOAuthGrant:
    finished, _ = sign_in(browser(staff), remote.server)
    assert finished.status_code == 302, finished.content.decode()[:2000]
    # What every other process's poll does within TOOLHUB_MCP_POLL seconds.
    mcp.mcp_sync(wait=10)
    wait_for(lambda: state_of("remote") == "connected", what="remote to connect")
    return McpOAuthGrant.objects.get(server=remote.server)


@pytest.mark.processes
def test_an_oauth_server_without_a_grant_needs_sign_in_and_its_tools_are_not_offered(
    staff, api, remote
):
    mcp.mcp_sync(wait=10)

    wait_for(lambda: state_of("remote") == "needs_sign_in", what="remote to need sign-in")
    status = mcp.manager.statuses()["remote"]
    assert "needs sign-in" in status.error
    assert not [name for name in registry.names() if name.startswith("remote__")]
    detail = api(staff).get(f"/api/mcp-servers/{remote.server.pk}/").json()
    assert detail["state"] == "needs_sign_in"
    assert detail["auth"] == "oauth"
    assert detail["signed_in_by"] is None
    page = browser(staff).get("/ops/tools/").content.decode()
    assert "Needs sign-in" in page
    assert f'action="/ops/mcp/{remote.server.pk}/oauth/sign-in/"' in page
    assert "Sign in to MCP server remote" in page


@pytest.mark.processes
def test_signing_in_through_the_real_redirect_stores_a_grant_and_calls_carry_its_token(
    staff, api, remote
):
    mcp.mcp_sync(wait=10)
    wait_for(lambda: state_of("remote") == "needs_sign_in", what="remote to need sign-in")

    finished, _ = sign_in(browser(staff), remote.server)

    assert finished.status_code == 302
    assert finished["Location"] == "/ops/tools/#mcp-remote"
    grant = McpOAuthGrant.objects.get(server=remote.server)
    assert grant.tokens["access_token"] in remote.stats()["issued"]
    assert grant.signed_in_by == staff
    assert grant.generation == 1
    assert not McpOAuthSignIn.objects.exists()
    assert remote.stats()["registrations"] == 1
    mcp.mcp_sync(wait=10)
    wait_for(lambda: state_of("remote") == "connected", what="remote to connect")
    result = call("remote__whoami")
    assert not result.is_error, result.content
    # The server saw the bearer token it issued to the client toolhub registered.
    assert result.content == f"client {grant.client_info['client_id']} with scopes mcp"
    assert call("remote__echo", {"text": "hi"}).content == "hi"
    detail = api(staff).get(f"/api/mcp-servers/{remote.server.pk}/").json()
    assert detail["state"] == "connected"
    assert detail["signed_in_by"] == staff.username
    page = browser(staff).get("/ops/tools/").content.decode()
    assert f"signed in by {staff.username}" in page
    assert "Sign in again" in page


@pytest.mark.processes
def test_a_pre_registered_client_signs_in_with_its_secret_where_registration_is_closed(
    staff, tmp_path, registry_state
):
    as_port, mcp_port = free_port(), free_port()
    server = McpServer.objects.create(
        name="remote",
        transport="streamable_http",
        url=f"http://127.0.0.1:{mcp_port}/mcp",
        auth="oauth",
        oauth_client_id="toolhub-pre",
        oauth_client_secret="pre-registered-secret",
    )
    paces = _pace(health_interval=0.2, backoff_initial=0.1, probe_interval=0.2)
    try:
        with oauth_http_server(
            as_port,
            mcp_port,
            *("--no-registration", "--client", "toolhub-pre:pre-registered-secret"),
            *("--client-redirect", f"http://testserver/ops/mcp/{server.pk}/oauth/callback/"),
        ):
            remote = Remote(as_port, mcp_port, server)
            grant = signed_in_and_connected(staff, remote)

            assert grant.client_info["client_id"] == "toolhub-pre"
            # The secret is the configuration's, read from there, never copied.
            assert "client_secret" not in grant.client_info
            assert remote.stats().get("registrations", 0) == 0
            assert call("remote__whoami").content == "client toolhub-pre with scopes mcp"
    finally:
        McpServer.objects.all().delete()
        mcp.mcp_sync(wait=10)
        _pace(**paces)


@pytest.mark.processes
def test_a_second_sign_in_reuses_the_registered_client_and_reconnects_with_the_new_grant(
    staff, remote
):
    first = signed_in_and_connected(staff, remote)

    finished, _ = sign_in(browser(staff), remote.server)

    assert finished.status_code == 302
    second = McpOAuthGrant.objects.get(server=remote.server)
    assert second.generation == first.generation + 1
    assert second.tokens["access_token"] != first.tokens["access_token"]
    assert second.client_info["client_id"] == first.client_info["client_id"]
    assert remote.stats()["registrations"] == 1
    mcp.mcp_sync(wait=10)
    wait_for(lambda: state_of("remote") == "connected", what="remote to reconnect")
    assert not call("remote__whoami").is_error


@pytest.mark.processes
def test_an_expired_access_token_is_refreshed_and_the_call_still_succeeds(staff, short_lived):
    grant = signed_in_and_connected(staff, short_lived)
    first = grant.tokens["access_token"]

    # The connection's probes run every 0.2 s: each token is refreshed before it expires.
    wait_for(lambda: short_lived.stats().get("refreshes", 0) >= 2, what="two refreshes")
    result = call("remote__whoami")

    assert not result.is_error, result.content
    assert state_of("remote") == "connected"
    grant.refresh_from_db()
    assert grant.tokens["access_token"] != first
    assert grant.tokens["access_token"] in short_lived.stats()["issued"]
    assert grant.refreshed_at is not None
    # A refresh is not a new sign-in: no process reconnects for it.
    assert grant.generation == 1


@pytest.mark.processes
def test_a_refused_refresh_puts_the_server_back_to_needs_sign_in_with_its_tools_unavailable(
    staff, short_lived
):
    signed_in_and_connected(staff, short_lived)
    assert "remote__whoami" in registry.names()

    short_lived.break_refresh()

    wait_for(lambda: state_of("remote") == "needs_sign_in", what="remote to need sign-in")
    grant = McpOAuthGrant.objects.get(server=short_lived.server)
    assert grant.tokens is None
    assert "needs sign-in" in grant.lost_reason
    assert grant.generation == 2
    # Its tools stay registered (the array does not change) but are unavailable, with why.
    with pytest.raises(ToolUnavailable, match="needs sign-in"):
        mcp.manager.check("remote")
    result = call("remote__whoami")
    assert result.is_error
    assert "MCP server remote needs sign-in" in result.content
    # Every process follows the new generation to the same state.
    mcp.mcp_sync(wait=10)
    wait_for(lambda: state_of("remote") == "needs_sign_in", what="remote to stay signed out")
    assert "Needs sign-in" in browser(staff).get("/ops/tools/").content.decode()


@pytest.mark.processes
def test_a_grant_is_not_sent_to_a_new_url_the_server_needs_sign_in_again(staff, api, remote):
    signed_in_and_connected(staff, remote)

    moved = api(staff).patch(
        f"/api/mcp-servers/{remote.server.pk}/",
        {"url": f"http://127.0.0.1:{free_port()}/mcp"},
        format="json",
    )
    assert moved.status_code == 200
    mcp.mcp_sync(wait=10)

    wait_for(lambda: state_of("remote") == "needs_sign_in", what="remote to need sign-in")


@pytest.mark.processes
def test_a_non_staff_user_gets_403_from_the_sign_in_and_the_callback(owner, remote):
    client = browser(owner)

    begun = client.post(f"/ops/mcp/{remote.server.pk}/oauth/sign-in/")
    callback = client.get(f"/ops/mcp/{remote.server.pk}/oauth/callback/?code=x&state=y")

    assert begun.status_code == 403
    assert callback.status_code == 403
    assert not McpOAuthSignIn.objects.exists()
    assert remote.stats().get("registrations", 0) == 0


@pytest.mark.processes
def test_a_forged_replayed_or_borrowed_state_is_refused_with_400_and_stores_nothing(
    staff, django_user_model, password, remote
):
    client = browser(staff)
    forged = client.get(f"/ops/mcp/{remote.server.pk}/oauth/callback/?code=x&state=forged")
    assert forged.status_code == 400
    assert "is not one you began here" in forged.content.decode()
    assert not McpOAuthGrant.objects.exists()

    # A state begun by one staff member is not another's to finish.
    approved = urlsplit(httpx.get(begin(client, remote.server)).headers["location"])
    colleague = django_user_model.objects.create_user(
        username="colleague", password=password, is_staff=True
    )
    borrowed = browser(colleague).get(f"{approved.path}?{approved.query}")
    assert borrowed.status_code == 400
    assert not McpOAuthGrant.objects.exists()

    finished, callback = sign_in(client, remote.server)
    assert finished.status_code == 302
    grant = McpOAuthGrant.objects.get()
    replayed = client.get(callback)
    assert replayed.status_code == 400
    assert "is not one you began here" in replayed.content.decode()
    assert McpOAuthGrant.objects.get().generation == grant.generation
    assert remote.stats()["code_exchanges"] == 1


@pytest.mark.processes
def test_a_refusal_from_the_authorization_server_is_shown_and_stores_nothing(staff, remote):
    client = browser(staff)
    state = parse_qs(urlsplit(begin(client, remote.server)).query)["state"][0]

    refused = client.get(
        f"/ops/mcp/{remote.server.pk}/oauth/callback/?error=access_denied&state={state}"
    )

    assert refused.status_code == 400
    assert "did not grant access: access_denied" in refused.content.decode()
    assert not McpOAuthGrant.objects.exists()


@pytest.mark.processes
def test_tokens_and_client_secrets_never_appear_in_the_ops_page_the_api_or_the_admin(
    staff, api, admin_client, short_lived
):
    grant = signed_in_and_connected(staff, short_lived)
    wait_for(lambda: short_lived.stats().get("refreshes", 0) >= 1, what="a refresh")
    server_id = short_lived.server.pk
    api(staff).patch(
        f"/api/mcp-servers/{server_id}/",
        {"oauth_client_secret": "operator-secret-value"},
        format="json",
    )
    secrets = [*short_lived.stats()["issued"], "operator-secret-value"]
    if grant.client_info.get("client_secret"):
        secrets.append(grant.client_info["client_secret"])

    responses = [
        browser(staff).get("/ops/tools/"),
        api(staff).get("/api/mcp-servers/"),
        api(staff).get(f"/api/mcp-servers/{server_id}/"),
        admin_client.get("/admin/agent_app/mcpserver/"),
        admin_client.get(f"/admin/agent_app/mcpserver/{server_id}/change/"),
    ]

    for response in responses:
        assert response.status_code == 200
        body = response.content.decode()
        for secret in secrets:
            assert secret not in body
    assert responses[2].json()["oauth_client_secret_set"] is True
    assert "oauth_client_secret" not in responses[2].json()
    assert "signed in by ops" in responses[4].content.decode()
    # The grants have no admin of their own.
    assert admin_client.get("/admin/agent_app/mcpoauthgrant/").status_code == 404


def test_oauth_is_refused_for_a_stdio_server_by_the_api(staff, api):
    created = api(staff).post(
        "/api/mcp-servers/",
        {"name": "local", "transport": "stdio", "command": "true", "auth": "oauth"},
        format="json",
    )
    patched_server = McpServer.objects.create(name="local2", transport="stdio", command="true")
    patched = api(staff).patch(
        f"/api/mcp-servers/{patched_server.pk}/", {"auth": "oauth"}, format="json"
    )

    assert created.status_code == 400
    assert patched.status_code == 400
    assert "OAuth is for streamable HTTP servers" in patched.json()["message"]


def test_the_admin_sets_oauth_keeps_its_client_secret_when_left_empty_and_clears_it_on_request(
    admin_client,
):
    server = McpServer.objects.create(
        name="kept",
        transport="streamable_http",
        url="http://127.0.0.1:9/mcp",
        oauth_client_secret="kept-client-secret",
        enabled=False,
    )
    fields = {
        "name": "kept",
        "transport": "streamable_http",
        "command": "",
        "args": "[]",
        "url": "http://127.0.0.1:9/mcp",
        "timeout": "30",
        "timeout_ceiling": "600",
        "allowlist": "null",
        "auth": "oauth",
        "oauth_scopes": "mcp offline_access",
        "oauth_client_id": "toolhub-pre",
        "oauth_client_secret_update": "",
    }
    change = f"/admin/agent_app/mcpserver/{server.pk}/change/"

    kept = admin_client.post(change, fields)
    form = admin_client.get(change).content.decode()
    refused = admin_client.post(change, {**fields, "transport": "stdio", "command": "true"})
    cleared = admin_client.post(change, {**fields, "oauth_client_secret_clear": "on"})

    assert kept.status_code == 302, kept.content.decode()[:2000]
    assert "kept-client-secret" not in form
    assert "OAuth client secret: set" in form
    assert "needs sign-in, on the ops page" in form
    assert "OAuth is for streamable HTTP servers" in refused.content.decode()
    assert cleared.status_code == 302
    server.refresh_from_db()
    assert (server.auth, server.oauth_scopes, server.oauth_client_id) == (
        "oauth",
        "mcp offline_access",
        "toolhub-pre",
    )
    assert server.oauth_client_secret == ""


@pytest.mark.processes
def test_two_processes_sharing_a_grant_refresh_it_once_and_both_keep_working_past_its_expiry(
    staff, rotating, second_process
):
    grant = signed_in_and_connected(staff, rotating)
    second_process.reconcile([mcp.mcp_config(rotating.server)], wait=10)
    wait_for(
        lambda: second_process.statuses()["remote"].state == "connected",
        what="the second process to connect",
    )
    signed_in = grant.tokens
    expires_at = cast(float, grant.expires_at)

    # Both connections probe every 0.2 s: both pass the refresh point (two seconds before
    # the expiry) and then the expiry itself of the token the sign-in gave.
    wait_for(lambda: time.time() > expires_at + 2.5, timeout=20, what="the first token to expire")
    here = call("remote__whoami")
    there = asyncio.run(
        second_process.registry.get("remote__whoami").execute({}, ToolContext(env={}))
    )

    assert not here.is_error, here.content
    assert not there.is_error, there.content
    assert state_of("remote") == "connected"
    assert second_process.statuses()["remote"].state == "connected"
    stats = rotating.stats()
    # One refresh for the expiry: the sign-in's refresh token went to the authorization
    # server once, and the process that did not send it took the tokens the other stored.
    assert stats["presented"].count(signed_in["refresh_token"]) == 1
    # No refresh token was ever presented twice, and none was refused.
    assert len(set(stats["presented"])) == len(stats["presented"]) == stats["refreshes"]
    assert stats.get("reuses", 0) == 0
    grant.refresh_from_db()
    assert grant.tokens is not None
    assert grant.tokens["refresh_token"] != signed_in["refresh_token"]
    assert grant.generation == 1


@pytest.mark.processes
def test_the_servers_own_headers_go_to_the_mcp_server_and_never_to_the_authorization_server(
    staff, keyed
):
    grant = signed_in_and_connected(staff, keyed)

    # Past a refresh too: sign-in, registration, code exchange and refresh all happened.
    wait_for(lambda: keyed.stats().get("refreshes", 0) >= 1, what="a refresh")
    result = call("remote__whoami")

    assert not result.is_error, result.content
    assert result.content == f"client {grant.client_info['client_id']} with scopes mcp"
    stats = keyed.stats()
    assert stats["registrations"] == stats["code_exchanges"] == 1
    assert "x-api-key" in stats["headers"]["mcp_server"]
    assert "x-api-key" not in stats["headers"]["authorization_server"]
    # The authorization server was asked for all it was asked for without the header.
    assert "content-type" in stats["headers"]["authorization_server"]
