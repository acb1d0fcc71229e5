"""The API's browsable docs: served from installed files, under the strict CSP."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.conftest import sign_in


def test_a_signed_in_person_browses_the_api_docs_without_csp_errors(product, page):
    base, password = product
    sign_in(page, base, password)

    page.goto(f"{base}/api/docs/")

    page.get_by_text("/api/sessions/{session_id}/toolset/").first.wait_for()
    assert page.get_by_text("toolhub API").first.is_visible()
    assert page.console_errors == []


def test_signed_out_the_docs_lead_to_the_sign_in_and_back(product, page):
    base, password = product

    page.goto(f"{base}/api/docs/")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()

    page.get_by_text("/api/sessions/{session_id}/toolset/").first.wait_for()
    assert page.url == f"{base}/api/docs/"
    assert page.console_errors == []
