"""A person chats with the demo model in a real browser: a tool card, the streamed answer,
Stop, and the whole conversation back after a reload."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.conftest import open_new_chat, run_command_approved, sign_in


def test_a_person_asks_for_a_tool_by_name_and_sees_its_card_and_the_answer(product, page):
    base, password = product
    sign_in(page, base, password)

    page.get_by_role("link", name="Chat", exact=True).click()
    page.get_by_role("button", name="New chat").first.click()
    page.wait_for_url(f"{base}/chat/*/")
    page.get_by_label("Message").fill("use current_time")
    page.get_by_label("Message").press("Enter")

    card = page.locator(".tool-card")
    expect(card).to_have_attribute("data-status", "ok", timeout=20_000)
    expect(card.locator("summary")).to_contain_text("current_time")
    expect(page.locator(".bubble.assistant").last).not_to_be_empty()
    expect(page.locator(".demo-banner")).to_be_visible()
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    card.locator("summary").press("Enter")
    expect(card.locator("pre.result")).to_be_visible()

    page.reload()
    expect(page.locator(".bubble.user")).to_have_text(["use current_time"])
    expect(page.locator(".tool-card")).to_have_attribute("data-status", "ok")
    # The strict CSP would report a blocked inline script or style as a console error.
    assert page.console_errors == []


def test_a_worker_tool_streams_its_output_live_and_stop_cancels_it(product, page):
    open_new_chat(page, *product)

    run_command_approved(
        page, "for i in $(seq 1 30); do echo tick $i; sleep 1; done", until="tick 2"
    )
    card = page.locator(".tool-card")
    page.get_by_role("button", name="Stop").click()

    expect(card).to_have_attribute("data-status", "cancelled", timeout=20_000)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    # The person allowed it: their card, it stays open on what it printed.
    expect(card).to_have_js_property("open", True)
    # The result replaces the live tail: the output so far, once, and where it stopped.
    expect(card.locator("pre.tail")).to_have_count(0)
    expect(card.locator("pre.result")).to_contain_text("tick 2")
    assert "tick 30" not in card.locator("pre.result").inner_text()
    assert page.console_errors == []


def test_the_models_question_is_answered_from_the_composer(product, page):
    open_new_chat(page, *product)

    page.get_by_label("Message").fill("use ask_user_question: Which colour?")
    page.get_by_label("Message").press("Enter")
    card = page.locator(".tool-card")
    expect(card).to_have_attribute("data-status", "running", timeout=20_000)
    expect(card.locator(".question-text")).to_have_text("Which colour?")
    page.get_by_label("Message").fill("blue")
    page.get_by_label("Message").press("Enter")

    expect(card).to_have_attribute("data-status", "ok", timeout=20_000)
    expect(card.locator(".answered")).to_have_text("You answered: blue")
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    assert page.console_errors == []


def test_a_reload_mid_turn_brings_back_every_event_and_the_live_tail(product, page):
    open_new_chat(page, *product)
    run_command_approved(
        page, "for i in $(seq 1 30); do echo step $i; sleep 1; done", until="step 1"
    )

    page.reload()

    expect(page.locator(".bubble.user")).to_have_count(1)
    card = page.locator(".tool-card")
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-status", "running")
    expect(card.locator("pre.tail")).to_contain_text("step 2", timeout=20_000)
    page.get_by_role("button", name="Stop").click()
    expect(card).to_have_attribute("data-status", "cancelled", timeout=20_000)
    assert page.console_errors == []
