"""Attacks on the inspector's view of a catalog at scale: it lists at most 100 of the
tools that load when needed, says how many more, and the toolset API gives the form."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("size", [150, 2_000])
def test_the_inspector_lists_a_hundred_loadable_tools_then_says_how_many_more(
    client, api, owner, registry_state, size
):
    from sessions_app.services import session_create
    from tests.catalogs import server_tools

    for tool in server_tools(size):
        registry_state.register(tool)
    session = session_create(user=owner)
    client.force_login(owner)

    page = client.get(reverse("chat_inspector", args=[session.pk])).content.decode()
    toolset = api(owner).get(f"/api/sessions/{session.pk}/toolset/").json()

    section = page[page.index('class="inspector-loadable"') :]
    section = section[: section.index("</details>")]
    loadable = len(toolset["catalog"])
    listed = re.findall(r"<li><code>([A-Za-z0-9_-]+)</code></li>", section)
    assert loadable >= size
    assert listed == [tool["name"] for tool in toolset["catalog"][:100]]
    assert f"And {loadable - 100:,} more.</p>" in section
    assert f"Loaded when needed: {loadable:,} tools" in section
    assert toolset["catalog_form"] == ("names" if size == 150 else "grouped")
    if toolset["catalog_form"] == "grouped":
        assert "too many to name each" in section
