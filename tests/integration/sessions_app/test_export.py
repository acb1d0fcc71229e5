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


def test_an_export_imports_as_a_new_chat_of_the_importer(client, api, owner, other_user):
    from profiles_app.services import profile_create
    from sessions_app.models import ChatSession, SessionEvent
    from sessions_app.transcript import session_transcript

    chat = _chat(owner, running=True)
    profile_create(user=owner, name="mine", tools=["bash"])
    type(chat).objects.filter(pk=chat.pk).update(tool_intent={"toolset": "mine", "enabled": False})
    exported = json.loads(api(owner).get(f"/api/sessions/{chat.pk}/export/").content)

    imported = api(other_user).post("/api/sessions/import/", exported, format="json")

    assert imported.status_code == 201, imported.content
    copy = ChatSession.objects.get(pk=imported.json()["id"])
    assert (copy.owner, copy.title) == (other_user, "Trip plans <b>")
    # The intent is kept as intent, less a profile the importer does not have.
    assert copy.tool_intent["enabled"] is False
    assert copy.tool_intent.get("toolset") is None
    kinds = list(
        SessionEvent.objects.filter(session=copy).order_by("seq").values_list("kind", flat=True)
    )
    assert kinds == [e["kind"] for e in exported["events"]] + ["turn_failed"]
    shown = session_transcript(session_id=copy.pk)
    assert not shown.running
    assert [item.text for item in shown.items.values() if getattr(item, "role", "") == "user"] == [
        "use bash"
    ]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"format": "other"}, "not a toolhub chat export"),
        ({"version": 2}, "version 1"),
        ({"events": "all"}, "events is a list"),
        ({"events": [{"seq": 1, "turn": "t", "kind": "user_message", "data": {}}] * 2}, "seq"),
        ({"events": [{"seq": 1, "turn": "t", "kind": "turn_lost", "data": {}}]}, "turn_lost"),
        ({"events": [{"seq": 1, "turn": "t", "kind": {}, "data": {}}]}, "no event of kind"),
        ({"events": [{"seq": 1, "turn": "t", "kind": "user_message", "data": []}]}, "event 1"),
        ({"events": [{"seq": 1, "turn": "t" * 37, "kind": "rewind", "data": {}}]}, "turn"),
        ({"events": [{"seq": True, "turn": "t", "kind": "rewind", "data": {}}]}, "seq"),
        (
            {
                "events": [
                    {"seq": n, "turn": "t", "kind": "usage", "data": {}} for n in range(20_001)
                ]
            },
            "20,000",
        ),
    ],
)
def test_a_crafted_import_is_refused_saying_what_and_stores_nothing(
    client, api, owner, change, said
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from sessions_app.models import ChatSession

    document = {"format": "toolhub.chat", "version": 1, "title": "x", "events": [], **change}
    client.force_login(owner)

    refused = api(owner).post("/api/sessions/import/", document, format="json")
    upload = SimpleUploadedFile("chat.json", json.dumps(document).encode())
    page = client.post(reverse("chat_import"), {"file": upload}, follow=True).content.decode()

    assert refused.status_code == 400
    assert f"Not imported: {said}" in " ".join(page.split()) or said in page
    assert not ChatSession.objects.filter(owner=owner, title="x").exists()


def test_odd_bytes_in_an_import_are_marked_as_every_writer_marks_them(client, owner):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from sessions_app.models import ChatSession

    document = {
        "format": "toolhub.chat",
        "version": 1,
        "title": "nul\u0000title",
        "events": [
            {"seq": 1, "turn": "t", "kind": "user_message", "data": {"text": "a\u0000b\ud800"}}
        ],
    }
    client.force_login(owner)
    raw = json.dumps(document).encode()

    landed = client.post(
        reverse("chat_import"), {"file": SimpleUploadedFile("chat.json", raw)}, follow=True
    )

    copy = ChatSession.objects.get(owner=owner)
    assert copy.title == "nul\u2400title"
    assert "a\u2400b\ufffd" in landed.content.decode()
    # Not JSON, or nested past the bound: said on the page, nothing stored.
    for bad in (b"{not json", b"[" * 100_000):
        page = client.post(
            reverse("chat_import"), {"file": SimpleUploadedFile("c.json", bad)}, follow=True
        ).content.decode()
        assert "Not imported: the file is not JSON." in page
    # (the page it lands on is the person's empty chat, not an import)
    assert ChatSession.objects.filter(owner=owner, last_seq__gt=0).count() == 1
