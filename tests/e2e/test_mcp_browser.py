"""Staff see and switch MCP servers on the ops page, in a real browser, against a product
that connects a real stdio MCP server (tests/mcp/server.py) as it starts."""

from __future__ import annotations

import sys

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import product_with_server, sign_in
from tests.mcp import SERVER

SECRET = "sk-browser-secret-42"
ADD_SERVER = f"""
from agent_app.models import McpServer
McpServer.objects.create(
    name="demo", transport="stdio", command={sys.executable!r}, args=[{str(SERVER)!r}],
    env={{"DEMO_TOKEN": {SECRET!r}}},
)
"""


@pytest.fixture(scope="module")
def product_with_mcp(tmp_path_factory):
    with product_with_server(tmp_path_factory.mktemp("product"), ADD_SERVER) as product:
        yield product


def reload_until_connected(page, server) -> None:
    """The page is rendered once: reload it until the server's connection shows."""
    for _ in range(50):
        if "Connected: 12 tools" in server.inner_text():
            break
        page.wait_for_timeout(200)
        page.reload()
    expect(server).to_contain_text("Connected: 12 tools")


def test_staff_see_a_connected_server_with_its_tools_and_turn_it_off_and_on(product_with_mcp, page):
    base, password = product_with_mcp
    sign_in(page, base, password)
    page.goto(f"{base}/ops/tools/")
    server = page.locator("#mcp-demo")
    # Connected at start-up; a reload shows it once the server has answered.
    reload_until_connected(page, server)
    expect(server).to_contain_text("DEMO_TOKEN")
    expect(page.locator("#tool-demo__echo")).to_contain_text("deferred")
    assert SECRET not in page.content()

    page.get_by_role("button", name="Disable MCP server demo").click()
    page.wait_for_url(f"{base}/ops/tools/")
    expect(page.get_by_role("status")).to_have_text("MCP server demo is disabled.")
    expect(server).to_contain_text("Disabled")
    expect(page.locator("#tool-demo__echo")).to_have_count(0)

    page.get_by_role("button", name="Enable MCP server demo").click()
    page.wait_for_url(f"{base}/ops/tools/")
    expect(page.get_by_role("status")).to_have_text("MCP server demo is enabled.")
    reload_until_connected(page, server)
    expect(page.locator("#tool-demo__echo")).to_have_count(1)
    assert page.console_errors == []
