"""A chat taken out as Markdown to read and as JSON with everything
(sessions_app/export.py): from the chat page's menu and the API, its owner's only."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from sessions_app.eventlog import events_append
from sessions_app.services import session_create

pytestmark = pytest.mark.django_db

RESULT = "line one\n```\n# not a heading\n```\n````"


def _chat(owner, *, running: bool = False):
    chat = session_create(user=owner, title="Trip\nplans <b>", intent={"toolset": "research"})
    items = [
        ("user_message", {"text": "first try"}),
        ("turn_started", {"model": "demo"}),
        ("assistant_message", {"text": "an answer to forget"}),
        ("turn_finished", {"reason": "end_turn"}),
        ("rewind", {"to": 0}),
        ("user_message", {"text": "use bash"}),
        ("turn_started", {"model": "demo"}),
        ("tool_call", {"call_id": "c1", "name": "bash", "arguments": {"command": "ls"}}),
        ("tool_result", {"call_id": "c1", "status": "ok", "content": RESULT}),
    ]
    if not running:
        items.append(("turn_finished", {"reason": "end_turn"}))
    events_append(session_id=chat.pk, turn="t1", items=items)
    if running:
        type(chat).objects.filter(pk=chat.pk).update(turn_id="t1")
    return chat


def test_markdown_reads_as_the_page_shows_it_and_no_result_breaks_out(client, owner):
    chat = _chat(owner)
    client.force_login(owner)

    response = client.get(reverse("chat_export", args=[chat.pk, "markdown"]))

    text = response.content.decode()
    assert response["Content-Disposition"] == 'attachment; filename="Trip-plans-b.md"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert text.startswith("# Trip plans <b>\n")
    # The branch the page shows: the edited-away answer is not in it.
    assert "an answer to forget" not in text
    assert "**You**" in text
    assert '"command": "ls"' in text
    # The result's own fences and heading stay inside a longer fence.
    assert "`````\n" + RESULT + "\n`````" in text


def test_json_holds_every_event_and_the_chats_settings(client, api, owner):
    chat = _chat(owner)

    exported = api(owner).get(f"/api/sessions/{chat.pk}/export/?format=json")

    body = json.loads(exported.content)
    assert (body["format"], body["version"], body["running"]) == ("toolhub.chat", 1, False)
    assert body["intent"]["toolset"] == "research"
    assert [e["seq"] for e in body["events"]] == list(range(1, 11))
    # Both versions of the edited message, and the rewind between them.
    texts = [e["data"]["text"] for e in body["events"] if e["kind"] == "user_message"]
    assert texts == ["first try", "use bash"]
    assert exported["Content-Disposition"].startswith("attachment;")


def test_a_chat_exported_mid_turn_says_so(client, owner):
    chat = _chat(owner, running=True)
    client.force_login(owner)

    text = client.get(reverse("chat_export", args=[chat.pk, "markdown"])).content.decode()
    body = json.loads(client.get(reverse("chat_export", args=[chat.pk, "json"])).content)

    assert "A turn was still running when this was exported" in text
    assert body["running"] is True


def test_only_its_owner_exports_a_chat(client, api, owner, other_user):
    chat = _chat(owner)
    client.force_login(other_user)

    for form in ("markdown", "json"):
        assert client.get(reverse("chat_export", args=[chat.pk, form])).status_code == 404
        assert (
            api(other_user).get(f"/api/sessions/{chat.pk}/export/?format={form}").status_code == 404
        )
    client.force_login(owner)
    assert client.get(reverse("chat_export", args=[chat.pk, "pdf"])).status_code == 404
    assert api(owner).get(f"/api/sessions/{chat.pk}/export/?format=pdf").status_code == 400
