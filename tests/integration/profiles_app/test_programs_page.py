"""The Programs page: a person's tool profiles against the whole catalog, and every edit.

Rendered by Django's test client on the real database; what a person would notice is the
page, the status codes, and what the profile offers afterwards.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

pytestmark = pytest.mark.django_db


def _profile(user, name="deepwork", **fields):
    from profiles_app.services import profile_create

    return profile_create(user=user, name=name, **fields)


def _reload(profile):
    profile.refresh_from_db()
    return profile


def test_the_page_lists_default_presets_and_own_profiles_with_the_catalog(client, owner):
    from toolhub.tools import registry

    _profile(owner, "mine")
    client.force_login(owner)

    page = client.get(reverse("programs")).content.decode()

    assert '<h2 id="profile-title">default</h2>' in page
    assert ">mine</a>" in page
    assert "preset" in page
    for tool in registry.all_tools():
        assert f'id="remove-{tool.name}"' in page
    assert "tokens of resident tools" in page


@pytest.mark.parametrize("page", ["programs", "profile", "profile_delete"])
def test_the_programs_tab_is_marked_current_on_the_page_and_a_profiles_pages(client, owner, page):
    profile = _profile(owner)
    client.force_login(owner)
    args = [] if page == "programs" else [profile.pk]

    html = client.get(reverse(page, args=args)).content.decode()

    current = re.findall(r'<a href="([^"]+)" aria-current="page">([^<]+)</a>', html)
    assert current == [(reverse("programs"), "Programs")]


def test_a_new_profile_is_a_copy_of_default_and_opens(client, owner):
    client.force_login(owner)

    response = client.post(reverse("profile_new"), {"name": "deepwork"})

    from profiles_app.models import ToolProfile

    profile = ToolProfile.objects.get(owner=owner, name="deepwork")
    assert (profile.mode, profile.tools) == ("all_except", [])
    assert response["Location"] == reverse("profile", args=[profile.pk])
    assert "Profile deepwork created" in client.get(response["Location"]).content.decode()


def test_a_duplicate_name_is_refused_with_the_reason(client, owner):
    _profile(owner, "deepwork")
    client.force_login(owner)

    response = client.post(reverse("profile_new"), {"name": "deepwork"})

    assert response.status_code == 409
    assert "a profile named &#x27;deepwork&#x27; exists" in response.content.decode()


def test_removing_a_tool_moves_it_out_and_adding_it_back_returns_it(client, owner):
    profile = _profile(owner)
    client.force_login(owner)
    url = reverse("profile_tool", args=[profile.pk, "remove"])

    client.post(url, {"tool": "web_fetch", "version": profile.version})
    page = client.get(reverse("profile", args=[profile.pk])).content.decode()
    assert _reload(profile).tools == ["web_fetch"]
    assert 'id="add-web_fetch"' in page
    assert 'id="remove-web_fetch"' not in page

    add = reverse("profile_tool", args=[profile.pk, "add"])
    client.post(add, {"tool": "web_fetch", "version": profile.version})
    assert _reload(profile).tools == []


def test_an_edit_made_on_an_old_version_is_refused_not_applied(client, owner):
    profile = _profile(owner)
    client.force_login(owner)
    stale = profile.version
    url = reverse("profile_tool", args=[profile.pk, "remove"])
    client.post(url, {"tool": "web_fetch", "version": stale})

    response = client.post(url, {"tool": "current_time", "version": stale})

    assert response.status_code == 409
    assert _reload(profile).tools == ["web_fetch"]


def test_switching_semantics_keeps_what_the_profile_offers(client, owner):
    from toolhub.tools import registry

    profile = _profile(owner, tools=["web_fetch", "bash"])
    client.force_login(owner)

    client.post(
        reverse("profile_mode", args=[profile.pk]),
        {"mode": "only", "version": profile.version, "confirm": "1"},
    )

    profile = _reload(profile)
    everything = {tool.name for tool in registry.all_tools()}
    assert profile.mode == "only"
    # tool_search is offered whenever something is deferred, so it is never pinned.
    assert set(profile.tools) == everything - {"web_fetch", "bash", "tool_search"}


def _pinnable(*removed):
    from toolhub.tools import registry
    from toolhub.tools.layers import META_TOOLS

    return [
        tool.name
        for tool in registry.all_tools()
        if tool.name not in removed and tool.name not in META_TOOLS
    ]


def test_choosing_only_first_says_how_many_tools_will_be_pinned_and_writes_nothing(client, owner):
    profile = _profile(owner, tools=["web_fetch", "bash"])
    client.force_login(owner)
    pinned = len(_pinnable("web_fetch", "bash"))

    response = client.post(
        reverse("profile_mode", args=[profile.pk]), {"mode": "only", "version": profile.version}
    )

    page = response.content.decode()
    assert response.status_code == 200
    assert f"{pinned} tools will be pinned; tools added later will stay out." in page
    assert 'role="alert">' in page
    assert (
        '<button type="submit" aria-describedby="switch-sentence" autofocus>Switch</button>' in page
    )
    assert ">Cancel</a>" in page
    assert f'href="{reverse("profile", args=[profile.pk])}"' in page
    stored = _reload(profile)
    assert (stored.mode, stored.tools, stored.version) == ("all_except", ["web_fetch", "bash"], 1)


def test_choosing_all_except_first_says_how_many_tools_will_be_listed_as_removed(client, owner):
    kept = _pinnable()[:-5]
    profile = _profile(owner, mode="only", tools=kept)
    client.force_login(owner)

    page = client.post(
        reverse("profile_mode", args=[profile.pk]),
        {"mode": "all_except", "version": profile.version},
    ).content.decode()

    assert "5 tools will be listed as removed; tools added later will join." in page
    assert (_reload(profile).mode, _reload(profile).version) == ("only", 1)


def test_confirming_switches_and_the_page_says_so_with_an_undo_button(client, owner):
    profile = _profile(owner, tools=["web_fetch", "bash"])
    client.force_login(owner)
    pinned = len(_pinnable("web_fetch", "bash"))

    response = client.post(
        reverse("profile_mode", args=[profile.pk]),
        {"mode": "only", "version": profile.version, "confirm": "1"},
        follow=True,
    )

    page = response.content.decode()
    assert response.redirect_chain == [(reverse("profile", args=[profile.pk]), 302)]
    assert f'<p role="status" id="switch-done">Switched to only: {pinned} tools pinned.</p>' in page
    assert ">Undo</button>" in page
    assert _reload(profile).mode == "only"


def test_undo_restores_the_mode_and_the_list_exactly(client, owner):
    profile = _profile(owner, tools=["web_fetch", "gone_tool", "bash"])
    client.force_login(owner)
    client.post(
        reverse("profile_mode", args=[profile.pk]),
        {"mode": "only", "version": profile.version, "confirm": "1"},
    )
    switched_mode = _reload(profile).mode

    response = client.post(
        reverse("profile_mode_undo", args=[profile.pk]),
        {"mode": "all_except", "tools": ["web_fetch", "gone_tool", "bash"], "version": 2},
        follow=True,
    )

    page = response.content.decode()
    restored = _reload(profile)
    assert switched_mode == "only"
    assert (restored.mode, restored.tools, restored.version) == (
        "all_except",
        ["web_fetch", "gone_tool", "bash"],
        3,
    )
    assert "Undone: back to all except, as it was." in page
    assert ">Undo</button>" not in page


def test_the_undo_button_carries_the_list_the_switch_replaced(client, owner):
    profile = _profile(owner, tools=["web_fetch", "bash"])
    client.force_login(owner)
    client.post(
        reverse("profile_mode", args=[profile.pk]),
        {"mode": "only", "version": profile.version, "confirm": "1"},
    )

    page = client.get(reverse("profile", args=[profile.pk])).content.decode()
    form = page[page.index(reverse("profile_mode_undo", args=[profile.pk])) :]
    form = form[: form.index("</form>")]

    assert '<input type="hidden" name="version" value="2">' in form
    assert '<input type="hidden" name="mode" value="all_except">' in form
    assert '<input type="hidden" name="tools" value="web_fetch">' in form
    assert '<input type="hidden" name="tools" value="bash">' in form


def test_an_undo_after_another_edit_is_refused_with_a_clear_message(client, owner):
    profile = _profile(owner, tools=["bash"])
    client.force_login(owner)
    client.post(
        reverse("profile_mode", args=[profile.pk]),
        {"mode": "only", "version": profile.version, "confirm": "1"},
    )
    # Another tab removes a tool from the switched profile meanwhile.
    client.post(
        reverse("profile_tool", args=[profile.pk, "remove"]), {"tool": "grep", "version": 2}
    )

    response = client.post(
        reverse("profile_mode_undo", args=[profile.pk]),
        {"mode": "all_except", "tools": ["bash"], "version": 2},
    )

    assert response.status_code == 409
    assert "Not undone: this profile changed after the switch" in response.content.decode()
    stored = _reload(profile)
    assert stored.mode == "only"
    assert "grep" not in stored.tools


def test_the_undo_notice_is_gone_once_the_profile_changed_again(client, owner):
    profile = _profile(owner)
    client.force_login(owner)
    client.post(
        reverse("profile_mode", args=[profile.pk]),
        {"mode": "only", "version": profile.version, "confirm": "1"},
    )
    client.post(
        reverse("profile_tool", args=[profile.pk, "remove"]), {"tool": "grep", "version": 2}
    )

    page = client.get(reverse("profile", args=[profile.pk])).content.decode()

    assert "Switched to only" not in page
    assert ">Undo</button>" not in page


def test_a_stale_confirmation_is_refused_and_switches_nothing(client, owner):
    profile = _profile(owner)
    client.force_login(owner)
    client.post(
        reverse("profile_tool", args=[profile.pk, "remove"]), {"tool": "grep", "version": 1}
    )

    response = client.post(
        reverse("profile_mode", args=[profile.pk]),
        {"mode": "only", "version": 1, "confirm": "1"},
    )

    assert response.status_code == 409
    assert "the profile changed since you read it" in response.content.decode()
    assert _reload(profile).mode == "all_except"


def test_choosing_the_mode_it_already_has_says_nothing_changed(client, owner):
    profile = _profile(owner)
    client.force_login(owner)

    response = client.post(
        reverse("profile_mode", args=[profile.pk]),
        {"mode": "all_except", "version": profile.version},
        follow=True,
    )

    assert "Nothing switched: it already chooses tools this way (all except)." in (
        response.content.decode()
    )
    assert _reload(profile).version == 1


def test_with_htmx_each_step_answers_with_the_profile_section_alone(client, owner):
    profile = _profile(owner, tools=["bash"])
    client.force_login(owner)
    url = reverse("profile_mode", args=[profile.pk])
    htmx = {"HTTP_HX_REQUEST": "true"}
    pinned = len(_pinnable("bash"))

    asked = client.post(url, {"mode": "only", "version": 1}, **htmx)
    switched = client.post(url, {"mode": "only", "version": 1, "confirm": "1"}, **htmx)
    undone = client.post(
        reverse("profile_mode_undo", args=[profile.pk]),
        {"mode": "all_except", "tools": ["bash"], "version": 2},
        **htmx,
    )
    stale = client.post(url, {"mode": "only", "version": 1, "confirm": "1"}, **htmx)

    for response in (asked, switched, undone, stale):
        text = response.content.decode()
        assert response.status_code == 200
        assert text.lstrip().startswith('<section class="card profile" id="profile"')
        assert "HX-Request" in response["Vary"]
    assert f"{pinned} tools will be pinned" in asked.content.decode()
    assert f"Switched to only: {pinned} tools pinned." in switched.content.decode()
    assert "Undone: back to all except, as it was." in undone.content.decode()
    assert 'role="alert">the profile changed since you read it' in stale.content.decode()
    assert (_reload(profile).mode, _reload(profile).tools) == ("all_except", ["bash"])


def test_another_persons_profile_is_a_404_for_the_switch_and_its_undo(client, owner, other_user):
    profile = _profile(owner, tools=["bash"])
    client.force_login(other_user)

    asked = client.post(reverse("profile_mode", args=[profile.pk]), {"mode": "only", "version": 1})
    confirmed = client.post(
        reverse("profile_mode", args=[profile.pk]), {"mode": "only", "version": 1, "confirm": "1"}
    )
    undone = client.post(
        reverse("profile_mode_undo", args=[profile.pk]),
        {"mode": "only", "tools": [], "version": 1},
    )

    assert [asked.status_code, confirmed.status_code, undone.status_code] == [404, 404, 404]
    stored = _reload(profile)
    assert (stored.mode, stored.tools, stored.version) == ("all_except", ["bash"], 1)


def test_rename_and_delete_after_confirmation(client, owner):
    from profiles_app.models import ToolProfile

    profile = _profile(owner)
    client.force_login(owner)
    client.post(
        reverse("profile_rename", args=[profile.pk]), {"name": "deep", "version": profile.version}
    )
    profile = _reload(profile)
    assert profile.name == "deep"

    confirm = client.get(reverse("profile_delete", args=[profile.pk]))
    assert "Delete deep?" in confirm.content.decode()
    assert ToolProfile.objects.filter(pk=profile.pk).exists()
    response = client.post(
        reverse("profile_delete", args=[profile.pk]), {"version": profile.version}
    )

    assert response["Location"] == reverse("programs")
    assert not ToolProfile.objects.filter(pk=profile.pk).exists()


def test_another_persons_profile_is_a_404_for_every_page_and_action(client, owner, other_user):
    profile = _profile(owner)
    client.force_login(other_user)

    assert client.get(reverse("profile", args=[profile.pk])).status_code == 404
    remove = reverse("profile_tool", args=[profile.pk, "remove"])
    assert client.post(remove, {"tool": "bash", "version": 1}).status_code == 404
    assert client.post(reverse("profile_delete", args=[profile.pk])).status_code == 404
    assert _reload(profile).tools == []


def test_presets_and_default_are_read_only(client, owner):
    client.force_login(owner)

    page = client.get(reverse("programs_preset", args=["default"])).content.decode()

    assert "Rename" not in page
    assert 'aria-label="Remove' not in page
    assert client.get(reverse("programs_preset", args=["no-such-preset"])).status_code == 404


def test_a_tool_unavailable_to_the_person_says_why(client, owner, staff):
    from profiles_app.services import tool_disable_globally

    tool_disable_globally(user=staff, tool="web_fetch", reason="leaks secrets")
    client.force_login(owner)

    page = client.get(reverse("programs")).content.decode()

    # In a person's words; the layer it was hidden at is a detail for operators.
    assert "Unavailable to you: turned off by an operator (ops): leaks secrets" in page
    assert "(L5)" not in page


def test_export_then_import_brings_the_profiles_back(client, owner, other_user):
    _profile(owner, "deepwork", tools=["bash"])
    client.force_login(owner)
    exported = client.get(reverse("profiles_export"))
    assert exported["Content-Disposition"].startswith("attachment")

    client.force_login(other_user)
    upload = SimpleUploadedFile("p.json", exported.content, content_type="application/json")
    response = client.post(reverse("profiles_import"), {"file": upload})

    from profiles_app.models import ToolProfile

    assert response.status_code == 302
    imported = ToolProfile.objects.get(owner=other_user, name="deepwork")
    assert imported.tools == ["bash"]


def test_importing_the_seeds_functions_meta_says_what_was_mapped_and_how(client, owner):
    client.force_login(owner)
    data = {"profiles": {"default": ["read"], "safe": ["read"]}, "active": "safe"}
    upload = SimpleUploadedFile("functions_meta.json", json.dumps(data).encode())

    page = client.post(reverse("profiles_import"), {"file": upload}, follow=True)

    text = page.content.decode()
    assert "Imported 1 profile." in text
    assert "&#x27;default&#x27; is toolhub&#x27;s built-in default" in text
    assert "imported as &#x27;safe copy&#x27;" in text
    assert "&#x27;safe copy&#x27; is now what your new chats start with." in text


def test_a_profile_is_made_what_new_chats_start_with_from_its_page(client, owner):
    profile = _profile(owner, "focus")
    client.force_login(owner)
    before = client.get(reverse("profile", args=[profile.pk])).content.decode()

    response = client.post(
        reverse("programs_new_chats"), {"toolset": "focus", "profile": profile.pk}
    )
    after = client.get(reverse("profile", args=[profile.pk])).content.decode()
    refused = client.post(reverse("programs_new_chats"), {"toolset": "nobody's"})

    assert "Start new chats with this profile" in before
    assert response.status_code == 302
    assert "Your new chats start with this profile" in after
    assert "Start new chats with this profile" not in after
    assert after.count('class="tag new-chats"') == 1
    assert refused.status_code == 400
    from profiles_app.services import new_chat_toolset

    assert new_chat_toolset(user=owner) == "focus"


def test_an_import_that_is_not_json_is_refused_and_creates_nothing(client, owner):
    from profiles_app.models import ToolProfile

    client.force_login(owner)
    upload = SimpleUploadedFile("p.json", b"{not json", content_type="application/json")

    response = client.post(reverse("profiles_import"), {"file": upload})

    assert response.status_code == 400
    assert "the file is not JSON" in response.content.decode()
    assert not ToolProfile.objects.filter(owner=owner).exists()
    assert json.loads(client.get(reverse("profiles_export")).content)["profiles"] == []


def test_the_page_costs_the_same_queries_with_one_profile_or_fifty(client, owner):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _profile(owner, "p0")
    client.force_login(owner)
    client.get(reverse("programs"))
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("programs"))
    for number in range(1, 50):
        _profile(owner, f"p{number}")
    with CaptureQueriesContext(connection) as many:
        page = client.get(reverse("programs")).content.decode()

    assert ">p49</a>" in page
    assert 0 < len(many.captured_queries) == len(few.captured_queries)


def test_a_shared_profile_cannot_be_switched_by_someone_who_is_not_staff(client, owner, staff):
    from profiles_app.services import profile_create

    shared = profile_create(user=staff, name="team", shared=True)
    client.force_login(owner)

    response = client.post(
        reverse("profile_mode", args=[shared.pk]),
        {"mode": "all_except", "version": shared.version},
    )

    assert response.status_code == 403
    assert "Switched" not in response.content.decode()


def test_tool_search_has_no_remove_button_and_a_crafted_removal_changes_nothing(client, owner):
    profile = _profile(owner)
    client.force_login(owner)

    page = client.get(reverse("profile", args=[profile.pk])).content.decode()
    crafted = client.post(
        reverse("profile_tool", args=[profile.pk, "remove"]),
        {"tool": "tool_search", "version": profile.version},
    )

    assert 'aria-label="Remove tool_search"' not in page
    assert 'aria-label="Remove bash"' in page
    assert crafted.status_code == 400
    assert "tool_search cannot be removed from a profile" in crafted.content.decode()
    assert _reload(profile).tools == []


def test_tool_search_stays_in_a_profile_switched_to_only_without_an_add_button(client, owner):
    profile = _profile(owner, tools=["bash"])
    client.force_login(owner)
    before = client.get(reverse("profile", args=[profile.pk])).content.decode()
    client.post(
        reverse("profile_mode", args=[profile.pk]),
        {"mode": "only", "version": profile.version, "confirm": "1"},
    )

    after = client.get(reverse("profile", args=[profile.pk])).content.decode()

    assert "tool_search" not in _reload(profile).tools
    assert 'id="remove-tool_search"' in after
    assert 'aria-label="Add back tool_search"' not in after
    heading = re.compile(r"In this profile \(\d+\)")
    assert heading.search(before)[0] == heading.search(after)[0]


def test_a_tools_approval_is_set_in_a_profile_and_an_operators_ask_cannot_be_lifted(
    client, owner, staff
):
    from profiles_app.services import tool_policy_set

    profile = _profile(owner)
    client.force_login(owner)
    url = reverse("profile_tool_policy", args=[profile.pk])

    response = client.post(url, {"tool": "bash", "policy": "auto", "version": profile.version})
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert "bash set to run without asking in this profile." in page
    assert re.search(r'<option value="auto" selected>Run without asking</option>', page)
    assert _reload(profile).approvals == {"bash": "auto"}

    refused = client.post(url, {"tool": "bash", "policy": "always", "version": profile.version})
    assert refused.status_code == 400
    assert "bash must be auto, ask or deny" in refused.content.decode()
    stale = client.post(url, {"tool": "bash", "policy": "", "version": profile.version - 1})
    assert stale.status_code == 409
    assert _reload(profile).approvals == {"bash": "auto"}

    client.post(url, {"tool": "bash", "policy": "", "version": _reload(profile).version})
    assert _reload(profile).approvals == {}

    tool_policy_set(user=staff, tool="web_fetch", policy="ask", reason="costly")
    page = client.get(reverse("profile", args=[profile.pk])).content.decode()
    row = page[page.index('id="policy-web_fetch"') :][:900]
    assert "Default: ask first (operator)" in row
    assert '<option value="auto" disabled>' in row
