"""The Programs page: a person's tool profiles against the whole catalog, and every edit.

Rendered by Django's test client on the real database; what a person would notice is the
page, the status codes, and what the profile offers afterwards.
"""

from __future__ import annotations

import json

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


def test_a_new_profile_is_a_copy_of_default_and_opens(client, owner):
    client.force_login(owner)

    response = client.post(reverse("program_new"), {"name": "deepwork"})

    from profiles_app.models import ToolProfile

    profile = ToolProfile.objects.get(owner=owner, name="deepwork")
    assert (profile.mode, profile.tools) == ("all_except", [])
    assert response["Location"] == reverse("program", args=[profile.pk])
    assert "Profile deepwork created" in client.get(response["Location"]).content.decode()


def test_a_duplicate_name_is_refused_with_the_reason(client, owner):
    _profile(owner, "deepwork")
    client.force_login(owner)

    response = client.post(reverse("program_new"), {"name": "deepwork"})

    assert response.status_code == 409
    assert "a profile named &#x27;deepwork&#x27; exists" in response.content.decode()


def test_removing_a_tool_moves_it_out_and_adding_it_back_returns_it(client, owner):
    profile = _profile(owner)
    client.force_login(owner)
    url = reverse("program_tool", args=[profile.pk, "remove"])

    client.post(url, {"tool": "web_fetch", "version": profile.version})
    page = client.get(reverse("program", args=[profile.pk])).content.decode()
    assert _reload(profile).tools == ["web_fetch"]
    assert 'id="add-web_fetch"' in page
    assert 'id="remove-web_fetch"' not in page

    add = reverse("program_tool", args=[profile.pk, "add"])
    client.post(add, {"tool": "web_fetch", "version": profile.version})
    assert _reload(profile).tools == []


def test_an_edit_made_on_an_old_version_is_refused_not_applied(client, owner):
    profile = _profile(owner)
    client.force_login(owner)
    stale = profile.version
    url = reverse("program_tool", args=[profile.pk, "remove"])
    client.post(url, {"tool": "web_fetch", "version": stale})

    response = client.post(url, {"tool": "current_time", "version": stale})

    assert response.status_code == 409
    assert _reload(profile).tools == ["web_fetch"]


def test_switching_semantics_keeps_what_the_profile_offers(client, owner):
    from toolhub.tools import registry

    profile = _profile(owner, tools=["web_fetch", "bash"])
    client.force_login(owner)

    client.post(
        reverse("program_mode", args=[profile.pk]), {"mode": "only", "version": profile.version}
    )

    profile = _reload(profile)
    everything = {tool.name for tool in registry.all_tools()}
    assert profile.mode == "only"
    # tool_search is offered whenever something is deferred, so it is never pinned.
    assert set(profile.tools) == everything - {"web_fetch", "bash", "tool_search"}


def test_rename_and_delete_after_confirmation(client, owner):
    from profiles_app.models import ToolProfile

    profile = _profile(owner)
    client.force_login(owner)
    client.post(
        reverse("program_rename", args=[profile.pk]), {"name": "deep", "version": profile.version}
    )
    profile = _reload(profile)
    assert profile.name == "deep"

    confirm = client.get(reverse("program_delete", args=[profile.pk]))
    assert "Delete deep?" in confirm.content.decode()
    assert ToolProfile.objects.filter(pk=profile.pk).exists()
    response = client.post(
        reverse("program_delete", args=[profile.pk]), {"version": profile.version}
    )

    assert response["Location"] == reverse("programs")
    assert not ToolProfile.objects.filter(pk=profile.pk).exists()


def test_another_persons_profile_is_a_404_for_every_page_and_action(client, owner, other_user):
    profile = _profile(owner)
    client.force_login(other_user)

    assert client.get(reverse("program", args=[profile.pk])).status_code == 404
    remove = reverse("program_tool", args=[profile.pk, "remove"])
    assert client.post(remove, {"tool": "bash", "version": 1}).status_code == 404
    assert client.post(reverse("program_delete", args=[profile.pk])).status_code == 404
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

    assert "disabled globally by ops: leaks secrets" in page


def test_export_then_import_brings_the_profiles_back(client, owner, other_user):
    _profile(owner, "deepwork", tools=["bash"])
    client.force_login(owner)
    exported = client.get(reverse("programs_export"))
    assert exported["Content-Disposition"].startswith("attachment")

    client.force_login(other_user)
    upload = SimpleUploadedFile("p.json", exported.content, content_type="application/json")
    response = client.post(reverse("programs_import"), {"file": upload})

    from profiles_app.models import ToolProfile

    assert response.status_code == 302
    imported = ToolProfile.objects.get(owner=other_user, name="deepwork")
    assert imported.tools == ["bash"]


def test_importing_the_seeds_functions_meta_says_what_was_mapped_and_how(client, owner):
    client.force_login(owner)
    data = {"profiles": {"default": ["read"], "safe": ["read"]}, "active": "safe"}
    upload = SimpleUploadedFile("functions_meta.json", json.dumps(data).encode())

    page = client.post(reverse("programs_import"), {"file": upload}, follow=True)

    text = page.content.decode()
    assert "Imported 1 profile." in text
    assert "&#x27;default&#x27; is toolhub&#x27;s built-in default" in text
    assert "imported as &#x27;safe copy&#x27;" in text
    assert "&#x27;safe copy&#x27; is now what your new chats start with." in text


def test_a_profile_is_made_what_new_chats_start_with_from_its_page(client, owner):
    profile = _profile(owner, "focus")
    client.force_login(owner)
    before = client.get(reverse("program", args=[profile.pk])).content.decode()

    response = client.post(
        reverse("programs_new_chats"), {"toolset": "focus", "profile": profile.pk}
    )
    after = client.get(reverse("program", args=[profile.pk])).content.decode()
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

    response = client.post(reverse("programs_import"), {"file": upload})

    assert response.status_code == 400
    assert "the file is not JSON" in response.content.decode()
    assert not ToolProfile.objects.filter(owner=owner).exists()
    assert json.loads(client.get(reverse("programs_export")).content)["profiles"] == []


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
        reverse("program_mode", args=[shared.pk]),
        {"mode": "all_except", "version": shared.version},
    )

    assert response.status_code == 403
    assert "Switched" not in response.content.decode()


def test_tool_search_has_no_remove_button_and_a_crafted_removal_changes_nothing(client, owner):
    profile = _profile(owner)
    client.force_login(owner)

    page = client.get(reverse("program", args=[profile.pk])).content.decode()
    crafted = client.post(
        reverse("program_tool", args=[profile.pk, "remove"]),
        {"tool": "tool_search", "version": profile.version},
    )

    assert 'aria-label="Remove tool_search"' not in page
    assert 'aria-label="Remove bash"' in page
    assert crafted.status_code == 400
    assert "tool_search cannot be removed from a profile" in crafted.content.decode()
    assert _reload(profile).tools == []
