"""Files a tool offered the person: stored with the chat, named on the tool's card, served
to the chat's owner only, always as a sandboxed attachment, and bounded per chat."""

from __future__ import annotations

import uuid

import pytest

from sessions_app.eventlog import events_append
from sessions_app.models import ResultFile
from sessions_app.result_files import result_files_store
from sessions_app.services import session_create, session_trash
from tests.fakes import Reply
from tests.integration.chat import rest_events_until_done
from toolhub.tools import ToolResult, function
from toolhub.tools.files import ToolFile, offered_line

PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj <</Type /Catalog>> endobj\n\x00\xff\n%%EOF\n"
REPORT = ToolFile("q3 summary.pdf", "application/pdf", PDF)


def _stored(session, *files: ToolFile, call_id: str = "call_1") -> list[dict]:
    return result_files_store(session_id=session.pk, turn="turn-1", call_id=call_id, files=files)


def _routes(session_id, file_id) -> tuple[str, str]:
    return f"/chat/{session_id}/files/{file_id}/", f"/api/sessions/{session_id}/files/{file_id}/"


@pytest.mark.django_db
def test_a_stored_file_downloads_with_its_exact_bytes_as_a_sandboxed_attachment_on_both_routes(
    owner, client, api
):
    session = session_create(user=owner)
    [entry] = _stored(session, REPORT)
    page, endpoint = _routes(session.pk, entry["id"])
    client.force_login(owner)

    responses = [
        client.get(page),
        api(owner).get(endpoint),
        # A client that asks for the file's own type is answered, not refused with 406.
        api(owner).get(endpoint, HTTP_ACCEPT="application/pdf"),
    ]

    assert entry == {
        "id": entry["id"],
        "name": "q3 summary.pdf",
        "media_type": "application/pdf",
        "size": len(PDF),
    }
    for response in responses:
        assert response.status_code == 200
        assert response.content == PDF
        assert response["Content-Disposition"] == 'attachment; filename="q3 summary.pdf"'
        assert response["Content-Type"] == "application/pdf"
        assert response["Content-Length"] == str(len(PDF))
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["Content-Security-Policy"] == "sandbox; default-src 'none'"
        assert response["Cache-Control"] == "private, no-store"


@pytest.mark.django_db
def test_a_file_that_could_run_in_a_browser_is_served_so_that_it_cannot(owner, client, api):
    session = session_create(user=owner)
    page_file = ToolFile("café menü.html", "text/html", b"<script>alert(document.cookie)</script>")
    [html] = _stored(session, page_file)
    # A row written by hand (or by an older version) with a type that would split a header.
    forged = ResultFile.objects.create(
        session=session,
        turn="turn-1",
        call_id="call_2",
        name='evil\r\n"name".svg',
        media_type="image/svg+xml\r\nSet-Cookie: a=b",
        size=4,
        data=b"<svg",
    )
    client.force_login(owner)

    for url in [*_routes(session.pk, html["id"]), *_routes(session.pk, forged.pk)]:
        response = client.get(url) if url.startswith("/chat/") else api(owner).get(url)
        assert response.status_code == 200
        assert response["Content-Disposition"].startswith("attachment;")
        assert response["Content-Security-Policy"] == "sandbox; default-src 'none'"
        assert response["X-Content-Type-Options"] == "nosniff"
        if url.endswith(f"{html['id']}/"):
            # Not ASCII: RFC 5987's encoded form, which every browser reads.
            assert response["Content-Disposition"] == (
                "attachment; filename*=utf-8''caf%C3%A9%20men%C3%BC.html"
            )
            assert response["Content-Type"] == "text/html"
        else:
            assert response["Content-Disposition"] == 'attachment; filename="evilname.svg"'
            assert response["Content-Type"] == "application/octet-stream"


@pytest.mark.django_db
def test_another_persons_file_is_a_404_on_both_routes(owner, other_user, client, api):
    session = session_create(user=owner)
    [entry] = _stored(session, REPORT)
    page, endpoint = _routes(session.pk, entry["id"])
    client.force_login(other_user)

    their_page, their_api = client.get(page), api(other_user).get(endpoint)

    assert their_page.status_code == 404
    assert PDF not in their_page.content
    assert (their_api.status_code, their_api.json()["code"]) == (404, "not_found")
    # Nobody signed in is sent to sign in, or told to authenticate: never the file.
    client.logout()
    assert client.get(page).status_code == 302
    assert api().get(endpoint).status_code == 401


@pytest.mark.django_db
def test_a_file_of_another_chat_a_made_up_id_and_a_binned_chats_file_are_404s(owner, client, api):
    mine, other_chat, binned = (session_create(user=owner) for _ in range(3))
    [elsewhere] = _stored(other_chat, REPORT)
    [gone] = _stored(binned, REPORT)
    session_trash(user=owner, session=binned)
    client.force_login(owner)

    for session_id, file_id in [
        (mine.pk, elsewhere["id"]),  # the right owner, the wrong chat
        (mine.pk, uuid.uuid4()),
        (binned.pk, gone["id"]),
    ]:
        page, endpoint = _routes(session_id, file_id)
        assert client.get(page).status_code == 404
        assert api(owner).get(endpoint).status_code == 404
    # Not a file id at all: no route.
    assert client.get(f"/chat/{mine.pk}/files/../../../etc/passwd/").status_code == 404
    assert api(owner).get(f"/api/sessions/{mine.pk}/files/1/").status_code == 404


@pytest.mark.django_db
def test_a_chat_refuses_the_file_past_its_count_or_bytes_and_says_so(owner, settings):
    full, small, another = (session_create(user=owner) for _ in range(3))
    one = ToolFile("a.txt", "text/plain", b"x")
    for call in range(7):
        stored = _stored(full, *[one] * (8 if call < 6 else 2), call_id=f"call_{call}")
        assert all("id" in entry for entry in stored)

    [fifty_first] = _stored(full, one, call_id="call_7")
    settings.TOOLHUB_RESULT_FILES_MAX_BYTES = 100
    sixty = ToolFile("sixty.bin", "application/octet-stream", b"6" * 60)
    kept, past_budget = _stored(small, sixty, sixty)

    assert ResultFile.objects.filter(session=full).count() == 50
    assert fifty_first == {
        "name": "a.txt",
        "media_type": "text/plain",
        "size": 1,
        "refused": "this chat already keeps the most files it may (50)",
    }
    assert "id" in kept
    assert past_budget["refused"] == (
        "this chat's files would pass 100 bytes in all, the most it keeps"
    )
    assert ResultFile.objects.filter(session=small).count() == 1
    # The cap is each chat's own; a result's ninth file is said not kept, not dropped.
    nine = _stored(another, *[one] * 9)
    assert [("id" in entry) for entry in nine] == [True] * 8 + [False]
    assert nine[8]["refused"] == "a result keeps at most 8 files"


@pytest.mark.django_db
def test_the_tool_card_offers_each_file_for_download_and_says_why_one_was_not_kept(
    owner, client, settings
):
    settings.TOOLHUB_RESULT_FILES_PER_SESSION = 1
    session = session_create(user=owner)
    kept, refused = _stored(session, REPORT, ToolFile("second.pdf", "application/pdf", b"2"))
    others = [
        ("ok", [kept]),
        # A call that failed offers nothing, whatever its event says.
        ("error", [kept]),
        # Entries of any other shape make no link and break nothing.
        ("ok", "not a list"),
        ("ok", [{"id": "../../etc/passwd", "name": "traversal.pdf", "size": 3}]),
        ("ok", [{"id": kept["id"], "name": 5, "size": "big"}, 7, None]),
    ]
    events = [
        ("user_message", {"text": "the report please"}),
        ("turn_started", {"model": "claude-sonnet-4-6"}),
        ("tool_call", {"call_id": "call_1", "name": "demo__report", "arguments": {}}),
        (
            "tool_result",
            {
                "call_id": "call_1",
                "name": "demo__report",
                "status": "ok",
                "content": offered_line(REPORT),
                "files": [kept, refused],
            },
        ),
    ]
    for number, (status, files) in enumerate(others, start=2):
        call_id = f"call_{number}"
        result = {"call_id": call_id, "name": "odd", "status": status, "files": files}
        events += [
            ("tool_call", {"call_id": call_id, "name": "odd", "arguments": {}}),
            ("tool_result", result),
        ]
    events.append(("turn_finished", {"reason": "end_turn"}))
    events_append(session_id=session.pk, turn="turn-1", items=events)
    client.force_login(owner)

    page = client.get(f"/chat/{session.pk}/")
    html = page.content.decode()

    assert page.status_code == 200
    assert html.count("Files from demo__report for you:") == 1
    assert html.count("A file from odd for you:") == 1
    link = f'<a href="/chat/{session.pk}/files/{kept["id"]}/" download>Download q3 summary.pdf</a>'
    assert link in html
    assert f"{len(PDF)} bytes" in html
    assert 'second.pdf</span> <span class="muted small">not kept: this chat already keeps' in html
    assert "traversal.pdf" not in html
    assert html.count(f"/files/{kept['id']}/") == 2
    assert client.get(f"/chat/{session.pk}/files/{kept['id']}/").content == PDF


@pytest.mark.django_db(transaction=True)
def test_a_turn_stores_a_tools_files_names_them_in_its_result_and_tells_the_model_what_was_not_kept(
    api, owner, model, registry_state, settings, client
):
    settings.TOOLHUB_RESULT_FILES_PER_SESSION = 1
    extra = ToolFile("extra.pdf", "application/pdf", b"%PDF-")

    def report() -> ToolResult:
        """Fetch the quarterly report."""
        return ToolResult(content=offered_line(REPORT), files=(REPORT, extra))

    registry_state.register(function(report, register_globally=False))
    session_id = api(owner).post("/api/sessions/", {}, format="json").json()["id"]
    model.replies.extend([Reply(tool_calls=[("call_1", "report", {})]), Reply(text="Sent.")])

    api(owner).post(f"/api/sessions/{session_id}/messages/", {"text": "report"}, format="json")
    events = rest_events_until_done(api(owner), session_id)

    result = next(e for e in events if e["kind"] == "tool_result")["data"]
    stored, not_kept = result["files"]
    assert stored["name"] == "q3 summary.pdf"
    assert not_kept == {
        "name": "extra.pdf",
        "media_type": "application/pdf",
        "size": 5,
        "refused": "this chat already keeps the most files it may (1)",
    }
    told = model.requests[1].body["messages"][-1]["content"][0]["content"]
    assert told == (
        offered_line(REPORT)
        + "\n[file extra.pdf not kept: this chat already keeps the most files it may (1)]"
    )
    assert "JVBERi" not in str(model.requests[1].body)  # no base64 of a PDF reached the model
    client.force_login(owner)
    assert client.get(f"/chat/{session_id}/files/{stored['id']}/").content == PDF
    assert f"Download {REPORT.name}" in client.get(f"/chat/{session_id}/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_calls_storing_files_at_once_never_take_a_chat_past_its_count(owner, settings):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection, connections

    settings.TOOLHUB_RESULT_FILES_PER_SESSION = 12
    session = session_create(user=owner)
    one = ToolFile("a.txt", "text/plain", b"x")

    def store(call: int) -> list[dict]:
        try:
            return _stored(session, *[one] * 8, call_id=f"call_{call}")
        finally:
            connections.close_all()

    with ThreadPoolExecutor(4) as pool:
        entries = [entry for stored in pool.map(store, range(4)) for entry in stored]

    kept = [entry for entry in entries if "id" in entry]
    # Under SQLite writers queue on the file's lock; under PostgreSQL on the chat's row.
    assert (len(kept), ResultFile.objects.filter(session=session).count()) == (12, 12), (
        connection.vendor
    )
    assert len(entries) - len(kept) == 20
