"""A person shapes a tool profile on the Programs page in a real browser."""

from __future__ import annotations

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
