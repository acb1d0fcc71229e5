"""A person opens toolhub in a real browser, is sent to sign in, and lands on the chat.

This runs the product as `make run` does (migrate, the demo user, daphne) in a scratch
folder's SQLite database, and drives Debian's Chromium through Playwright.
"""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.e2e.conftest import SCREENSHOTS


def test_a_visitor_is_sent_to_sign_in_and_lands_on_the_chat(product, page):
    base, password = product

    page.goto(f"{base}/")
    assert page.url == f"{base}/accounts/login/?next=/"
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()

    # A first sign-in lands in a chat ready for a message, not on an empty list.
    page.wait_for_url(re.compile(rf"{re.escape(base)}/chat/[0-9a-f-]{{36}}/$"))
    expect(page.get_by_role("heading", name="New chat")).to_be_visible()
    expect(page.get_by_label("Message")).to_be_focused()
    expect(page.get_by_role("heading", name="What can I help with?")).to_be_visible()

    # A starter that shows a tool loading when needed: calculate is not sent up front.
    starter = page.get_by_role("button", name=re.compile("Work out 17% of 2,340"))
    expect(starter).to_contain_text("the model loads it when needed")
    starter.click()
    # Named from its first message at once, in the header and the list of chats.
    expect(page.get_by_role("heading", name="Use calculate: 0.17 * 2340")).to_be_visible()
    expect(page.get_by_role("navigation", name="Chats").get_by_role("link")).to_have_text(
        ["Use calculate: 0.17 * 2340"]
    )
    cards = page.locator(".tool-card")
    expect(cards.filter(has_text="tool_search")).to_have_count(1, timeout=20_000)
    expect(cards.filter(has_text="calculate").last).to_contain_text("397.8", timeout=20_000)
    expect(cards.filter(has_text="calculate").last).to_contain_text("loaded when needed")
    expect(page.locator("[data-starters]")).to_have_count(0)
    page.screenshot(path=SCREENSHOTS / "first_sign_in_starter_used.png")

    # The demo account is staff: the parts' states are one link away.
    page.get_by_role("link", name="Status").click()
    assert page.get_by_role("heading", name="System status").is_visible()
    assert page.get_by_role("row", name=re.compile(r"database\s+reachable")).is_visible()
    # The strict CSP would report a blocked inline script or style as a console error.
    assert page.console_errors == []


def test_a_wrong_password_shows_an_error_in_the_page(product, page):
    base, _ = product

    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()

    assert page.get_by_role("alert").is_visible()
    assert "correct username and password" in page.get_by_role("alert").inner_text()
