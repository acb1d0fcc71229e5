"""A person shapes a tool profile on the Programs page in a real browser."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.e2e.conftest import sign_in


def test_a_person_creates_a_profile_and_removes_a_tool_from_it(product, page):
    base, password = product
    sign_in(page, base, password)

    page.get_by_role("link", name="Programs").click()
    page.get_by_label("New profile").fill("my-tools")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(f"{base}/programs/profile/*/")
    assert page.get_by_role("heading", name="my-tools").is_visible()

    page.get_by_role("button", name="Remove web_fetch").click()
    page.wait_for_load_state()

    assert page.get_by_role("status").inner_text() == "web_fetch removed from this profile."
    assert page.locator("#add-web_fetch").is_visible()
    assert page.locator("#remove-web_fetch").count() == 0
    assert "Not in this profile (1)" in page.get_by_role("region", name="my-tools").inner_text()
    # The strict CSP would report a blocked inline script or style as a console error.
    assert page.console_errors == []


def _counts(page) -> tuple[str, str]:
    region = page.get_by_role("region", name=re.compile(r"^switch"))
    text = region.inner_text()
    return (
        re.search(r"In this profile \((\d+)\)", text)[1],
        re.search(r"Not in this profile \((\d+)\)", text)[1],
    )


def _new_profile(page, base: str, name: str) -> None:
    page.goto(f"{base}/programs/")
    page.get_by_label("New profile").fill(name)
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(f"{base}/programs/profile/*/")
    page.get_by_role("button", name="Remove web_fetch").click()
    page.wait_for_load_state()


def test_switching_to_only_asks_first_then_can_be_undone(product, page):
    base, password = product
    sign_in(page, base, password)
    _new_profile(page, base, "switch-htmx")
    before = _counts(page)

    # click(), not check(): htmx swaps the form at once, and check() would then verify
    # whatever the label names by that time (the confirmation), not the radio.
    page.get_by_label("Only the ones I pick").click()

    sentence = page.get_by_role("alert")
    expect(sentence).to_have_text(re.compile(r"^\d+ tools will be pinned; tools added later"))
    pinned = re.match(r"\d+", sentence.inner_text())[0]
    expect(page.get_by_role("button", name="Switch", exact=True)).to_be_focused()
    # Nothing is written before Switch: Cancel shows the profile as it was.
    page.get_by_role("link", name="Cancel").click()
    expect(page.get_by_label("All except the ones I remove")).to_be_checked()
    assert _counts(page) == before

    page.get_by_label("Only the ones I pick").click()
    page.get_by_role("button", name="Switch", exact=True).click()

    notice = page.locator("#switch-done")
    expect(notice).to_have_text(f"Switched to only: {pinned} tools pinned.")
    assert notice.get_attribute("role") == "status"
    expect(page.get_by_role("button", name="Undo")).to_be_focused()
    expect(page.get_by_label("Only the ones I pick")).to_be_checked()
    assert _counts(page) == before

    page.get_by_role("button", name="Undo").click()

    # The section says it: the page's own message list (from the removal) is not redrawn.
    expect(page.locator("#profile").get_by_role("status")).to_have_text(
        "Undone: back to all except, as it was."
    )
    expect(page.get_by_label("All except the ones I remove")).to_be_checked()
    assert page.locator("#add-web_fetch").is_visible()
    assert _counts(page) == before
    page.reload()
    expect(page.get_by_role("button", name="Undo")).to_have_count(0)
    assert page.console_errors == []


def test_without_javascript_the_switch_is_a_plain_form_with_the_same_two_steps(product, page):
    base, password = product
    context = page.context.browser.new_context(java_script_enabled=False)
    plain = context.new_page()
    sign_in(plain, base, password)
    _new_profile(plain, base, "switch-plain")
    before = _counts(plain)

    plain.get_by_label("Only the ones I pick").check()
    plain.get_by_role("button", name="Switch…").click()
    plain.wait_for_load_state()

    expect(plain.get_by_role("alert")).to_have_text(
        re.compile(r"^\d+ tools will be pinned; tools added later will stay out\.$")
    )
    plain.get_by_role("button", name="Switch", exact=True).click()
    plain.wait_for_load_state()
    expect(plain.locator("#switch-done")).to_have_text(re.compile(r"^Switched to only: \d+ tools"))
    assert _counts(plain) == before

    plain.get_by_role("button", name="Undo").click()
    plain.wait_for_load_state()

    expect(plain.locator(".messages")).to_have_text("Undone: back to all except, as it was.")
    expect(plain.get_by_label("All except the ones I remove")).to_be_checked()
    assert _counts(plain) == before
    context.close()
