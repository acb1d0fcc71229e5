"""A staff member signs in to an OAuth MCP server from the ops page, in a real browser:
off to the authorization server (tests/mcp/oauth_server.py, which approves at once) and
back, through the page's CSP, to a product that then connects with the grant it stored."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import product_with_server, sign_in
from tests.mcp import free_port, oauth_http_server


@pytest.fixture(scope="module")
def product_with_oauth_server(tmp_path_factory):
    as_port, mcp_port = free_port(), free_port()
    add_server = f"""
from agent_app.models import McpServer
McpServer.objects.create(
    name="remote", transport="streamable_http", url="http://127.0.0.1:{mcp_port}/mcp",
    auth="oauth",
)
"""
    with (
        oauth_http_server(as_port, mcp_port),
        product_with_server(tmp_path_factory.mktemp("product"), add_server) as product,
    ):
        yield product


def test_staff_sign_in_to_an_oauth_server_and_it_connects_with_the_grant(
    product_with_oauth_server, page
):
    base, password = product_with_oauth_server
    sign_in(page, base, password)
    page.goto(f"{base}/ops/tools/")
    server = page.locator("#mcp-remote")
    # The product's first look at the server may still be under way ("Connecting").
    _reload_until(page, server, "Needs sign-in")

    page.get_by_role("button", name="Sign in to MCP server remote").click()

    # Through the authorization server and back to the ops page, at the server's row.
    page.wait_for_url(f"{base}/ops/tools/#mcp-remote")
    expect(page.get_by_role("status")).to_have_text(
        "Signed in to MCP server remote; it connects now."
    )
    _reload_until(page, server, "Connected: 2 tools")
    expect(server).to_contain_text("signed in by demo")
    expect(page.get_by_role("button", name="Sign in to MCP server remote")).to_have_text(
        "Sign in again"
    )
    assert page.console_errors == []


def _reload_until(page, row, text: str) -> None:
    """Reload the page, as a person waiting would, until ``row`` says ``text``."""
    for _ in range(50):
        if text in row.inner_text():
            break
        page.wait_for_timeout(200)
        page.reload()
    expect(row).to_contain_text(text)
