"""The conversation gets the screen: the composer is one row (the message box, Send or
Stop, and one button for the chat's options), so the conversation's pane takes most of
the viewport's height on a laptop and on a phone."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import open_new_chat

# The share of the viewport's height the conversation's pane must get (issue 42).
SIZES = [((1440, 900), 0.70), ((390, 844), 0.60)]


@pytest.mark.parametrize(("size", "share"), SIZES, ids=["1440x900", "390x844"])
def test_the_conversation_gets_most_of_the_screen(product, page, size, share):
    width, height = size
    open_new_chat(page, *product)
    page.set_viewport_size({"width": width, "height": height})
    page.reload()

    pane = page.locator("[data-pane]").bounding_box()
    print(f"conversation {width}x{height}: {pane['height']:.0f} of {height} px")

    assert pane["height"] >= share * height, pane
    assert page.console_errors == []


def test_the_options_open_from_one_button_and_choices_off_the_default_show_as_chips(product, page):
    open_new_chat(page, *product)
    button = page.get_by_role("button", name="Chat options")
    panel = page.get_by_role("group", name="Chat options")
    chips = page.get_by_role("list", name="Choices that differ from the default")
    expect(panel).to_be_hidden()
    expect(chips.get_by_role("button")).to_have_count(0)

    # The keyboard reaches it from the message box, and Enter opens it.
    page.get_by_label("Message").focus()
    page.keyboard.press("Shift+Tab")
    expect(button).to_be_focused()
    page.keyboard.press("Enter")
    expect(panel).to_be_visible()
    expect(button).to_have_attribute("aria-expanded", "true")
    page.get_by_label("Plan mode").check()
    web = page.get_by_role("group", name="Web search")
    web.get_by_role("radio", name="Off", exact=True).check()
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    expect(button).to_be_focused()
    expect(chips.get_by_role("button")).to_have_text(["Web search off", "Plan mode"])

    # A chip opens the options at its own control.
    chips.get_by_role("button", name="Plan mode").click()
    expect(panel).to_be_visible()
    expect(page.get_by_label("Plan mode")).to_be_focused()
    page.get_by_label("Plan mode").uncheck()
    page.get_by_label("Message").click()  # anywhere else closes them
    expect(panel).to_be_hidden()
    expect(chips.get_by_role("button")).to_have_text(["Web search off"])
    assert page.console_errors == []


def test_scrolling_up_offers_a_way_back_to_the_latest_and_it_goes_at_the_bottom(product, page):
    open_new_chat(page, *product)
    page.set_viewport_size({"width": 1440, "height": 600})
    message = page.get_by_label("Message")
    message.fill("\n".join(f"line {n}" for n in range(60)))
    message.press("Enter")
    expect(page.locator(".bubble.assistant")).to_have_count(1, timeout=20_000)
    # The turn is over: nothing arrives any more that could show the button by itself.
    expect(page.locator(".turn-end .usage")).to_be_visible(timeout=20_000)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    page.wait_for_load_state("networkidle")
    jump = page.get_by_role("button", name="Jump to latest")
    expect(jump).to_be_hidden()

    page.locator("[data-pane]").evaluate("pane => pane.scrollTo(0, 0)")
    expect(jump).to_be_visible()
    jump.click()
    expect(jump).to_be_hidden()
    at_bottom = page.locator("[data-pane]").evaluate(
        "pane => pane.scrollHeight - pane.scrollTop - pane.clientHeight < 80"
    )
    assert at_bottom
    expect(message).to_be_focused()
    assert page.console_errors == []


def test_a_message_sent_while_the_assistant_answers_stays_in_the_box_and_the_note_goes_after(
    product, page
):
    open_new_chat(page, *product)
    message = page.get_by_label("Message")
    message.fill("use bash: echo hi")
    message.press("Enter")
    expect(page.get_by_role("button", name="Allow once: bash")).to_be_visible(timeout=20_000)

    message.fill("and another thing")
    message.press("Enter")
    note = page.locator("[data-composer-error]")
    expect(note).to_have_text(
        "The assistant is still answering: your message stays here until it is done, or press Stop."
    )
    expect(message).to_have_value("and another thing")
    expect(page.locator(".transcript .error")).to_have_count(0)

    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)
    expect(note).to_be_hidden()
    expect(message).to_have_value("and another thing")
    assert page.console_errors == []


def test_a_message_from_an_earlier_day_says_which_day(product, page):
    open_new_chat(page, *product)
    page.get_by_label("Message").fill("hello")
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".bubble.assistant")).to_have_count(1, timeout=20_000)
    stamp = page.locator(".transcript time").first
    expect(stamp).to_have_text(re.compile(r"^\d{1,2}:\d{2}"))  # today: the time alone

    sent = datetime.now()
    page.clock.install(time=sent + timedelta(days=3))
    page.reload()
    day = f"{sent:%b} {sent.day}, "
    expect(stamp).to_have_text(re.compile(f"^{day}"))

    page.clock.install(time=sent + timedelta(days=400))
    page.reload()
    expect(stamp).to_have_text(re.compile(f"^{day}{sent.year}"))
    assert page.console_errors == []
