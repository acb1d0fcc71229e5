"""The context inspector beside a chat answers "why can't my agent see tool X?" in a
real browser: a profile picked in the composer, Tools switched off, a global disable; and
the README's deferred-tool demo as shipped (a deferred built-in loaded with tool_search,
then called), with the inspector's "Decide again what is sent every time"."""

from __future__ import annotations

import re
import time

from playwright.sync_api import expect

from tests.e2e.conftest import new_chat, open_new_chat, open_options, sign_in


def _say(page, text):
    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".bubble.user").last).to_have_text(text, timeout=20_000)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)


def test_a_profile_picked_in_the_composer_shows_its_removed_tool_hidden(product, page):
    base, password = product
    sign_in(page, base, password)
    page.goto(f"{base}/programs/")
    page.get_by_label("New profile").fill("lean")
    page.get_by_role("button", name="Create").click()
    page.get_by_role("button", name="Remove calculate").click()
    page.wait_for_load_state()

    new_chat(page, base)
    open_options(page)
    page.get_by_label("Profile").select_option("lean")
    _say(page, "hello")

    hidden = page.locator("#hidden-calculate")
    expect(hidden).to_be_visible(timeout=10_000)
    expect(hidden).to_contain_text("lean")
    page.reload()
    open_options(page)
    expect(page.get_by_label("Profile")).to_have_value("lean")
    assert page.console_errors == []


def test_with_tools_off_the_next_turn_sends_no_tools(product, page):
    open_new_chat(page, *product)

    open_options(page)
    page.get_by_role("group", name="Tools").get_by_role("radio", name="Off", exact=True).check()
    _say(page, "no tools please")

    inspector = page.get_by_role("complementary", name="Next turn")
    expect(inspector).to_contain_text("None: this turn sends no tools.", timeout=10_000)
    assert page.console_errors == []


def test_a_tool_disabled_on_the_ops_page_shows_hidden_with_its_reason(product, page):
    base, password = product
    sign_in(page, base, password)
    page.goto(f"{base}/ops/tools/")
    page.get_by_label("Reason to disable current_time").fill("quota spent")
    page.get_by_role("button", name="Disable current_time").click()
    page.wait_for_url(f"{base}/ops/tools/")

    new_chat(page, base)

    hidden = page.locator("#hidden-current_time")
    expect(hidden).to_contain_text("turned off by an operator (demo@", timeout=10_000)
    expect(hidden).to_contain_text("quota spent")
    assert page.console_errors == []


def test_a_chat_that_was_offline_when_a_tool_was_disabled_shows_it_once_back(product, page):
    base, password = product
    live = []  # (page side, server side) of the chat sockets open to the server
    stranded = []  # sockets opened while offline: open to the page, and nothing answers
    state = {"offline": False}

    def route(socket):
        if state["offline"]:
            stranded.append(socket)
            return
        pair = (socket, socket.connect_to_server())
        live.append(pair)
        socket.on_close(lambda *_: pair in live and live.remove(pair))

    page.route_web_socket(re.compile(r"/ws/sessions/"), route)
    open_new_chat(page, base, password)
    # "New chat" may load the page again (an empty chat is reused): wait for its socket.
    _wait(page, lambda: len(live) == 1)
    page.wait_for_timeout(1000)
    _wait(page, lambda: len(live) == 1)
    expect(page.locator("#hidden-calculate")).to_have_count(0)

    state["offline"] = True
    was = live[0]
    for side in was:
        side.close()
    _wait(page, lambda: stranded)
    page.wait_for_timeout(2500)
    ops = page.context.browser.new_page()
    try:
        sign_in(ops, base, password)
        ops.goto(f"{base}/ops/tools/")
        ops.get_by_label("Reason to disable calculate").fill("changed while offline")
        ops.get_by_role("button", name="Disable calculate").click()
        ops.wait_for_url(f"{base}/ops/tools/")
        page.wait_for_timeout(1000)
        # Open chats were told; this one was not among them.
        unaware = page.locator("#hidden-calculate").count()
        state["offline"] = False
        stranded[-1].close()

        expect(page.locator("#hidden-calculate")).to_contain_text(
            "changed while offline", timeout=10_000
        )
        assert unaware == 0
        assert live
        assert live[-1] is not was
        assert page.console_errors == []
    finally:
        ops.goto(f"{base}/ops/tools/")
        ops.get_by_role("button", name="Enable calculate").click()
        ops.wait_for_url(f"{base}/ops/tools/")
        ops.close()


def _wait(page, check, timeout: float = 10.0) -> None:
    """Until ``check()`` holds, letting the page's events (routed sockets) through."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        page.wait_for_timeout(100)


def test_plan_mode_from_the_composer_hides_tools_unsafe_in_plan(product, page):
    open_new_chat(page, *product)

    open_options(page)
    page.get_by_label("Plan mode").check()

    expect(page.locator("#hidden-bash")).to_contain_text("plan", timeout=10_000)
    page.reload()
    open_options(page)
    expect(page.get_by_label("Plan mode")).to_be_checked()
    assert page.console_errors == []


def test_a_deferred_built_in_is_loaded_with_tool_search_then_called(product, page):
    open_new_chat(page, *product)
    inspector = page.get_by_role("complementary", name="Next turn")
    catalog = inspector.locator("details", has_text="Loaded when needed")
    summary = catalog.locator("summary")
    expect(summary).to_contain_text("Loaded when needed: 6 tools", timeout=10_000)
    expect(inspector.locator("li", has_text="tool_search")).to_be_visible()

    page.get_by_label("Message").fill("use calculate: 6 * 7")
    page.get_by_label("Message").press("Enter")

    cards = page.locator(".tool-card")
    expect(cards).to_have_count(2, timeout=20_000)
    expect(cards.nth(0).locator("summary")).to_contain_text("tool_search")
    expect(cards.nth(1)).to_have_attribute("data-status", "ok", timeout=20_000)
    expect(cards.nth(1).locator("summary")).to_contain_text("calculate")
    cards.nth(1).locator("summary").press("Enter")
    expect(cards.nth(1).locator("pre.result")).to_contain_text("42")
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)
    # The turn's end reloads the inspector; press the button on the reloaded one.
    expect(inspector.locator("table tbody tr")).to_have_count(3, timeout=10_000)
    page.wait_for_load_state("networkidle")

    inspector.get_by_role("button", name="Decide again what is sent every time").click()
    expect(inspector.get_by_role("status")).to_contain_text("Decided again", timeout=10_000)
    expect(catalog.locator("summary")).to_contain_text("Loaded when needed: 6 tools")
    assert page.console_errors == []
