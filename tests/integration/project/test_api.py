"""The REST API: every endpoint for every role, errors, versions and limits."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext

from profiles_app import services as profile_services
from profiles_app.models import Agent, ToolProfile
from sessions_app import services as session_services
from sessions_app.eventlog import event_append

pytestmark = pytest.mark.django_db


def _body(response) -> dict:
    return json.loads(response.content)


@pytest.mark.parametrize(
    "path",
    [
        "/api/tools/",
        "/api/profiles/",
        "/api/profiles/export/",
        "/api/sessions/",
        "/api/agents/",
        "/api/global-disables/",
        "/api/tool-policies/",
        "/api/audit/",
    ],
)
def test_anonymous_requests_get_401_with_a_code(api, path):
    response = api().get(path)

    assert response.status_code == 401
    assert _body(response)["code"] == "not_authenticated"


@pytest.mark.parametrize("path", ["/api/global-disables/", "/api/tool-policies/", "/api/audit/"])
def test_staff_endpoints_are_403_for_other_users_and_200_for_staff(api, owner, staff, path):
    assert api(owner).get(path).status_code == 403
    assert _body(api(owner).get(path))["code"] == "permission_denied"
    assert api(staff).get(path).status_code == 200


def test_the_catalog_says_why_a_tool_is_unavailable(api, owner, staff, monkeypatch):
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    profile_services.tool_disable_globally(user=staff, tool="bash", reason="leaks secrets")

    tools = {tool["name"]: tool for tool in _body(api(owner).get("/api/tools/"))}

    assert tools["read"]["available"] is True
    assert tools["web_search"]["reason"] == "needs BRAVE_API_KEY"
    assert tools["bash"] == {
        **tools["bash"],
        "available": False,
        "layer": "L5",
        "reason": "disabled globally by ops: leaks secrets",
    }
    assert "safe" in tools["read"]["presets"]


def test_tool_search_is_listed_available_its_own_index_gate_is_no_reason(api, owner):
    # Its own gate (no turn's index here) is not a reason a person could act on.
    tools = {tool["name"]: tool for tool in _body(api(owner).get("/api/tools/"))}

    assert (tools["tool_search"]["available"], tools["tool_search"]["reason"]) == (True, None)


@pytest.mark.parametrize("meta", ["tool_search", "call_tool"])
def test_a_meta_tool_cannot_be_disabled_or_removed_from_a_profile(api, owner, staff, meta):
    profile = _body(api(owner).post("/api/profiles/", {"name": "Mine"}, format="json"))

    disable = api(staff).post(
        "/api/global-disables/", {"tool": meta, "reason": "noisy"}, format="json"
    )
    removal = api(owner).patch(
        f"/api/profiles/{profile['id']}/",
        {"tools": ["bash", meta], "version": profile["version"]},
        format="json",
    )
    created = api(owner).post("/api/profiles/", {"name": "Other", "tools": [meta]}, format="json")
    imported = api(owner).post(
        "/api/profiles/import/",
        {"profiles": [{"name": "Imp", "mode": "all_except", "tools": [meta]}]},
        format="json",
    )

    for refused in (disable, removal, created, imported):
        assert refused.status_code == 400
        assert _body(refused)["code"] == "meta_tool"
        assert meta in _body(refused)["message"]
    assert _body(api(staff).get("/api/global-disables/")) == []
    assert _body(api(staff).get("/api/audit/")) == []
    assert [p["name"] for p in _body(api(owner).get("/api/profiles/")) if p["id"]] == ["Mine"]
    tools = {tool["name"]: tool for tool in _body(api(owner).get("/api/tools/"))}
    assert tools["tool_search"]["available"] is True


def test_profiles_list_default_presets_shared_and_own_but_not_others(api, owner, other_user, staff):
    profile_services.profile_create(user=staff, name="Team", shared=True)
    profile_services.profile_create(user=owner, name="Mine", tools=["gone_tool"])
    profile_services.profile_create(user=other_user, name="Theirs")

    listed = _body(api(owner).get("/api/profiles/"))

    assert [(p["name"], p["source"]) for p in listed][:1] == [("default", "builtin")]
    assert {p["name"] for p in listed if p["source"] == "preset"} >= {"safe", "research"}
    names = {p["name"]: p for p in listed}
    assert names["Team"]["readonly"] is True
    assert names["Mine"]["missing"] == ["gone_tool"]
    assert "Theirs" not in names


def test_a_profile_round_trip_with_versions(api, owner):
    client = api(owner)

    created = client.post("/api/profiles/", {"name": "Mine"}, format="json")
    profile_id = _body(created)["id"]
    fetched = client.get(f"/api/profiles/{profile_id}/")
    renamed = client.patch(
        f"/api/profiles/{profile_id}/",
        {"name": "Renamed"},
        format="json",
        HTTP_IF_MATCH=fetched["ETag"],
    )
    stale_header = client.patch(
        f"/api/profiles/{profile_id}/", {"name": "X"}, format="json", HTTP_IF_MATCH=fetched["ETag"]
    )
    stale_body = client.patch(
        f"/api/profiles/{profile_id}/", {"name": "X", "version": 1}, format="json"
    )
    missing = client.patch(f"/api/profiles/{profile_id}/", {"name": "X"}, format="json")
    deleted = client.delete(f"/api/profiles/{profile_id}/", HTTP_IF_MATCH=renamed["ETag"])

    assert created.status_code == 201
    assert fetched["ETag"] == '"1"'
    assert (renamed.status_code, _body(renamed)["name"], renamed["ETag"]) == (200, "Renamed", '"2"')
    assert (stale_header.status_code, _body(stale_header)["code"]) == (412, "conflict")
    assert (stale_body.status_code, _body(stale_body)["code"]) == (409, "conflict")
    assert (missing.status_code, _body(missing)["code"]) == (428, "precondition_required")
    assert deleted.status_code == 204
    assert not ToolProfile.objects.exists()


def test_another_users_profile_is_404_for_every_method(api, owner, other_user):
    profile = profile_services.profile_create(user=other_user, name="Theirs")
    client = api(owner)
    url = f"/api/profiles/{profile.pk}/"

    responses = [
        client.get(url),
        client.patch(url, {"name": "Hijack", "version": 1}, format="json"),
        client.delete(url, HTTP_IF_MATCH='"1"'),
    ]

    assert [r.status_code for r in responses] == [404, 404, 404]
    assert {_body(r)["code"] for r in responses} == {"not_found"}
    profile.refresh_from_db()
    assert profile.name == "Theirs"


def test_a_shared_profile_is_readable_by_all_and_writable_by_staff(api, owner, staff):
    shared = profile_services.profile_create(user=staff, name="Team", shared=True)
    url = f"/api/profiles/{shared.pk}/"

    assert api(owner).get(url).status_code == 200
    denied = api(owner).patch(url, {"mode": "only", "version": 1}, format="json")
    allowed = api(staff).patch(url, {"mode": "only", "version": 1}, format="json")

    assert denied.status_code == 403
    assert allowed.status_code == 200
    assert LogEntry.objects.filter(object_id=str(shared.pk)).count() == 2


def test_import_and_export_endpoints(api, owner):
    client = api(owner)

    imported = client.post(
        "/api/profiles/import/",
        {"profiles": {"Focus": ["read", "nope"]}, "active": "Focus"},
        format="json",
    )
    clash = client.post("/api/profiles/import/", {"profiles": {"Focus": []}}, format="json")
    exported = client.get("/api/profiles/export/")

    assert imported.status_code == 201
    assert _body(imported) == {
        "created": ["Focus"],
        "unknown_tools": {"Focus": ["nope"]},
        "mapped": {},
        "active": "'Focus' is now what your new chats start with",
    }
    assert clash.status_code == 409
    assert _body(exported)["profiles"] == [
        {"name": "Focus", "mode": "only", "tools": ["read", "nope"], "approvals": {}}
    ]


def test_global_disables_by_staff_over_the_api(api, owner, staff):
    client = api(staff)

    created = client.post(
        "/api/global-disables/", {"tool": "bash", "reason": "leaks"}, format="json"
    )
    duplicate = client.post("/api/global-disables/", {"tool": "bash", "reason": "x"}, format="json")
    by_user = api(owner).post(
        "/api/global-disables/", {"tool": "grep", "reason": "x"}, format="json"
    )
    listed = client.get("/api/global-disables/")
    removed = client.delete("/api/global-disables/bash/")
    again = client.delete("/api/global-disables/bash/")
    audit = client.get("/api/audit/")

    assert created.status_code == 201
    assert _body(created)["created_by"] == "ops"
    assert duplicate.status_code == 409
    assert by_user.status_code == 403
    assert [row["tool"] for row in _body(listed)] == ["bash"]
    assert (removed.status_code, again.status_code) == (204, 404)
    assert [entry["action"] for entry in _body(audit)] == ["deleted", "added"]


def test_sessions_crud_intent_validation_and_isolation(api, owner, other_user):
    client = api(owner)

    created = client.post(
        "/api/sessions/", {"title": "Plan trip", "intent": {"web_search": True}}, format="json"
    )
    session_id = _body(created)["id"]
    invalid = client.patch(
        f"/api/sessions/{session_id}/", {"intent": {"enabled": "yes"}, "version": 1}, format="json"
    )
    patched = client.patch(
        f"/api/sessions/{session_id}/",
        {"intent": ["read"], "plan_mode": True, "version": 1},
        format="json",
    )
    foreign = api(other_user).get(f"/api/sessions/{session_id}/")

    assert created.status_code == 201
    assert _body(created)["intent"]["web_search"] is True
    assert _body(created)["agent"] == Agent.objects.get(name="default").pk
    assert (invalid.status_code, _body(invalid)["code"]) == (400, "invalid")
    assert "intent" in _body(invalid)["fields"]
    assert _body(patched)["intent"]["picked"] == ["read"]
    assert _body(patched)["plan_mode"] is True
    assert foreign.status_code == 404


def test_the_event_log_pages_after_a_seq(api, owner):
    session = session_services.session_create(user=owner)
    for index in range(5):
        event_append(session_id=session.pk, turn="t1", kind="text_delta", data={"text": str(index)})

    page = _body(api(owner).get(f"/api/sessions/{session.pk}/events/?after=2&limit=2"))
    bad = api(owner).get(f"/api/sessions/{session.pk}/events/?after=-1")

    assert [event["seq"] for event in page["events"]] == [3, 4]
    assert page["last_seq"] == 5
    assert bad.status_code == 400


def test_the_inspector_shows_what_the_next_turn_sends(api, owner, staff, monkeypatch):
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    profile_services.tool_disable_globally(user=staff, tool="grep", reason="slow")
    session = session_services.session_create(user=owner, intent={"disabled": ["bash"]})

    inspector = _body(api(owner).get(f"/api/sessions/{session.pk}/toolset/"))

    resident = [tool["name"] for tool in inspector["resident"]]
    hidden = {item["name"]: item for item in inspector["hidden"]}
    assert "read" in resident
    assert len(inspector["fingerprint"]) == 64
    assert (
        inspector["tokens"]["resident"] == sum(tool["tokens"] for tool in inspector["resident"]) + 1
    )
    assert hidden["bash"] == {
        "name": "bash",
        "layer": "L5",
        "reason": "removed in this conversation",
        "words": "removed in this conversation",
    }
    assert hidden["grep"]["reason"] == "disabled globally by ops: slow"
    assert hidden["grep"]["words"] == "turned off by an operator (ops): slow"
    assert hidden["web_search"]["layer"] == "L4"


def test_agents_default_own_shared_and_foreign(api, owner, other_user, staff):
    own = api(owner).post(
        "/api/agents/",
        {"name": "Coder", "strategy": "promote", "tool_intent": {"toolset": "coding"}},
        format="json",
    )
    foreign = api(other_user).get(f"/api/agents/{_body(own)['id']}/")
    default_id = profile_services.default_agent().pk
    by_user = api(owner).patch(
        f"/api/agents/{default_id}/", {"model": "x", "version": 1}, format="json"
    )
    by_staff = api(staff).patch(
        f"/api/agents/{default_id}/", {"model": "x", "version": 1}, format="json"
    )
    bad_intent = api(owner).post(
        "/api/agents/", {"name": "Bad", "tool_intent": {"x": 1}}, format="json"
    )

    assert own.status_code == 201
    assert {agent["name"] for agent in _body(api(owner).get("/api/agents/"))} == {
        "default",
        "Coder",
    }
    assert foreign.status_code == 404
    assert by_user.status_code == 403
    assert by_staff.status_code == 200
    assert bad_intent.status_code == 400


def test_bodies_that_are_not_objects_or_not_json_or_too_large_are_refused(api, owner):
    client = api(owner)

    not_object = client.post("/api/profiles/", [1, 2], format="json")
    not_json = client.post("/api/profiles/", "{nope", content_type="application/json")
    too_large = client.post(
        "/api/profiles/import/", {"profiles": {"A": ["x" * 60] * 20_000}}, format="json"
    )

    assert (not_object.status_code, _body(not_object)["code"]) == (400, "bad_json")
    assert (not_json.status_code, _body(not_json)["code"]) == (400, "bad_json")
    assert (too_large.status_code, _body(too_large)["code"]) == (413, "too_large")
    assert not ToolProfile.objects.exists()


@pytest.mark.parametrize(
    "path", ["/api/profiles/", "/api/sessions/", "/api/agents/", "/api/global-disables/"]
)
def test_list_endpoints_use_a_constant_number_of_queries(api, staff, path):
    def make(count: int, start: int) -> None:
        for index in range(start, start + count):
            profile_services.profile_create(user=staff, name=f"P{index}")
            session_services.session_create(user=staff)
            Agent.objects.create(name=f"A{index}", owner=staff)
            profile_services.tool_disable_globally(user=staff, tool=f"t{index}", reason="x")

    client = api(staff)
    make(1, 0)
    with CaptureQueriesContext(connection) as one:
        assert client.get(path).status_code == 200
    make(49, 1)
    with CaptureQueriesContext(connection) as fifty:
        assert client.get(path).status_code == 200

    assert len(one) == len(fifty)


def test_the_openapi_schema_is_served(api, owner):
    response = api(owner).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    paths = json.loads(response.content)["paths"]
    assert "/api/sessions/{session_id}/toolset/" in paths


def test_an_intent_naming_an_unknown_toolset_is_refused_and_a_deleted_one_explained(api, owner):
    client = api(owner)
    profile = profile_services.profile_create(user=owner, name="Temp")

    unknown = client.post("/api/sessions/", {"intent": {"toolset": "nope"}}, format="json")
    session = _body(client.post("/api/sessions/", {"intent": {"toolset": "Temp"}}, format="json"))
    profile_services.profile_delete(user=owner, profile=profile, version=1)
    inspector = client.get(f"/api/sessions/{session['id']}/toolset/")

    assert (unknown.status_code, _body(unknown)["fields"]) == (400, {"intent": ["unknown toolset"]})
    assert inspector.status_code == 409
    assert "no profile or preset named 'Temp'" in _body(inspector)["message"]


def test_a_chat_frame_intent_merge_never_overwrites_a_newer_rest_edit(owner):
    session = session_services.session_create(user=owner, intent={"disabled": ["bash"]})
    stale = type(session).objects.get(pk=session.pk)
    session_services.session_update(
        user=owner, session=session, version=1, intent={"disabled": ["bash", "grep"]}
    )

    merged = session_services.session_intent_merge(session=stale, patch={"web_search": True})

    assert merged.tool_intent["disabled"] == ["bash", "grep"]
    assert merged.tool_intent["web_search"] is True
    assert merged.version == 3


def test_a_chat_refuses_to_remove_a_meta_tool_by_any_writer_but_keeps_an_old_one(owner):
    from toolhub.lib.errors import MetaToolRefused

    session = session_services.session_create(user=owner)
    writers = {
        "create": lambda: session_services.session_create(
            user=owner, intent={"disabled": ["tool_search"]}
        ),
        "update": lambda: session_services.session_update(
            user=owner, session=session, version=1, intent={"disabled": ["call_tool"]}
        ),
        "frame": lambda: session_services.session_intent_merge(
            session=session, patch={"disabled": ["bash", "tool_search"]}
        ),
    }
    refused = {}
    for name, write in writers.items():
        with pytest.raises(MetaToolRefused) as caught:
            write()
        refused[name] = caught.value.message.split(":")[0]
    # A removal stored before the rule (it never had an effect) does not block other edits.
    type(session).objects.filter(pk=session.pk).update(tool_intent={"disabled": ["tool_search"]})
    merged = session_services.session_intent_merge(session=session, patch={"web_search": True})

    assert refused == {
        "create": "tool_search cannot be removed from a chat",
        "update": "call_tool cannot be removed from a chat",
        "frame": "tool_search cannot be removed from a chat",
    }
    assert merged.tool_intent["web_search"] is True


def test_the_catalog_shows_tools_that_never_registered_and_broken_plugins(
    api, owner, registry_state
):
    from toolhub.tools import function

    @function(available_if=False)
    def needs_gpu() -> str:
        """Only with an accelerator."""
        return ""

    registry_state.record_load_error("acme_tools", "ImportError: no module named acme")

    tools = {tool["name"]: tool for tool in _body(api(owner).get("/api/tools/"))}

    assert tools["needs_gpu"]["layer"] == "L1"
    assert tools["needs_gpu"]["reason"] == "not registered: available_if is false"
    assert tools["acme_tools"]["reason"] == (
        "plugin failed to load: ImportError: no module named acme"
    )
    assert tools["acme_tools"]["available"] is False


def _offered_now(*removed: str) -> list[str]:
    from toolhub.tools import registry
    from toolhub.tools.layers import META_TOOLS

    return [
        tool.name
        for tool in registry.all_tools()
        if tool.name not in removed and tool.name not in META_TOOLS
    ]


def test_a_mode_change_says_what_it_pinned_and_what_was_there_before(api, owner):
    profile = profile_services.profile_create(user=owner, name="Mine", tools=["bash"])
    pinned = _offered_now("bash")

    response = api(owner).patch(
        f"/api/profiles/{profile.pk}/", {"mode": "only"}, format="json", HTTP_IF_MATCH='"1"'
    )

    body = _body(response)
    assert (response.status_code, response["ETag"]) == (200, '"2"')
    assert (body["mode"], body["tools"], body["version"]) == ("only", pinned, 2)
    assert body["switch"] == {
        "applied": True,
        "mode": "only",
        "pinned": len(pinned),
        "removed": 0,
        "message": f"Switched to only: {len(pinned)} tools pinned.",
        "previous": {"mode": "all_except", "tools": ["bash"]},
    }


def test_a_preview_patch_answers_the_profile_as_it_would_be_and_writes_nothing(api, owner):
    profile = profile_services.profile_create(user=owner, name="Mine", mode="only", tools=["read"])
    removed = _offered_now("read")

    response = api(owner).patch(
        f"/api/profiles/{profile.pk}/?preview=true",
        {"mode": "all_except"},
        format="json",
        HTTP_IF_MATCH='"1"',
    )

    body = _body(response)
    assert (response.status_code, response["ETag"]) == (200, '"1"')
    assert (body["mode"], body["tools"], body["version"]) == ("all_except", removed, 1)
    assert body["switch"]["applied"] is False
    assert body["switch"]["removed"] == len(removed)
    assert body["switch"]["message"] == (
        f"{len(removed)} tools will be listed as removed; tools added later will join."
    )
    profile.refresh_from_db()
    assert (profile.mode, profile.tools, profile.version) == ("only", ["read"], 1)


def test_a_switch_is_undone_by_patching_its_previous_state_back_and_a_stale_undo_is_412(api, owner):
    client = api(owner)
    profile = profile_services.profile_create(user=owner, name="Mine", tools=["bash", "gone"])
    url = f"/api/profiles/{profile.pk}/"
    switched = client.patch(url, {"mode": "only"}, format="json", HTTP_IF_MATCH='"1"')
    previous = _body(switched)["switch"]["previous"]

    undone = client.patch(url, previous, format="json", HTTP_IF_MATCH=switched["ETag"])
    stale = client.patch(url, previous, format="json", HTTP_IF_MATCH=switched["ETag"])

    assert (
        _body(undone)["switch"]["message"] == "Switched to all except: 2 tools listed as removed."
    )
    assert (_body(undone)["mode"], _body(undone)["tools"]) == ("all_except", ["bash", "gone"])
    assert (stale.status_code, _body(stale)["code"]) == (412, "conflict")
    assert "changed since you read it" in _body(stale)["message"]
    profile.refresh_from_db()
    assert (profile.mode, profile.tools, profile.version) == ("all_except", ["bash", "gone"], 3)


def test_a_patch_that_keeps_the_mode_has_no_switch(api, owner):
    profile = profile_services.profile_create(user=owner, name="Mine")

    response = api(owner).patch(
        f"/api/profiles/{profile.pk}/", {"name": "Other"}, format="json", HTTP_IF_MATCH='"1"'
    )

    assert (_body(response)["name"], _body(response)["switch"]) == ("Other", None)


def test_preview_is_true_or_false_and_another_users_profile_is_404(api, owner, other_user):
    mine = profile_services.profile_create(user=owner, name="Mine")
    theirs = profile_services.profile_create(user=other_user, name="Theirs")
    client = api(owner)

    wrong = client.patch(
        f"/api/profiles/{mine.pk}/?preview=yes",
        {"mode": "only"},
        format="json",
        HTTP_IF_MATCH='"1"',
    )
    foreign = client.patch(
        f"/api/profiles/{theirs.pk}/?preview=true",
        {"mode": "only"},
        format="json",
        HTTP_IF_MATCH='"1"',
    )

    assert (wrong.status_code, _body(wrong)["fields"]) == (
        400,
        {"preview": ["must be true or false"]},
    )
    assert (foreign.status_code, _body(foreign)["code"]) == (404, "not_found")
    assert ToolProfile.objects.get(pk=mine.pk).version == 1


def test_the_schema_documents_the_switch_and_the_preview(api, owner):
    schema = api(owner).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    operation = _body(schema)["paths"]["/api/profiles/{profile_id}/"]["patch"]

    assert "preview" in {parameter["name"] for parameter in operation["parameters"]}
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ProfileChange"
    }
