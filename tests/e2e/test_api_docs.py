"""The API's browsable docs: served from installed files, under the strict CSP."""

from __future__ import annotations

from tests.e2e.conftest import sign_in


def test_a_signed_in_person_browses_the_api_docs_without_csp_errors(product, page):
    base, password = product
    sign_in(page, base, password)

    page.goto(f"{base}/api/docs/")

    page.get_by_text("/api/sessions/{session_id}/toolset/").first.wait_for()
    assert page.get_by_text("toolhub API").first.is_visible()
    assert page.console_errors == []


def test_the_docs_need_a_signed_in_person(product, page):
    base, _ = product

    response = page.goto(f"{base}/api/docs/")

    assert response.status == 401
