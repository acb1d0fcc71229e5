"""The ops page: staff disable a tool for everybody, with a reason, and read who did what.

Rendered by Django's test client on the real database; what a person would notice is the
page's content, the status codes, and whether the tool is really disabled afterwards.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

PAGE = "/ops/tools/"


def _disabled() -> dict[str, str]:
    from profiles_app.services import global_disables

    return global_disables()


def test_anyone_but_staff_gets_a_404_for_the_page_and_its_actions(client, owner):
    client.force_login(owner)

    assert client.get(PAGE).status_code == 404
    disable = client.post(reverse("ops_tool_disable"), {"tool": "web_fetch", "reason": "x"})
    assert disable.status_code == 404
    assert _disabled() == {}


def test_a_visitor_who_is_not_signed_in_is_sent_to_sign_in(client):
    response = client.get(PAGE)

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_staff_see_every_registered_tool_with_its_state(client, staff):
    from toolhub.tools import registry

    client.force_login(staff)
    response = client.get(PAGE)

    assert response.status_code == 200
    page = response.content.decode()
    for tool in registry.all_tools():
        assert f'id="tool-{tool.name}"' in page
    assert 'aria-label="Disable web_fetch"' in page
    assert "No tool has been disabled, enabled or given a policy yet." in page


def test_the_page_offers_no_disable_for_tool_search_and_refuses_a_crafted_one(client, staff):
    client.force_login(staff)

    page = client.get(PAGE).content.decode()
    crafted = client.post(reverse("ops_tool_disable"), {"tool": "tool_search", "reason": "x"})

    assert 'aria-label="Disable tool_search"' not in page
    assert "Always on: models reach deferred tools through it." in page
    assert crafted.status_code == 400
    assert "tool_search cannot be disabled" in crafted.content.decode()
    assert _disabled() == {}


def test_staff_disable_a_tool_with_a_reason_and_the_log_says_who_and_why(client, staff):
    client.force_login(staff)

    response = client.post(
        reverse("ops_tool_disable"), {"tool": "web_fetch", "reason": "leaks secrets"}
    )

    assert response.status_code == 302
    assert _disabled() == {"web_fetch": "disabled globally by ops: leaks secrets"}
    page = client.get(PAGE).content.decode()
    assert "web_fetch is disabled for everybody." in page
    assert "Disabled by ops" in page
    assert 'aria-label="Enable web_fetch"' in page
    assert "disabled web_fetch for everybody: leaks secrets" in page


def test_a_disable_without_a_reason_is_refused_and_changes_nothing(client, staff):
    client.force_login(staff)

    response = client.post(reverse("ops_tool_disable"), {"tool": "web_fetch", "reason": "  "})

    assert response.status_code == 400
    assert "say why the tool is disabled" in response.content.decode()
    assert _disabled() == {}


def test_staff_enable_a_tool_again_and_the_log_keeps_both_changes(client, staff):
    client.force_login(staff)
    client.post(reverse("ops_tool_disable"), {"tool": "web_fetch", "reason": "leaks secrets"})

    response = client.post(reverse("ops_tool_enable"), {"tool": "web_fetch"})

    assert response.status_code == 302
    assert _disabled() == {}
    page = client.get(PAGE).content.decode()
    assert "web_fetch is enabled again." in page
    assert page.index("enabled web_fetch again") < page.index("disabled web_fetch for everybody")


def test_enabling_a_tool_that_is_not_disabled_says_so(client, staff):
    client.force_login(staff)

    response = client.post(reverse("ops_tool_enable"), {"tool": "web_fetch"})

    assert response.status_code == 404
    assert "web_fetch is not disabled" in response.content.decode()


def test_the_page_costs_the_same_queries_with_one_disable_or_thirty(client, staff):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from profiles_app.services import tool_disable_globally
    from toolhub.tools import registry
    from toolhub.tools.layers import META_TOOLS

    client.force_login(staff)
    names = [tool.name for tool in registry.all_tools() if tool.name not in META_TOOLS]
    tool_disable_globally(user=staff, tool=names[0], reason="one")
    client.get(PAGE)
    with CaptureQueriesContext(connection) as few:
        client.get(PAGE)
    for name in names[1:30]:
        tool_disable_globally(user=staff, tool=name, reason="more")
    with CaptureQueriesContext(connection) as many:
        page = client.get(PAGE).content.decode()

    assert page.count("Disabled by ops") == min(30, len(names))
    assert 0 < len(many.captured_queries) == len(few.captured_queries)


def test_a_disable_naming_a_tool_no_longer_registered_is_still_listed_and_can_go(client, staff):
    from profiles_app.services import tool_disable_globally

    tool_disable_globally(user=staff, tool="retired_tool", reason="gone for good")
    client.force_login(staff)

    page = client.get(PAGE).content.decode()
    assert 'id="tool-retired_tool"' in page
    assert "Not registered in this process" in page
    assert 'aria-label="Enable retired_tool"' in page

    client.post(reverse("ops_tool_enable"), {"tool": "retired_tool"})
    assert _disabled() == {}


def test_a_tool_that_cannot_run_in_this_process_says_why_but_a_per_session_gate_does_not(
    client, staff, monkeypatch
):
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    client.force_login(staff)

    page = client.get(PAGE).content.decode()

    web_search = page.split('id="tool-web_search"')[1].split("</tr>")[0]
    bash = page.split('id="tool-bash"')[1].split("</tr>")[0]
    assert "Enabled, unavailable: needs BRAVE_API_KEY" in web_search
    # bash needs a session's workspace: a question for a chat, not for the whole process.
    assert "unavailable" not in bash


def test_staff_set_an_approval_policy_for_everybody_with_a_reason_and_clear_it(client, staff):
    from profiles_app.services import operator_policies

    client.force_login(staff)
    refused = client.post(
        reverse("ops_tool_policy"), {"tool": "web_fetch", "policy": "ask", "reason": " "}
    )
    assert refused.status_code == 400
    assert "say why this policy holds for everybody" in refused.content.decode()
    assert operator_policies() == {}

    done = client.post(
        reverse("ops_tool_policy"), {"tool": "web_fetch", "policy": "ask", "reason": "costly"}
    )
    page = client.get(done["Location"]).content.decode()
    assert "web_fetch asks every time, for everybody." in page
    assert 'id="policy-row-web_fetch"' in page
    assert "web_fetch set to ask every time: costly" in page
    assert operator_policies()["web_fetch"].policy == "ask"

    client.post(reverse("ops_tool_policy_clear"), {"tool": "web_fetch"})
    page = client.get(reverse("ops_tools")).content.decode()
    assert 'id="policy-row-web_fetch"' not in page
    assert "web_fetch back to its author&#x27;s default" in page
    assert operator_policies() == {}


def test_a_person_cannot_set_a_policy_for_everybody_from_the_page(client, owner):
    from profiles_app.services import operator_policies

    client.force_login(owner)
    for name in ("ops_tool_policy", "ops_tool_policy_clear"):
        answer = client.post(reverse(name), {"tool": "bash", "policy": "auto", "reason": "x"})
        assert answer.status_code == 404
    assert operator_policies() == {}
