"""Every way in that writes a tool intent stores intent only (docs/architecture.md, hard
line 1), attacked with
generated input: the REST API (sessions, agents, profiles, import, a message's intent,
the same path a chat frame takes), the admin's forms, the Programs page and the switch of
a profile's mode.

Whatever arrives (registered names, unknown names, duplicates, wrong types, odd fields),
each writer either refuses it with a clear error or stores it; afterwards no stored row
holds a tool name that the input did not carry. No writer ever fills a list from the
registry, but for the one the person asks for by name: a mode switch pins the names its
preview listed before it was confirmed, and no others.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles_app.models import Agent, ToolProfile
from sessions_app.models import ChatSession
from toolhub.tools import registry

pytestmark = pytest.mark.django_db(transaction=True)

_TOOL = st.sampled_from([*registry.names(), "ghost_tool", "mcp__far__away"])
_ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.text(max_size=8),
    st.lists(st.one_of(_TOOL, st.integers(), st.text(max_size=6)), max_size=4),
    st.dictionaries(st.text(max_size=5), _TOOL, max_size=2),
)
_NAMES = st.lists(_TOOL, max_size=5)
_INTENT = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "enabled": st.one_of(st.none(), st.booleans()),
            "toolset": st.one_of(st.none(), st.sampled_from(["default", "research", "gone"])),
            "disabled": _NAMES,
            "allowed": st.one_of(st.none(), _NAMES),
            "web_search": st.one_of(st.none(), st.booleans()),
            "picked": st.one_of(st.none(), _NAMES),
        },
    ),
    _NAMES,
    st.booleans(),
    st.dictionaries(st.sampled_from(["enabled", "picked", "bogus", "disabled"]), _ODD, max_size=3),
)
_WRITES = st.lists(
    st.one_of(
        st.tuples(st.just("session_create"), _INTENT),
        st.tuples(st.just("session_patch"), _INTENT),
        st.tuples(st.just("message"), _INTENT),
        st.tuples(st.just("agent_create"), _INTENT),
        st.tuples(st.just("agent_patch"), _INTENT),
        st.tuples(st.just("admin_session"), _INTENT),
        st.tuples(st.just("profile_create"), st.sampled_from(["only", "all_except"]), _NAMES),
        st.tuples(st.just("profile_patch"), _NAMES),
        st.tuples(st.just("import"), st.dictionaries(st.text(min_size=1, max_size=6), _NAMES)),
        st.tuples(st.just("mode_switch"), st.sampled_from(["only", "all_except"])),
        st.tuples(st.just("page_add"), _TOOL),
        st.tuples(st.just("page_remove"), _TOOL),
    ),
    min_size=1,
    max_size=6,
)


def _strings(value) -> set[str]:
    """Every string the input carries, keys included: a name stored must be one of them."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_strings(k) | _strings(v) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return set().union(*(_strings(item) for item in value))
    return set()


def _stored_names() -> set[str]:
    names: set[str] = set()
    for profile in ToolProfile.objects.all():
        names.update(profile.tools)
    for intent in [
        *ChatSession.objects.values_list("tool_intent", flat=True),
        *Agent.objects.values_list("tool_intent", flat=True),
    ]:
        assert isinstance(intent, dict), intent
        for field in ("disabled", "allowed", "picked"):
            names.update(intent.get(field) or [])
    return names


def _finish_turns(api_client, session_id: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events = api_client.get(f"/api/sessions/{session_id}/events/?after=0").json()["events"]
        if not events or events[-1]["kind"] in ("turn_finished", "turn_failed"):
            return
        time.sleep(0.05)
    raise AssertionError("a turn did not end")


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(writes=_WRITES)
def test_no_writer_stores_a_tool_name_its_input_did_not_carry(
    api, client, owner, django_user_model, writes
):
    admin = django_user_model.objects.filter(username="root").first()
    if admin is None:
        admin = django_user_model.objects.create_superuser("root", "r@example.com", "pw-1-xyz")
    rest = api(owner)
    client.force_login(admin)
    session_id = rest.post("/api/sessions/", {}, format="json").json()["id"]
    agent = rest.post("/api/agents/", {"name": "writer"}, format="json").json()
    profile = rest.post("/api/profiles/", {"name": "mine", "tools": []}, format="json").json()

    shown: set[str] = set()
    for write in writes:
        kind, *args = write
        if kind == "session_create":
            rest.post("/api/sessions/", {"intent": args[0]}, format="json")
        elif kind == "session_patch":
            version = rest.get(f"/api/sessions/{session_id}/").json()["version"]
            rest.patch(
                f"/api/sessions/{session_id}/",
                {"intent": args[0]},
                format="json",
                HTTP_IF_MATCH=f'"{version}"',
            )
        elif kind == "message":
            rest.post(
                f"/api/sessions/{session_id}/messages/",
                {"text": "hi", "intent": args[0]},
                format="json",
            )
            _finish_turns(rest, session_id)
        elif kind == "agent_create":
            rest.post(
                "/api/agents/", {"name": f"a{id(args)}", "tool_intent": args[0]}, format="json"
            )
        elif kind == "agent_patch":
            version = rest.get(f"/api/agents/{agent['id']}/").json()["version"]
            rest.patch(
                f"/api/agents/{agent['id']}/",
                {"tool_intent": args[0]},
                format="json",
                HTTP_IF_MATCH=f'"{version}"',
            )
        elif kind == "admin_session":
            row = ChatSession.objects.get(pk=session_id)
            client.post(
                f"/admin/sessions_app/chatsession/{row.pk}/change/",
                {
                    "owner": row.owner_id,
                    "title": row.title,
                    "agent": row.agent_id,
                    "channel": row.channel,
                    "tool_intent": json.dumps(args[0]),
                },
            )
        elif kind == "profile_create":
            rest.post(
                "/api/profiles/",
                {"name": f"p{len(args[1])}{args[0]}", "mode": args[0], "tools": args[1]},
                format="json",
            )
        elif kind == "profile_patch":
            version = rest.get(f"/api/profiles/{profile['id']}/").json()["version"]
            rest.patch(
                f"/api/profiles/{profile['id']}/",
                {"tools": args[0]},
                format="json",
                HTTP_IF_MATCH=f'"{version}"',
            )
        elif kind == "mode_switch":
            url = f"/api/profiles/{profile['id']}/"
            current = rest.get(url)
            match = f'"{current.json()["version"]}"'
            preview = rest.patch(
                f"{url}?preview=true", {"mode": args[0]}, format="json", HTTP_IF_MATCH=match
            ).json()
            # The names the preview showed are the ones the person confirms.
            shown.update(preview.get("tools", []))
            rest.patch(url, {"mode": args[0]}, format="json", HTTP_IF_MATCH=match)
        elif kind == "import":
            rest.post("/api/profiles/import/", {"profiles": args[0]}, format="json")
        elif kind in ("page_add", "page_remove"):
            client.force_login(owner)
            version = ToolProfile.objects.get(pk=profile["id"]).version
            action = "add" if kind == "page_add" else "remove"
            client.post(
                f"/programs/profile/{profile['id']}/tools/{action}/",
                {"tool": args[0], "version": version},
            )
            client.force_login(admin)

    given_names = _strings([list(write) for write in writes]) | shown
    assert _stored_names() <= given_names
    ChatSession.objects.all().delete()
    Agent.objects.filter(owner=owner).delete()
    ToolProfile.objects.all().delete()
