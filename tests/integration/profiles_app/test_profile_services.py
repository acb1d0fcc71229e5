"""Profile and global-disable services: rules, versions, imports, audit, resolution."""

from __future__ import annotations

import threading

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection

from profiles_app import services
from profiles_app.models import GlobalDisable, ToolProfile
from tests.conftest import need
from toolhub.lib.errors import Conflict, Forbidden, Invalid, MetaToolRefused, NotFound, Stale
from toolhub.tools import ToolContext, function, resolve

pytestmark = pytest.mark.django_db


def test_a_new_profile_is_a_copy_of_default_all_tools_nothing_removed(owner):
    profile = services.profile_create(user=owner, name="Mine")

    assert (profile.mode, profile.tools, profile.owner) == ("all_except", [], owner)


@pytest.mark.parametrize("name", ["default", "research", "", " ", "x" * 65, "bad/name"])
def test_reserved_or_malformed_profile_names_are_refused(owner, name):
    with pytest.raises((Conflict, Invalid)):
        services.profile_create(user=owner, name=name)
    assert not ToolProfile.objects.exists()


def test_names_are_unique_per_owner_but_two_people_may_share_a_name(owner, other_user):
    services.profile_create(user=owner, name="Work")
    services.profile_create(user=other_user, name="Work")

    with pytest.raises(Conflict):
        services.profile_create(user=owner, name="Work")


def test_only_staff_create_shared_profiles_and_the_change_is_audited(owner, staff):
    with pytest.raises(Forbidden):
        services.profile_create(user=owner, name="Team", shared=True)

    shared = services.profile_create(user=staff, name="Team", shared=True)

    assert shared.owner is None
    entry = LogEntry.objects.get(object_id=str(shared.pk))
    assert entry.user == staff
    assert "created shared profile Team" in entry.get_change_message()


def test_removing_and_adding_a_tool_edits_only_the_short_list(owner):
    all_except = services.profile_create(user=owner, name="A")
    only = services.profile_create(user=owner, name="B", mode="only", tools=["read"])

    all_except = services.profile_tool_remove(
        user=owner, profile=all_except, version=1, tool="bash"
    )
    only = services.profile_tool_add(user=owner, profile=only, version=1, tool="grep")
    only = services.profile_tool_remove(user=owner, profile=only, version=2, tool="read")
    all_except = services.profile_tool_add(user=owner, profile=all_except, version=2, tool="bash")

    assert all_except.tools == []
    assert only.tools == ["grep"]
    assert (all_except.version, only.version) == (3, 3)


def test_a_stale_write_is_a_conflict_and_changes_nothing(owner):
    profile = services.profile_create(user=owner, name="A")
    services.profile_rename(user=owner, profile=profile, version=1, name="B")

    with pytest.raises(Conflict):
        services.profile_rename(user=owner, profile=profile, version=1, name="C")
    profile.refresh_from_db()
    assert (profile.name, profile.version) == ("B", 2)


@pytest.mark.django_db(transaction=True)
def test_of_two_concurrent_writers_with_the_same_version_exactly_one_wins(owner):
    if connection.vendor != "postgresql":
        # SQLite's shared-cache test database refuses concurrent writers outright.
        need("PostgreSQL", "concurrent writers need the real database (set DATABASE_URL)")
    profile = services.profile_create(user=owner, name="Race")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def writer(name: str) -> None:
        barrier.wait()
        try:
            services.profile_rename(user=owner, profile=profile, version=1, name=name)
            outcomes.append("won")
        except Conflict:
            outcomes.append("conflict")
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("Left", "Right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    profile.refresh_from_db()
    assert sorted(outcomes) == ["conflict", "won"]
    assert profile.version == 2
    assert profile.name in {"Left", "Right"}


def test_import_accepts_functions_meta_and_reports_unknown_tools(owner):
    data = {
        "profiles": {"Focus": ["read", "grep", "gone_tool"], "Web": ["web_fetch"]},
        "active": "Focus",
    }

    report = services.profile_import(user=owner, data=data)

    assert report.created == ("Focus", "Web")
    assert report.unknown_tools == {"Focus": ["gone_tool"]}
    focus = ToolProfile.objects.get(owner=owner, name="Focus")
    assert (focus.mode, focus.tools) == ("only", ["read", "grep", "gone_tool"])


def test_the_seeds_functions_meta_imports_with_default_presets_and_all_tools_mapped(owner):
    from toolhub.tools import registry
    from toolhub.tools.presets import default_tools

    every_tool = list(default_tools(registry))
    services.profile_create(user=owner, name="research copy")
    data = {
        "profiles": {
            "default": every_tool,
            "research": ["web_fetch", "read"],
            "safe": ["read", "grep"],
            "Everything": [*reversed(every_tool), "not_here"],
            "Picked": ["read"],
        },
        "active": "default",
    }

    report = services.profile_import(user=owner, data=data)

    assert report.created == ("research copy 2", "safe copy", "Everything", "Picked")
    assert set(report.mapped) == {"default", "research", "safe", "Everything"}
    assert "built-in default" in report.mapped["default"]
    assert "'research copy 2'" in report.mapped["research"]
    stored = {p.name: (p.mode, p.tools) for p in ToolProfile.objects.filter(owner=owner)}
    assert stored["research copy 2"] == ("only", ["web_fetch", "read"])
    assert stored["Everything"] == ("all_except", [])
    assert stored["Picked"] == ("only", ["read"])
    assert "default" not in stored
    # "All tools" removes nothing, so the name not registered here is not kept either.
    assert report.unknown_tools == {}


def test_the_active_profile_of_functions_meta_is_what_new_chats_start_with(owner):
    from profiles_app.models import Agent
    from sessions_app.services import session_create

    report = services.profile_import(
        user=owner, data={"profiles": {"research": ["web_fetch"]}, "active": "research"}
    )

    assert report.active == "'research copy' is now what your new chats start with"
    assert services.new_chat_toolset(user=owner) == "research copy"
    assert session_create(user=owner).tool_intent["toolset"] == "research copy"
    # The request's own choice, and an agent that names its toolset, come first.
    assert session_create(user=owner, intent={"toolset": None}).tool_intent["toolset"] is None
    agent = Agent.objects.create(name="Reader", tool_intent={"toolset": "safe"})
    assert session_create(user=owner, agent=agent.pk).tool_intent["toolset"] is None
    # Deleting the profile sends new chats back to the built-in default.
    ToolProfile.objects.get(owner=owner, name="research copy").delete()
    assert services.new_chat_toolset(user=owner) == ""
    assert session_create(user=owner).tool_intent["toolset"] is None


def test_new_chats_start_only_with_a_toolset_the_person_can_see(owner, other_user):
    theirs = services.profile_create(user=other_user, name="Theirs")

    with pytest.raises(Invalid):
        services.new_chat_default_set(user=owner, toolset=theirs.name)
    with pytest.raises(Invalid):
        services.new_chat_default_set(user=owner, toolset=["safe"])
    assert services.new_chat_default_set(user=owner, toolset=" safe ") == "safe"
    assert services.new_chat_default_set(user=owner, toolset="default") == ""
    assert services.new_chat_toolset(user=owner) == ""


def test_import_is_all_or_nothing_on_a_clash_or_a_bad_entry(owner):
    services.profile_create(user=owner, name="Taken")

    with pytest.raises(Conflict, match="Taken"):
        services.profile_import(
            user=owner, data={"profiles": [{"name": "Fresh"}, {"name": "Taken"}]}
        )
    with pytest.raises(Invalid):
        services.profile_import(
            user=owner, data={"profiles": [{"name": "Fresh"}, {"name": "X", "tools": "bash"}]}
        )
    assert list(ToolProfile.objects.values_list("name", flat=True)) == ["Taken"]


def test_export_then_import_round_trips(owner, other_user):
    services.profile_create(user=owner, name="One", mode="only", tools=["read"])
    services.profile_create(user=owner, name="Two", tools=["bash"])

    services.profile_import(user=other_user, data=services.profile_export(user=owner))

    assert (
        services.profile_export(user=other_user)["profiles"]
        == (services.profile_export(user=owner)["profiles"])
    )


def test_a_global_disable_needs_staff_and_a_reason_and_is_audited(owner, staff):
    with pytest.raises(Forbidden):
        services.tool_disable_globally(user=owner, tool="bash", reason="risky")
    with pytest.raises(Invalid):
        services.tool_disable_globally(user=staff, tool="bash", reason="  ")

    services.tool_disable_globally(user=staff, tool="bash", reason="leaks secrets")

    assert services.global_disables() == {"bash": "disabled globally by ops: leaks secrets"}
    assert "leaks secrets" in LogEntry.objects.get().get_change_message()
    with pytest.raises(Conflict):
        services.tool_disable_globally(user=staff, tool="bash", reason="again")


def test_enabling_again_is_audited_and_takes_effect_at_once(staff):
    services.tool_disable_globally(user=staff, tool="bash", reason="leaks secrets")
    assert "bash" in services.global_disables()

    services.tool_enable_globally(user=staff, tool="bash", reason="fixed")

    assert services.global_disables() == {}
    assert not GlobalDisable.objects.exists()
    assert [entry.get_change_message() for entry in LogEntry.objects.order_by("pk")][-1] == (
        "enabled bash again: fixed"
    )


def test_a_tool_registered_after_a_profile_reaches_all_except_but_not_only(owner, registry_state):
    all_except = services.profile_create(user=owner, name="Everything")
    only = services.profile_create(user=owner, name="Picked", mode="only", tools=["current_time"])
    lookup = services.profile_lookup_for(owner)

    @function
    def brand_new_tool() -> str:
        """Arrived after the profiles were made."""
        return "new"

    everything = resolve(
        intent={"toolset": all_except.name},
        profile_lookup=lookup,
        ctx=ToolContext(user_id=str(owner.pk)),
    )
    picked = resolve(
        intent={"toolset": only.name}, profile_lookup=lookup, ctx=ToolContext(user_id=str(owner.pk))
    )

    assert "brand_new_tool" in everything.names
    assert picked.names == ("current_time",)


def test_the_profile_lookup_prefers_the_own_profile_over_a_shared_one(owner, staff):
    services.profile_create(user=staff, name="Same", shared=True, mode="only", tools=["read"])
    services.profile_create(user=owner, name="Same", mode="only", tools=["grep"])

    assert services.profile_lookup_for(owner)("Same").tools == ("grep",)
    assert services.profile_lookup_for(staff)("Same").tools == ("read",)
    assert services.profile_lookup_for(owner)("research") is None


def test_a_tool_edit_from_a_stale_copy_is_a_conflict_even_with_the_current_version(owner):
    stale_copy = services.profile_create(user=owner, name="A")
    fresh = ToolProfile.objects.get(pk=stale_copy.pk)
    services.profile_tool_remove(user=owner, profile=fresh, version=1, tool="bash")

    with pytest.raises(Conflict):
        services.profile_tool_remove(user=owner, profile=stale_copy, version=2, tool="grep")
    assert ToolProfile.objects.get(pk=stale_copy.pk).tools == ["bash"]


def test_a_shared_agent_may_name_only_shared_profiles_or_presets(staff):
    from profiles_app.services import agent_create

    services.profile_create(user=staff, name="Personal")
    services.profile_create(user=staff, name="Team", shared=True)

    with pytest.raises(Invalid, match="no shared profile"):
        agent_create(user=staff, shared=True, name="Ops", tool_intent={"toolset": "Personal"})
    assert agent_create(user=staff, shared=True, name="Ops", tool_intent={"toolset": "Team"})
    assert agent_create(user=staff, name="Mine", tool_intent={"toolset": "Personal"})


# --- switching between "all except" and "only" ----------------------------------------------


def _offered_now(*removed: str) -> tuple[str, ...]:
    from toolhub.tools import registry
    from toolhub.tools.layers import META_TOOLS

    return tuple(
        tool.name
        for tool in registry.all_tools()
        if tool.name not in removed and tool.name not in META_TOOLS
    )


def test_a_switch_preview_says_what_the_list_becomes_and_writes_nothing(owner):
    profile = services.profile_create(user=owner, name="A", tools=["bash", "web_fetch"])
    pinned = _offered_now("bash", "web_fetch")

    switch = services.profile_mode_switch_preview(
        user=owner, profile=profile, version=1, mode="only"
    )

    assert switch.tools == pinned
    assert (switch.pinned, switch.removed) == (len(pinned), 0)
    assert switch.preview == f"{len(pinned)} tools will be pinned; tools added later will stay out."
    profile.refresh_from_db()
    assert (profile.mode, profile.tools, profile.version) == (
        "all_except",
        ["bash", "web_fetch"],
        1,
    )


def test_a_switch_to_all_except_lists_the_rest_as_removed(owner):
    kept = _offered_now()[:-5]
    profile = services.profile_create(user=owner, name="A", mode="only", tools=list(kept))

    switched = services.profile_mode_switch(
        user=owner, profile=profile, version=1, mode="all_except"
    )

    assert switched.switch.removed == 5
    assert switched.switch.preview == (
        "5 tools will be listed as removed; tools added later will join."
    )
    assert switched.switch.done == "Switched to all except: 5 tools listed as removed."
    assert (switched.profile.mode, switched.profile.version) == ("all_except", 2)
    assert tuple(switched.profile.tools) == _offered_now()[-5:]


@pytest.mark.parametrize(
    ("mode", "tools", "after"),
    [
        ("all_except", ["bash", "gone_tool", "web_fetch"], "only"),
        ("only", ["read", "gone_tool", "grep"], "all_except"),
    ],
)
def test_undo_restores_the_previous_mode_and_list_exactly(owner, mode, tools, after):
    profile = services.profile_create(user=owner, name="A", mode=mode, tools=tools)

    switched = services.profile_mode_switch(user=owner, profile=profile, version=1, mode=after)
    switched_to = ToolProfile.objects.get(pk=profile.pk).mode
    undone = services.profile_mode_switch_undo(
        user=owner,
        profile=switched.profile,
        version=switched.profile.version,
        mode=switched.switch.previous_mode,
        tools=switched.switch.previous_tools,
    )

    assert switched_to == after
    stored = ToolProfile.objects.get(pk=profile.pk)
    assert (stored.mode, stored.tools, stored.version) == (mode, tools, 3)
    assert undone.tools == tools


def test_a_stale_undo_is_refused_and_changes_nothing(owner):
    profile = services.profile_create(user=owner, name="A", tools=["bash"])
    switched = services.profile_mode_switch(user=owner, profile=profile, version=1, mode="only")
    services.profile_tool_remove(user=owner, profile=switched.profile, version=2, tool="grep")

    with pytest.raises(Stale, match="changed since you read it"):
        services.profile_mode_switch_undo(
            user=owner,
            profile=ToolProfile.objects.get(pk=profile.pk),
            version=2,
            mode=switched.switch.previous_mode,
            tools=switched.switch.previous_tools,
        )
    stored = ToolProfile.objects.get(pk=profile.pk)
    assert (stored.mode, stored.version) == ("only", 3)
    assert "grep" not in stored.tools


def test_an_undo_goes_through_the_same_checks_as_any_write(owner):
    profile = services.profile_create(user=owner, name="A", mode="only", tools=["read"])
    switched = services.profile_mode_switch(
        user=owner, profile=profile, version=1, mode="all_except"
    )

    with pytest.raises(MetaToolRefused):
        services.profile_mode_switch_undo(
            user=owner,
            profile=switched.profile,
            version=2,
            mode="all_except",
            tools=["tool_search"],
        )
    assert ToolProfile.objects.get(pk=profile.pk).version == 2


def test_a_stale_preview_is_refused_so_the_sentence_is_never_about_an_old_list(owner):
    profile = services.profile_create(user=owner, name="A")
    services.profile_tool_remove(
        user=owner, profile=ToolProfile.objects.get(pk=profile.pk), version=1, tool="bash"
    )

    with pytest.raises(Stale):
        services.profile_mode_switch_preview(
            user=owner, profile=ToolProfile.objects.get(pk=profile.pk), version=1, mode="only"
        )


def test_another_users_profile_cannot_be_previewed_switched_or_undone(owner, other_user):
    profile = services.profile_create(user=other_user, name="Theirs", tools=["bash"])
    calls = [
        lambda: services.profile_mode_switch_preview(
            user=owner, profile=profile, version=1, mode="only"
        ),
        lambda: services.profile_mode_switch(user=owner, profile=profile, version=1, mode="only"),
        lambda: services.profile_mode_switch_undo(
            user=owner, profile=profile, version=1, mode="only", tools=[]
        ),
    ]

    for call in calls:
        with pytest.raises(NotFound):
            call()
    stored = ToolProfile.objects.get(pk=profile.pk)
    assert (stored.mode, stored.tools, stored.version) == ("all_except", ["bash"], 1)


def test_switching_to_the_mode_it_has_writes_nothing_and_says_so(owner):
    profile = services.profile_create(user=owner, name="A", tools=["bash"])

    switched = services.profile_mode_switch(
        user=owner, profile=profile, version=1, mode="all_except"
    )

    assert not switched.switch.changes
    assert switched.switch.done == (
        "Nothing switched: it already chooses tools this way (all except)."
    )
    assert ToolProfile.objects.get(pk=profile.pk).version == 1


@pytest.mark.parametrize(
    ("mode", "tools", "preview", "done"),
    [
        (
            "only",
            ("read",),
            "1 tool will be pinned; tools added later will stay out.",
            "Switched to only: 1 tool pinned.",
        ),
        (
            "only",
            (),
            "No tool will be pinned; tools added later will stay out.",
            "Switched to only: no tool pinned.",
        ),
        (
            "all_except",
            (),
            "No tool will be listed as removed; tools added later will join.",
            "Switched to all except: no tool listed as removed.",
        ),
    ],
)
def test_the_switch_sentences_count_one_and_none_as_a_person_says_them(mode, tools, preview, done):
    other = "all_except" if mode == "only" else "only"
    switch = services.ModeSwitch(mode, tools, other, ())

    assert (switch.preview, switch.done) == (preview, done)


def test_a_switch_that_would_pin_more_names_than_a_list_holds_is_refused_before_it_is_made(
    owner, registry_state
):
    from toolhub.tools.intent import MAX_NAMES

    for number in range(MAX_NAMES):
        function(lambda: "", name=f"many_{number}", description="One of many.")
    profile = services.profile_create(user=owner, name="A")

    with pytest.raises(Invalid, match=f"at most {MAX_NAMES} names"):
        services.profile_mode_switch_preview(user=owner, profile=profile, version=1, mode="only")
    assert ToolProfile.objects.get(pk=profile.pk).mode == "all_except"


def test_a_previewed_change_is_checked_like_the_write_but_stores_and_audits_nothing(staff):
    shared = services.profile_create(user=staff, name="Team", shared=True, tools=["bash"])
    audited = LogEntry.objects.count()

    change = services.profile_change(
        user=staff, profile=shared, version=1, mode="only", preview=True
    )

    assert not change.applied
    assert (change.view.mode, change.view.version) == ("only", 1)
    assert change.view.tools == _offered_now("bash")
    assert change.switch.previous_mode == "all_except"
    assert change.switch.previous_tools == ("bash",)
    stored = ToolProfile.objects.get(pk=shared.pk)
    assert (stored.mode, stored.tools, stored.version) == ("all_except", ["bash"], 1)
    assert LogEntry.objects.count() == audited
    with pytest.raises(Conflict):
        services.profile_change(user=staff, profile=stored, version=1, name="default", preview=True)
