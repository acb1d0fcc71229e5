"""The context inspector beside a chat answers "why can't my agent see tool X?" in a
real browser: a profile picked in the composer, Tools switched off, a global disable."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.conftest import new_chat, open_new_chat, sign_in


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
    page.get_by_label("Profile").select_option("lean")
    _say(page, "hello")

    hidden = page.locator("#hidden-calculate")
    expect(hidden).to_be_visible(timeout=10_000)
    expect(hidden).to_contain_text("lean")
    page.reload()
    expect(page.get_by_label("Profile")).to_have_value("lean")
    assert page.console_errors == []


def test_with_tools_off_the_next_turn_sends_no_tools(product, page):
    open_new_chat(page, *product)

    page.get_by_label("Tools").uncheck()
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
    expect(hidden).to_contain_text("disabled globally by", timeout=10_000)
    expect(hidden).to_contain_text("quota spent")
    assert page.console_errors == []


def test_plan_mode_from_the_composer_hides_tools_unsafe_in_plan(product, page):
    open_new_chat(page, *product)

    page.get_by_label("Plan mode").check()

    expect(page.locator("#hidden-bash")).to_contain_text("plan", timeout=10_000)
    page.reload()
    expect(page.get_by_label("Plan mode")).to_be_checked()
    assert page.console_errors == []
