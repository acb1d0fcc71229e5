"""The chat page's state comes from the event log only: two tabs and a reload show the
same approval, question and card, in Chromium. Also the shell at phone to wide-screen
sizes, Esc to stop, and limits said in plain words."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import SCREENSHOTS, open_new_chat, run_command_approved

LONG = "for i in $(seq 1 30); do echo tick $i; sleep 1; done"


def test_an_approval_answered_in_one_tab_is_answered_in_the_other(product, page):
    base, password = product
    open_new_chat(page, base, password)
    # A second tab: the same person (the same session cookie), on the same chat.
    other = page.context.browser.new_context(storage_state=page.context.storage_state()).new_page()
    other.goto(page.url)

    page.get_by_label("Message").fill("use bash: echo from-one-tab")
    page.get_by_label("Message").press("Enter")
    expect(other.get_by_role("button", name="Allow once: bash")).to_be_visible(timeout=20_000)
    page.get_by_role("button", name="Allow once: bash").click()

    for tab in (page, other):
        card = tab.locator(".tool-card")
        expect(card).to_have_attribute("data-status", "ok", timeout=20_000)
        expect(card.locator(".approval-state")).to_have_text("Allowed by you.")
        expect(tab.get_by_role("button", name="Allow once: bash")).to_have_count(0)
    # Done, the card stays open where the person answered it, and folds where they
    # never touched it, as a finished call is drawn.
    expect(page.locator(".tool-card")).to_have_js_property("open", True)
    expect(other.locator(".tool-card")).to_have_js_property("open", False)
    other.screenshot(path=SCREENSHOTS / "second_tab_after_allow.png")
    assert page.console_errors == []


def test_a_reload_while_an_approval_waits_still_offers_it_and_it_still_works(product, page):
    open_new_chat(page, *product)
    page.get_by_label("Message").fill("use bash: echo after-reload")
    page.get_by_label("Message").press("Enter")
    expect(page.get_by_role("button", name="Allow once: bash")).to_be_visible(timeout=20_000)

    page.reload()

    page.get_by_role("button", name="Allow once: bash").click()
    card = page.locator(".tool-card")
    expect(card).to_have_attribute("data-status", "ok", timeout=20_000)
    expect(card.locator("pre.result")).to_contain_text("after-reload")
    assert page.console_errors == []


def test_a_reload_while_an_allowed_command_runs_offers_no_stale_approval(product, page):
    open_new_chat(page, *product)
    run_command_approved(page, LONG, until="tick 2")

    page.reload()

    card = page.locator(".tool-card")
    expect(card).to_have_attribute("data-status", "running")
    expect(card.locator(".approval-state")).to_have_text("Allowed by you.")
    expect(page.get_by_role("button", name="Allow once: bash")).to_have_count(0)
    assert page.evaluate("document.activeElement.closest('.approval') === null")
    expect(card.locator("pre.tail")).to_contain_text("tick 3", timeout=20_000)
    # Drawn open as the live page shows a running call, its output in sight.
    expect(card).to_have_js_property("open", True)
    expect(card.locator("pre.tail")).to_be_visible()

    # Folded by the person, it stays folded as it ends, though the server draws it anew.
    card.locator("summary").click()
    expect(card).to_have_js_property("open", False)
    page.get_by_role("button", name="Stop").click()
    expect(card).to_have_attribute("data-status", "cancelled", timeout=20_000)
    expect(card).to_have_js_property("open", False)
    # Focus is back in the composer, and the partial output survives a reload.
    expect(page.get_by_label("Message")).to_be_focused()
    page.reload()
    expect(page.locator(".tool-card pre.result")).to_contain_text("tick 3")
    expect(page.locator(".tool-card pre.result")).to_contain_text("[stopped:")
    assert page.console_errors == []


def test_a_reload_during_the_models_question_shows_it_and_its_answer_box(product, page):
    open_new_chat(page, *product)
    page.get_by_label("Message").fill("use ask_user_question: Which colour?")
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".question-text")).to_have_text("Which colour?", timeout=20_000)

    page.reload()

    expect(page.locator(".question-text")).to_have_text("Which colour?")
    note = page.get_by_text("Your next message answers the model's question above.")
    expect(note).to_be_visible()
    page.get_by_label("Your answer").fill("blue")
    page.get_by_role("button", name="Answer", exact=True).click()
    expect(page.locator(".question .answered")).to_have_text("You answered: blue", timeout=20_000)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)
    expect(note).to_be_hidden()
    assert page.console_errors == []


def test_a_finished_commands_output_is_shown_once(product, page):
    open_new_chat(page, *product)
    page.get_by_label("Message").fill("use bash: printf 'mark%s\\n' er")
    page.get_by_label("Message").press("Enter")
    page.get_by_role("button", name="Allow once: bash").click(timeout=20_000)
    expect(page.locator(".tool-card")).to_have_attribute("data-status", "ok", timeout=20_000)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)

    assert page.locator(".transcript").inner_text().count("marker") == 1
    expect(page.locator(".bubble.assistant").last).to_contain_text("in its card above")


def test_escape_stops_a_running_turn(product, page):
    open_new_chat(page, *product)
    run_command_approved(page, LONG, until="tick 1")
    page.locator(".pane").click()

    page.keyboard.press("Escape")

    expect(page.locator(".tool-card")).to_have_attribute("data-status", "cancelled", timeout=20_000)
    expect(page.get_by_label("Message")).to_be_focused()


def test_a_message_over_the_limit_is_refused_in_plain_words_and_kept(product, page):
    open_new_chat(page, *product)
    text = "word " * 8_000

    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")

    expect(page.get_by_role("alert")).to_have_text(
        "That message is too long: 39,999 characters, the limit is 32,000."
    )
    expect(page.get_by_label("Message")).to_have_value(text)
    expect(page.locator(".bubble.user")).to_have_count(0)


@pytest.mark.parametrize("width", [360, 768, 1920])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_shell_fits_the_screen_with_the_composer_in_view(product, browser, width, scheme):
    base, password = product
    context = browser.new_context(color_scheme=scheme)
    page = context.new_page()
    try:
        open_new_chat(page, base, password)
        page.get_by_label("Message").fill("use current_time")
        page.get_by_label("Message").press("Enter")
        expect(page.locator(".turn-end")).to_have_count(1, timeout=20_000)
        page.get_by_role("button", name="Rename this chat").click()
        page.get_by_label("The chat's title").fill("A title far too long for any header " * 5)
        page.get_by_label("The chat's title").press("Enter")
        page.set_viewport_size({"width": width, "height": 800})
        page.reload()

        assert page.evaluate("document.documentElement.scrollWidth") <= width
        expect(page.get_by_label("Message")).to_be_in_viewport()
        title = page.locator("#chat-title")
        assert title.evaluate("el => el.scrollWidth > el.clientWidth")
        if width < 768:
            # The chats list is a drawer, opened from the header and closed with Esc.
            expect(page.locator("#chats")).to_be_hidden()
            page.get_by_role("button", name="Chats").click()
            expect(page.locator("#chats")).to_be_visible()
            page.keyboard.press("Escape")
            expect(page.locator("#chats")).to_be_hidden()
        else:
            expect(page.locator("#chats")).to_be_visible()
        page.screenshot(path=SCREENSHOTS / f"chat_shell_{width}_{scheme}.png")
    finally:
        context.close()
