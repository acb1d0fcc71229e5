"""Approval policies through the API, with the same rules and ``{code, message}`` errors as
the pages: an operator's policy for everybody (staff, audited), a person's per profile."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from profiles_app import services
from profiles_app.models import ToolApprovalPolicy, ToolProfile

pytestmark = pytest.mark.django_db


def test_an_operator_sets_and_clears_a_policy_for_everybody_in_the_admin_log(api, staff):
    put = api(staff).put(
        "/api/tool-policies/bash/", {"policy": "ask", "reason": "shared box"}, format="json"
    )
    assert put.status_code == 200, put.content
    assert put.json() | {"updated": None} == {
        "tool": "bash",
        "policy": "ask",
        "reason": "shared box",
        "created_by": "ops",
        "updated": None,
    }
    assert [row["tool"] for row in api(staff).get("/api/tool-policies/").json()] == ["bash"]
    assert services.operator_policies()["bash"].policy == "ask"

    changed = api(staff).put(
        "/api/tool-policies/bash/", {"policy": "auto", "reason": "sandboxed now"}, format="json"
    )
    assert changed.json()["policy"] == "auto"
    assert services.operator_policies()["bash"].reason == "sandboxed now"

    assert api(staff).delete("/api/tool-policies/bash/").status_code == 204
    assert "bash" not in services.operator_policies()
    assert api(staff).delete("/api/tool-policies/bash/").json()["code"] == "not_found"
    messages = list(
        LogEntry.objects.filter(object_repr__startswith="bash").values_list(
            "change_message", flat=True
        )
    )
    assert set(messages) >= {
        "bash set to ask every time: shared box",
        "bash set to run without asking: sandboxed now",
        "bash back to its author's default",
    }


@pytest.mark.parametrize(
    ("tool", "body", "field"),
    [
        ("bash", {"policy": "deny", "reason": "no"}, "policy"),
        ("bash", {"policy": "ask", "reason": "   "}, "reason"),
        ("bash", {"policy": "ask"}, "reason"),
        ("tool_search", {"policy": "ask", "reason": "noisy"}, "tool"),
        ("not a name", {"policy": "ask", "reason": "x"}, "tool"),
    ],
)
def test_a_policy_an_operator_cannot_set_is_refused_with_its_field(api, staff, tool, body, field):
    answer = api(staff).put(f"/api/tool-policies/{tool}/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] in ("invalid", "meta_tool")
    assert field in answer.json()["fields"]
    assert not ToolApprovalPolicy.objects.exists()


def test_a_person_cannot_set_a_policy_for_everybody(api, owner):
    answer = api(owner).put(
        "/api/tool-policies/bash/", {"policy": "auto", "reason": "mine"}, format="json"
    )
    assert (answer.status_code, answer.json()["code"]) == (403, "permission_denied")
    assert not ToolApprovalPolicy.objects.exists()


def test_a_persons_profile_policies_are_stored_as_given_and_checked(api, owner, other_user):
    created = api(owner).post("/api/profiles/", {"name": "work"}, format="json").json()
    path = f"/api/profiles/{created['id']}/"
    etag = f'"{created["version"]}"'

    good = api(owner).patch(
        path, {"approvals": {"read": "auto", "bash": "ask"}}, format="json", HTTP_IF_MATCH=etag
    )
    assert good.status_code == 200, good.content
    assert good.json()["approvals"] == {"bash": "ask", "read": "auto"}
    assert api(owner).get(path).json()["approvals"] == {"bash": "ask", "read": "auto"}

    etag = good["ETag"]
    for bad, field in [
        ({"approvals": {"bash": "sometimes"}}, "approvals"),
        ({"approvals": ["bash"]}, "approvals"),
        ({"approvals": {"tool_search": "deny"}}, "approvals"),
        ({"approvals": {"no such name!": "ask"}}, "approvals"),
    ]:
        answer = api(owner).patch(path, bad, format="json", HTTP_IF_MATCH=etag)
        assert answer.status_code == 400, (bad, answer.content)
        assert field in answer.json()["fields"], bad
    assert api(owner).get(path).json()["approvals"] == {"bash": "ask", "read": "auto"}

    stale = api(owner).patch(
        path, {"approvals": {}}, format="json", HTTP_IF_MATCH=f'"{created["version"]}"'
    )
    assert stale.status_code == 412
    stranger = api(other_user).patch(path, {"approvals": {}}, format="json", HTTP_IF_MATCH=etag)
    assert stranger.status_code == 404


def test_a_policy_made_changed_and_removed_in_the_admin_is_audited_once_and_seen_at_once(
    client, django_user_model
):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123-xyz")
    client.force_login(admin)
    base = "/admin/profiles_app/toolapprovalpolicy/"

    added = client.post(f"{base}add/", {"tool": "bash", "policy": "ask", "reason": "shared"})
    assert added.status_code == 302
    row = ToolApprovalPolicy.objects.get()
    assert services.operator_policies()["bash"].policy == "ask"

    changed = client.post(
        f"{base}{row.pk}/change/", {"tool": "read", "policy": "auto", "reason": "boxed"}
    )
    assert changed.status_code == 302
    assert [(r.tool, r.policy) for r in ToolApprovalPolicy.objects.all()] == [("bash", "auto")]
    assert services.operator_policies()["bash"].reason == "boxed"

    client.post(f"{base}{row.pk}/delete/", {"post": "yes"})
    assert services.operator_policies() == {}
    assert list(LogEntry.objects.order_by("id").values_list("change_message", flat=True)) == [
        "bash set to ask every time: shared",
        "bash set to run without asking: boxed",
        "bash back to its author's default",
    ]


def test_a_profiles_policies_are_kept_on_create_and_through_export_and_import(api, owner):
    created = api(owner).post(
        "/api/profiles/", {"name": "careful", "approvals": {"bash": "deny"}}, format="json"
    )
    assert created.status_code == 201, created.content
    assert created.json()["approvals"] == {"bash": "deny"}
    refused = api(owner).post(
        "/api/profiles/", {"name": "odd", "approvals": {"bash": "maybe"}}, format="json"
    )
    assert refused.status_code == 400
    assert not ToolProfile.objects.filter(name="odd").exists()

    exported = api(owner).get("/api/profiles/export/").json()
    assert exported["profiles"][0]["approvals"] == {"bash": "deny"}
    ToolProfile.objects.filter(owner=owner).delete()
    imported = api(owner).post("/api/profiles/import/", exported, format="json")
    assert imported.status_code == 201, imported.content
    assert ToolProfile.objects.get(owner=owner, name="careful").approvals == {"bash": "deny"}
