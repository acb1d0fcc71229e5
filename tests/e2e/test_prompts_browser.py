"""An MCP server's prompts as slash commands in the composer, in a real browser, against a
product that connects a real stdio MCP server (tests/mcp/server.py --lively)."""

from __future__ import annotations

import re
import sys

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import held_request, hold_requests, product_with_server, sign_in
from tests.mcp import SERVER

ADD_SERVER = f"""
from agent_app.models import McpServer
McpServer.objects.create(
    name="lively", transport="stdio", command={sys.executable!r},
    args=[{str(SERVER)!r}, "--lively"],
)
"""


@pytest.fixture(scope="module")
def product_with_prompts(tmp_path_factory):
    with product_with_server(tmp_path_factory.mktemp("product"), ADD_SERVER) as product:
        yield product


def open_chat_with_prompts(page, base, password) -> None:
    sign_in(page, base, password)
    # The server connects as the product starts: the ops page says when it has.
    until_connected(page, base)
    page.goto(f"{base}/chat/")
    page.get_by_role("button", name="New chat").first.click()
    page.wait_for_url(f"{base}/chat/*/")


def until_connected(page, base) -> None:
    page.goto(f"{base}/ops/tools/")
    for _ in range(50):
        if "Connected" in page.locator("#mcp-lively").inner_text():
            break
        page.wait_for_timeout(200)
        page.reload()


def test_slash_lists_the_prompts_narrows_as_typed_and_sends_a_filled_in_prompt(
    product_with_prompts, page
):
    open_chat_with_prompts(page, *product_with_prompts)
    message = page.get_by_label("Message")

    message.press_sequentially("/")
    options = page.get_by_role("listbox", name="Prompts of MCP servers").get_by_role("option")
    expect(options).to_have_count(2)
    expect(options.first).to_contain_text("/lively:hello")
    message.press_sequentially("rev")
    expect(options).to_have_count(1)
    expect(options.first).to_contain_text("Review code")
    expect(message).to_have_attribute("aria-activedescendant", "slash-0")
    message.press("Enter")

    arguments = page.get_by_role("group", name="Arguments of Review code")
    expect(arguments.get_by_label("code")).to_be_focused()
    # code is required: Use prompt without it asks for it and sends nothing.
    arguments.get_by_role("button", name="Use prompt").click()
    expect(arguments.get_by_label("code")).to_be_focused()
    arguments.get_by_label("code").fill("print(1)")
    arguments.get_by_label("focus (optional)").fill("style")
    arguments.get_by_label("focus (optional)").press("Enter")

    expect(page.locator(".bubble.user")).to_have_text(
        ["Please review this code for style:\n\nprint(1)"], timeout=20_000
    )
    expect(page.locator(".bubble.assistant").last).to_contain_text("Please review this code")
    expect(arguments).to_be_hidden()
    expect(message).to_have_value("")
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)

    message.press_sequentially("/hello")
    message.press("Enter")
    expect(page.locator(".bubble.user").last).to_have_text("Hello from the lively server.")
    assert page.console_errors == []


def test_escape_closes_the_list_and_a_slash_later_in_a_message_is_only_text(
    product_with_prompts, page
):
    open_chat_with_prompts(page, *product_with_prompts)
    message = page.get_by_label("Message")
    listbox = page.get_by_role("listbox", name="Prompts of MCP servers")

    message.press_sequentially("/")
    expect(listbox).to_be_visible()
    message.press("Escape")
    expect(listbox).to_be_hidden()
    message.fill("")
    message.press_sequentially("either a/b or c")
    expect(listbox).to_be_hidden()
    message.press("Enter")
    expect(page.locator(".bubble.user")).to_have_text(["either a/b or c"], timeout=20_000)


def test_escape_closes_the_list_while_a_turn_runs_and_the_turn_goes_on(product_with_prompts, page):
    open_chat_with_prompts(page, *product_with_prompts)
    message = page.get_by_label("Message")
    message.fill("use ask_user_question: Which colour?")
    message.press("Enter")
    card = page.locator(".tool-card")
    expect(card).to_have_attribute("data-status", "running", timeout=20_000)

    message.press_sequentially("/")
    listbox = page.get_by_role("listbox", name="Prompts of MCP servers")
    expect(listbox).to_be_visible()
    message.press("Escape")

    expect(listbox).to_be_hidden()
    expect(card).to_have_attribute("data-status", "running")
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    message.fill("blue")
    message.press("Enter")
    expect(card).to_have_attribute("data-status", "ok", timeout=20_000)
    expect(card.locator(".answered")).to_have_text("You answered: blue")
    assert page.console_errors == []


def test_a_prompt_filled_in_after_the_person_wrote_on_is_not_sent_over_their_words(
    product_with_prompts, page
):
    open_chat_with_prompts(page, *product_with_prompts)
    message = page.get_by_label("Message")
    fill_url = page.locator("[data-prompt-fill-url]").get_attribute("data-prompt-fill-url")
    held, _ = hold_requests(page, f"**{fill_url}")
    message.press_sequentially("/hello")
    listbox = page.get_by_role("listbox", name="Prompts of MCP servers")
    expect(listbox.get_by_role("option")).to_have_count(1)
    message.press("Enter")
    # The server is slow to fill it in; the person goes on writing.
    late = held_request(page, held)
    message.press_sequentially(" and my own words")
    late.continue_()

    expect(page.locator("[data-composer-error]")).to_contain_text("The prompt was not used")
    expect(message).to_have_value("/hello and my own words")
    expect(page.locator(".bubble.user")).to_have_count(0)
    assert page.console_errors == []


def test_a_resource_read_while_the_person_edits_before_it_cuts_none_of_their_words(
    product_with_prompts, page
):
    open_chat_with_prompts(page, *product_with_prompts)
    message = page.get_by_label("Message")
    attach_url = page.locator("[data-resource-attach-url]").get_attribute(
        "data-resource-attach-url"
    )
    held, _ = hold_requests(page, f"**{attach_url}")
    message.press_sequentially("Summarise @gree")
    listbox = page.get_by_role("listbox", name="Resources of MCP servers")
    expect(listbox.get_by_role("option")).to_have_count(1)
    message.press("Enter")
    late = held_request(page, held)
    message.press("Control+Home")
    message.press_sequentially("Please ")
    late.continue_()

    expect(message).to_have_value(
        re.compile(
            r"^Please Summarise @gree\n"
            r"\[Resource greeting \(note://greeting\) from MCP server lively\]\nfirst line\n"
        )
    )
    assert page.console_errors == []


def test_at_lists_the_resources_and_the_one_picked_is_added_to_the_message(
    product_with_prompts, page
):
    open_chat_with_prompts(page, *product_with_prompts)
    message = page.get_by_label("Message")
    listbox = page.get_by_role("listbox", name="Resources of MCP servers")

    message.press_sequentially("Summarise @gree")
    expect(listbox.get_by_role("option")).to_have_count(1)
    expect(listbox.get_by_role("option")).to_contain_text("note://greeting")
    message.press("Enter")

    expect(listbox).to_be_hidden()
    expect(message).to_have_value(
        re.compile(
            r"^Summarise \n\[Resource greeting \(note://greeting\) from MCP server lively\]"
            r"\nfirst line\n"
        )
    )
    message.press_sequentially("in one line")
    message.press("Enter")
    bubble = page.locator(".bubble.user").last
    expect(bubble).to_contain_text("from MCP server lively", timeout=20_000)
    expect(bubble).to_contain_text("in one line")
    assert page.console_errors == []


def test_a_prompts_use_and_cancel_buttons_are_in_sight_without_scrolling(
    product_with_prompts, page
):
    page.set_viewport_size({"width": 1440, "height": 900})
    open_chat_with_prompts(page, *product_with_prompts)
    message = page.get_by_label("Message")
    message.press_sequentially("/rev")
    # The prompts load as "/" is typed: Enter picks once the list shows them.
    options = page.get_by_role("listbox", name="Prompts of MCP servers").get_by_role("option")
    expect(options).to_have_count(1)
    expect(options.first).to_contain_text("Review code")
    message.press("Enter")
    arguments = page.get_by_role("group", name="Arguments of Review code")
    expect(arguments.get_by_label("code")).to_be_focused()

    menu = page.locator("[data-slash-menu]").bounding_box()
    for name in ("Use prompt", "Cancel"):
        button = arguments.get_by_role("button", name=name).bounding_box()
        assert menu["y"] <= button["y"]
        assert button["y"] + button["height"] <= menu["y"] + menu["height"], name
    assert page.console_errors == []


def test_the_lists_follow_a_server_disabled_and_enabled_again_while_the_chat_stays_open(
    product_with_prompts, page
):
    base, password = product_with_prompts
    open_chat_with_prompts(page, base, password)
    message = page.get_by_label("Message")
    prompts = page.get_by_role("listbox", name="Prompts of MCP servers")
    resources = page.get_by_role("listbox", name="Resources of MCP servers")
    message.press_sequentially("/")
    expect(prompts.get_by_role("option")).to_have_count(2)
    message.fill("")
    message.press_sequentially("@")
    expect(resources.get_by_role("option")).to_have_count(2)
    message.press("Escape")
    message.fill("")

    operator = page.context.new_page()
    operator.goto(f"{base}/ops/tools/")
    operator.get_by_role("button", name="Disable MCP server lively").click()
    expect(operator.get_by_role("button", name="Enable MCP server lively")).to_be_visible()

    # The chat was not reloaded: the next "/" or "@" asks again, and nothing is offered
    # from a server that is off.
    message.press_sequentially("/")
    expect(prompts).to_contain_text("No MCP server offers prompts.")
    message.fill("")
    message.press_sequentially("@")
    expect(resources).to_contain_text("No MCP server offers resources.")
    message.press("Escape")
    message.fill("")

    operator.get_by_role("button", name="Enable MCP server lively").click()
    until_connected(operator, base)
    message.press_sequentially("/")
    expect(prompts.get_by_role("option")).to_have_count(2)
    assert page.console_errors == []
