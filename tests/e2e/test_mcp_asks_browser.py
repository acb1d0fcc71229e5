"""An MCP server asking mid-call, in a real browser: its form drawn on the calling tool's
card, refused while it does not fit and sent once it does; its request for the chat's
model shown whole and run only after Allow. The product connects a real stdio server
(tests/mcp/server.py --asking) and runs the offline demo model."""

from __future__ import annotations

import sys

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import product_with_server
from tests.e2e.test_prompts_browser import open_chat_with_prompts
from tests.mcp import SERVER

ADD_SERVER = f"""
from agent_app.models import McpServer
McpServer.objects.create(
    name="lively", transport="stdio", command={sys.executable!r},
    args=[{str(SERVER)!r}, "--asking"], sampling=True,
)
"""


@pytest.fixture(scope="module")
def product_that_asks(tmp_path_factory):
    with product_with_server(tmp_path_factory.mktemp("product"), ADD_SERVER) as product:
        yield product


def ask(page, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")


def test_a_servers_form_is_filled_in_on_the_card_checked_and_its_answer_completes_the_call(
    product_that_asks, page
):
    open_chat_with_prompts(page, *product_that_asks)
    ask(page, "use lively__sign_in_visitor")

    form = page.get_by_role("group", name="lively asks you")
    expect(form).to_contain_text("Who is visiting? (asked by toolhub-test)", timeout=20_000)
    card = page.locator(".tool-card", has=form)
    expect(card.locator(".status")).to_have_text("waiting for your answer")
    # Sent without the required name: the server's check comes back on the card.
    form.get_by_label("Age (required)").fill("36")
    form.get_by_role("button", name="Send").click()
    expect(form.get_by_role("alert")).to_contain_text("Name: required")
    form.get_by_label("Name (required)").fill("Ada")
    form.get_by_label("Colour (required)").select_option("green")
    form.get_by_label("Newsletter").check()
    form.get_by_role("button", name="Send").click()

    expect(form).to_contain_text("You sent:", timeout=20_000)
    expect(form.locator("dl.sent")).to_contain_text("Ada")
    expect(card.locator(":scope > pre.result")).to_have_text(
        "welcome Ada, 36, who likes green, with newsletter", timeout=20_000
    )
    # Every tab and every reload show the same card, from the stored events.
    page.reload()
    page.locator(".tool-card summary", has_text="lively__sign_in_visitor").click()
    expect(page.get_by_role("group", name="lively asks you")).to_contain_text("You sent:")
    assert page.console_errors == []


def test_a_servers_request_for_the_model_is_shown_whole_and_runs_only_after_allow(
    product_that_asks, page
):
    open_chat_with_prompts(page, *product_that_asks)
    ask(page, "use lively__sum_up: the long saga of the tests")

    request = page.get_by_role("group", name="lively asks the model")
    expect(request).to_contain_text("Answer in one short sentence.", timeout=20_000)
    expect(request).to_contain_text("Sum up: the long saga of the tests")
    expect(request).to_contain_text("in at most 200 tokens")
    request.get_by_role("button", name="Allow: lively asks the model").click()

    expect(request).to_contain_text("The model answered:", timeout=20_000)
    card = page.locator(".tool-card", has=request)
    expect(card.locator(":scope > pre.result")).to_contain_text("the model (demo) said:")
    assert page.console_errors == []
