"""The admin writes the same audit trail as the API; and no stored row ever holds an
expansion of the registry, whatever sequence of services ran."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles_app import services as profile_services
from profiles_app.models import Agent, GlobalDisable, ToolProfile
from sessions_app import services as session_services
from sessions_app.models import ChatSession
from toolhub.lib.errors import ServiceError
from toolhub.tools import registry

pytestmark = pytest.mark.django_db


def test_adding_a_global_disable_in_the_admin_writes_one_audit_entry(client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123-xyz")
    client.force_login(admin)

    response = client.post(
        "/admin/profiles_app/globaldisable/add/", {"tool": "bash", "reason": "leaks secrets"}
    )

    assert response.status_code == 302
    assert GlobalDisable.objects.get().created_by == admin
    entry = LogEntry.objects.get()
    assert entry.user == admin
    assert "leaks secrets" in entry.get_change_message()
    assert profile_services.global_disables()["bash"].endswith("leaks secrets")


@pytest.mark.parametrize("model", ["profiles_app/agent", "sessions_app/chatsession"])
def test_the_admin_refuses_an_intent_that_is_not_one_and_stores_a_valid_one_canonical(
    client, django_user_model, owner, model
):
    from django.forms.models import model_to_dict

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123-xyz")
    client.force_login(admin)
    row = (
        Agent.objects.create(name="Helper", owner=owner)
        if model == "profiles_app/agent"
        else session_services.session_create(user=owner)
    )
    url = f"/admin/{model}/{row.pk}/change/"
    fields = {
        key: value
        for key, value in model_to_dict(row).items()
        if value is not None and key not in ("id", "version", "last_seq")
    }

    def post(intent: str):
        return client.post(url, {**fields, "tool_intent": intent})

    bogus = post('{"bogus": 1}')
    row.refresh_from_db()
    assert bogus.status_code == 200
    assert "unknown intent field(s): bogus" in bogus.content.decode()
    assert "bogus" not in row.tool_intent

    picked = post('["read", "read", "grep"]')
    row.refresh_from_db()
    assert picked.status_code == 302, picked.content.decode()[-2000:]
    assert row.tool_intent["picked"] == ["read", "grep"]


def test_a_write_that_bypasses_the_forms_cannot_store_a_malformed_intent(owner):
    session = session_services.session_create(user=owner)

    from django.db import transaction

    with pytest.raises(ValueError, match="bogus"), transaction.atomic():
        ChatSession.objects.filter(pk=session.pk).update(tool_intent={"bogus": 1})
    session.refresh_from_db()
    assert "bogus" not in session.tool_intent


def test_deleting_a_global_disable_in_the_admin_is_audited(client, django_user_model, staff):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123-xyz")
    disable = profile_services.tool_disable_globally(user=staff, tool="bash", reason="x")
    client.force_login(admin)

    response = client.post(
        f"/admin/profiles_app/globaldisable/{disable.pk}/delete/", {"post": "yes"}
    )

    assert response.status_code == 302
    assert not GlobalDisable.objects.exists()
    assert LogEntry.objects.filter(user=admin, action_flag=3).count() == 1


_NAMES = st.sampled_from(registry.names())
_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.lists(_NAMES, max_size=6), st.booleans()),
        st.tuples(st.just("remove"), _NAMES),
        st.tuples(st.just("add"), _NAMES),
        st.tuples(st.just("session"), st.lists(_NAMES, max_size=4), st.booleans()),
        st.tuples(st.just("agent"), st.lists(_NAMES, max_size=4)),
        st.tuples(st.just("import"), st.lists(_NAMES, max_size=4)),
    ),
    max_size=8,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=_OPERATIONS)
def test_services_store_only_the_names_a_person_gave_never_an_expansion(owner, operations):
    given_names: set[str] = set()
    for operation in operations:
        for part in operation[1:]:
            if isinstance(part, str):
                given_names.add(part)
            elif isinstance(part, list):
                given_names.update(part)
    counter = [0]

    def fresh() -> str:
        counter[0] += 1
        return f"P{counter[0]}"

    for operation in operations:
        kind = operation[0]
        try:
            if kind == "create":
                profile_services.profile_create(
                    user=owner,
                    name=fresh(),
                    mode="only" if operation[2] else "all_except",
                    tools=operation[1],
                )
            elif kind in ("remove", "add") and ToolProfile.objects.exists():
                profile = ToolProfile.objects.first()
                service = (
                    profile_services.profile_tool_remove
                    if kind == "remove"
                    else profile_services.profile_tool_add
                )
                service(user=owner, profile=profile, version=profile.version, tool=operation[1])
            elif kind == "session":
                session_services.session_create(
                    user=owner, intent={"disabled": operation[1], "web_search": operation[2]}
                )
            elif kind == "agent":
                profile_services.agent_create(
                    user=owner, name=fresh(), tool_intent={"disabled": operation[1]}
                )
            elif kind == "import":
                profile_services.profile_import(
                    user=owner, data={"profiles": {fresh(): operation[1]}}
                )
        except ServiceError:
            pass

    stored = [set(profile.tools) for profile in ToolProfile.objects.all()]
    for intent in [
        *ChatSession.objects.values_list("tool_intent", flat=True),
        *Agent.objects.values_list("tool_intent", flat=True),
    ]:
        stored += [set(intent.get(field) or []) for field in ("disabled", "allowed", "picked")]
    assert all(names <= given_names for names in stored)
    ToolProfile.objects.all().delete()
    ChatSession.objects.all().delete()
    Agent.objects.filter(owner=owner).delete()


def test_the_admin_lists_a_staff_members_own_profile_and_agent_with_a_link_into_the_product(
    client, django_user_model
):
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123-xyz")
    profile = profile_services.profile_create(user=root, name="deep")
    agent = profile_services.agent_create(user=root, name="helper")
    client.force_login(root)

    profiles = client.get("/admin/profiles_app/toolprofile/")
    agents = client.get("/admin/profiles_app/agent/")

    assert profiles.status_code == 200
    assert f'href="/programs/profile/{profile.pk}/"' in profiles.content.decode()
    assert agents.status_code == 200
    assert f"/agents/{agent.pk}/" in agents.content.decode()
