"""A person opens toolhub in a real browser, is sent to sign in, and lands on the chat.

This runs the product as `make run` does (migrate, the demo user, daphne) in a scratch
folder's SQLite database, and drives Debian's Chromium through Playwright.
"""

from __future__ import annotations

import re

from playwright.sync_api import expect


def test_a_visitor_is_sent_to_sign_in_and_lands_on_the_chat(product, page):
    base, password = product

    page.goto(f"{base}/")
    assert page.url == f"{base}/accounts/login/?next=/"
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()

    page.wait_for_url(f"{base}/chat/**")
    expect(page.get_by_role("button", name="New chat").first).to_be_visible()
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
