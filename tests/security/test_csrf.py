"""A signed-in browser's cookie alone never changes anything: another site's form or
script that posts with it, without the CSRF token, is refused and nothing changes."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(staff):
    """A staff member's browser that checks CSRF as a real one is checked."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    return client


def test_a_cross_site_form_cannot_disable_a_tool_with_the_cookie(browser):
    from profiles_app.services import global_disables

    response = browser.post("/ops/tools/disable/", {"tool": "web_fetch", "reason": "x"})

    assert response.status_code == 403
    assert global_disables() == {}


def test_a_cross_site_script_cannot_write_through_the_api_with_the_cookie(browser):
    from profiles_app.models import ToolProfile

    disable = browser.post(
        "/api/global-disables/",
        {"tool": "web_fetch", "reason": "x"},
        content_type="application/json",
    )
    profile = browser.post("/api/profiles/", {"name": "Evil"}, content_type="application/json")

    assert (disable.status_code, profile.status_code) == (403, 403)
    assert not ToolProfile.objects.exists()


def test_the_same_form_with_its_token_works(browser):
    from profiles_app.services import global_disables

    page = browser.get("/ops/tools/")
    token = page.cookies["csrftoken"].value

    response = browser.post(
        "/ops/tools/disable/",
        {"tool": "web_fetch", "reason": "leaks", "csrfmiddlewaretoken": token},
    )

    assert response.status_code == 302
    assert "web_fetch" in global_disables()
