"""Every page fits a phone: at 360 px wide nothing overflows sideways (and at 1920 px the
layout holds too)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import sign_in

PAGES = ["/", "/chat/", "/programs/", "/ops/tools/"]


@pytest.mark.parametrize("width", [360, 1920])
def test_no_page_overflows_sideways(product, page, width):
    base, password = product
    page.set_viewport_size({"width": width, "height": 800})
    sign_in(page, base, password)
    page.goto(f"{base}/chat/")
    if page.get_by_role("button", name="New chat").count():
        page.get_by_role("button", name="New chat").first.click()
        page.wait_for_url(f"{base}/chat/*/")

    overflowing = {}
    for path in PAGES:
        page.goto(f"{base}{path}")
        page.wait_for_load_state("networkidle")
        scroll = page.evaluate("document.documentElement.scrollWidth")
        if scroll > width:
            overflowing[path] = scroll

    assert overflowing == {}
    assert page.console_errors == []
