"""Staff disable a tool for everybody on the ops page, in a real browser, and enable it again.

The demo account is the instance's operator (a superuser), so it sees the Ops section.
"""

from __future__ import annotations

from tests.e2e.conftest import sign_in


def test_staff_disable_a_tool_with_a_reason_and_see_it_in_the_log(product, page):
    base, password = product
    sign_in(page, base, password)

    page.get_by_role("link", name="Ops").click()
    page.wait_for_url(f"{base}/ops/tools/")
    page.get_by_label("Reason to disable web_fetch").fill("leaks secrets")
    page.get_by_role("button", name="Disable web_fetch").click()

    page.wait_for_url(f"{base}/ops/tools/")
    assert page.get_by_role("status").inner_text() == "web_fetch is disabled for everybody."
    row = page.locator("#tool-web_fetch")
    assert "Disabled by demo" in row.inner_text()
    assert "leaks secrets" in row.inner_text()
    log = page.get_by_role("region", name="Change log")
    assert "disabled web_fetch for everybody: leaks secrets" in log.inner_text()

    page.get_by_role("button", name="Enable web_fetch").click()
    page.wait_for_url(f"{base}/ops/tools/")
    assert "Enabled" in page.locator("#tool-web_fetch").inner_text()
    assert "enabled web_fetch again" in log.inner_text()
    # The strict CSP would report a blocked inline script or style as a console error.
    assert page.console_errors == []
