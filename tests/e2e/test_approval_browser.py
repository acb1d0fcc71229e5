"""Approval policies as a person meets them in Chromium: "Allow for this chat" stops the
asking for the rest of the chat, the inspector lists it with a Revoke, and after a revoke
the next call asks again."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.conftest import SCREENSHOTS, open_new_chat


def _ask(page, command: str) -> None:
    page.get_by_label("Message").fill(f"use bash: {command}")
    page.get_by_label("Message").press("Enter")


def _turns_ended(page, count: int) -> None:
    expect(page.locator(".turn-end")).to_have_count(count, timeout=20_000)


def test_allow_for_this_chat_is_not_asked_again_until_revoked(product, page):
    open_new_chat(page, *product)
    cards = page.locator(".tool-card")
    inspector = page.get_by_role("complementary", name="Next turn")

    _ask(page, "echo first")
    page.get_by_role("button", name="Allow for this chat: bash").click(timeout=20_000)
    expect(cards.nth(0)).to_have_attribute("data-status", "ok", timeout=20_000)
    expect(cards.nth(0).locator(".approval-state")).to_have_text("Allowed by you for this chat.")
    expect(inspector.get_by_role("button", name="Revoke bash")).to_be_visible(timeout=10_000)
    _turns_ended(page, 1)

    _ask(page, "echo second")
    expect(cards.nth(1)).to_have_attribute("data-status", "ok", timeout=20_000)
    expect(cards.nth(1).locator("pre.result")).to_contain_text("second")
    expect(cards.nth(1).locator(".policy-note")).to_have_text(
        "Policy: you allowed bash for this chat."
    )
    expect(page.locator("[data-approve]")).to_have_count(0)
    _turns_ended(page, 2)
    page.screenshot(path=SCREENSHOTS / "allowed_for_this_chat.png", full_page=True)

    # A reload still knows; then the revoke.
    page.reload()
    inspector.get_by_role("button", name="Revoke bash").click(timeout=10_000)
    expect(inspector.get_by_role("status")).to_have_text("bash asks again from its next call.")
    expect(inspector.get_by_role("button", name="Revoke bash")).to_have_count(0)

    _ask(page, "echo third")
    expect(page.get_by_role("button", name="Allow once: bash")).to_be_visible(timeout=20_000)
    page.get_by_role("button", name="Deny: bash").click()
    expect(cards.nth(2)).to_have_attribute("data-status", "denied", timeout=20_000)
    assert page.console_errors == []
