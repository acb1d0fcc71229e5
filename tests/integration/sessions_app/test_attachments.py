"""Files a person attaches to a message (sessions_app/attachments.py, uploads.py): streamed
into the chat's workspace under a clean name that never overwrites, bounded per file,
message and chat with nothing kept past a bound, the owner's only, and carried to the
model by the message that names them."""

from __future__ import annotations

import asyncio
import base64
import threading
import uuid

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from agent_app.frames import FrameError, parse_frame
from agent_app.history import messages_from_events
from agent_app.providers.chat_messages import to_chat_messages
from sessions_app.models import Attachment, SessionEvent
from sessions_app.services import session_create
from tests.integration.chat import events, open_socket, rest_events_until_done, send, until
from toolhub.lib.asgi_handler import OneHopASGIHandler

pytestmark = pytest.mark.django_db

# The smallest PNG there is: one transparent pixel.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@pytest.fixture(autouse=True)
def workspaces(settings, tmp_path):
    settings.TOOLHUB_WORKSPACE_ROOT = tmp_path / "workspaces"
    return settings.TOOLHUB_WORKSPACE_ROOT


@pytest.fixture
def chat(owner):
    return session_create(user=owner)


def upload(client, chat, *files: tuple[str, bytes]):
    given = [SimpleUploadedFile(name, data) for name, data in files]
    return client.post(reverse("chat_attach", args=[chat.pk]), {"file": given})


def in_workspace(workspaces, chat) -> dict[str, bytes]:
    folder = workspaces / str(chat.pk)
    if not folder.exists():
        return {}
    return {path.name: path.read_bytes() for path in folder.iterdir() if not path.is_symlink()}


def left_incoming(workspaces) -> list[str]:
    folder = workspaces / ".incoming"
    return sorted(path.name for path in folder.iterdir()) if folder.exists() else []


def test_attached_files_land_in_the_chats_workspace_under_clean_names_and_wait_in_the_composer(
    client, owner, chat, workspaces
):
    client.force_login(owner)

    response = upload(
        client,
        chat,
        ("notes.txt", b"hello"),
        ("../../etc/passwd", b"root:x"),
        ("<script>.html", b"<script>alert(1)</script>"),
        ("\u202egnp.exe", b"MZ"),
        (".env", b"SECRET=1"),
        ("-rf", b"x"),
    )

    assert response.status_code == 201
    names = [entry["name"] for entry in response.json()["files"]]
    assert names == ["notes.txt", "passwd", "<script>.html", "gnp.exe", "env", "rf"]
    assert in_workspace(workspaces, chat)["passwd"] == b"root:x"
    assert set(in_workspace(workspaces, chat)) == set(names)
    assert left_incoming(workspaces) == []
    page = client.get(reverse("chat_session", args=[chat.pk])).content.decode()
    assert "&lt;script&gt;.html" in page
    assert "<script>.html" not in page


def test_a_name_taken_in_the_workspace_or_a_link_the_agent_planted_is_never_written_through(
    client, owner, chat, workspaces, tmp_path
):
    folder = workspaces / str(chat.pk)
    folder.mkdir(parents=True)
    (folder / "a.txt").write_bytes(b"the agent's")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not yours")
    (folder / "b.txt").symlink_to(outside)
    client.force_login(owner)

    response = upload(client, chat, ("a.txt", b"new"), ("b.txt", b"new"), ("a.txt", b"newer"))

    assert [entry["name"] for entry in response.json()["files"]] == [
        "a (1).txt",
        "b (1).txt",
        "a (2).txt",
    ]
    assert (folder / "a.txt").read_bytes() == b"the agent's"
    assert outside.read_bytes() == b"not yours"
    assert (folder / "b.txt").is_symlink()
    assert (folder / "a (2).txt").read_bytes() == b"newer"


@pytest.mark.parametrize(
    ("bounds", "files", "said"),
    [
        ({"FILE_MAX_BYTES": 10}, [("big.bin", b"x" * 11)], "big.bin is larger than 10 bytes"),
        ({"MESSAGE_MAX_FILES": 2}, [("a", b"1"), ("b", b"2"), ("c", b"3")], "2 more files"),
        ({"MESSAGE_MAX_BYTES": 10}, [("a", b"123456"), ("b", b"123456")], "this message can"),
        ({"CHAT_MAX_BYTES": 4}, [("a", b"12345")], "this chat can take 4 bytes more"),
    ],
)
def test_each_bound_is_refused_saying_which_and_nothing_is_kept(
    client, owner, chat, workspaces, settings, bounds, files, said
):
    for name, value in bounds.items():
        setattr(settings, f"TOOLHUB_UPLOAD_{name}", value)
    client.force_login(owner)

    response = upload(client, chat, *files)

    assert response.status_code == 413
    assert response.json()["code"] == "too_large"
    assert said in response.json()["message"]
    assert in_workspace(workspaces, chat) == {}
    assert left_incoming(workspaces) == []
    assert not Attachment.objects.exists()


def test_the_chats_bound_counts_what_it_was_given_before(client, owner, chat, settings):
    settings.TOOLHUB_UPLOAD_CHAT_MAX_FILES = 2
    client.force_login(owner)
    assert upload(client, chat, ("a", b"1"), ("b", b"2")).status_code == 201

    refused = upload(client, chat, ("c", b"3"))

    assert refused.status_code == 413
    assert "this chat can take 0 more files" in refused.json()["message"]


def test_another_persons_chat_takes_no_file_on_any_endpoint(
    client, api, owner, other_user, chat, workspaces
):
    client.force_login(owner)
    [kept] = upload(client, chat, ("mine.txt", b"mine")).json()["files"]
    client.force_login(other_user)
    stranger = api(other_user)
    file = SimpleUploadedFile("theirs.txt", b"x")

    answers = [
        upload(client, chat, ("theirs.txt", b"x")).status_code,
        stranger.post(f"/api/sessions/{chat.pk}/attachments/", {"file": file}).status_code,
        stranger.get(f"/api/sessions/{chat.pk}/attachments/").status_code,
        stranger.delete(f"/api/sessions/{chat.pk}/attachments/{kept['id']}/").status_code,
        client.post(reverse("chat_attachment_remove", args=[chat.pk, kept["id"]])).status_code,
        stranger.post(
            f"/api/sessions/{chat.pk}/messages/", {"text": "hi", "files": [kept["id"]]}, "json"
        ).status_code,
    ]

    assert answers == [404] * 6
    assert in_workspace(workspaces, chat) == {"mine.txt": b"mine"}
    assert left_incoming(workspaces) == []
    assert Attachment.objects.get().sent is False


def test_an_upload_without_its_csrf_token_is_refused_and_leaves_nothing(owner, chat, workspaces):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)

    response = upload(client, chat, ("a.txt", b"1"))

    assert response.status_code == 403
    assert in_workspace(workspaces, chat) == {}
    assert left_incoming(workspaces) == []


def test_a_waiting_file_can_be_taken_back_and_a_sent_one_stays(client, owner, chat, workspaces):
    client.force_login(owner)
    first, second = upload(client, chat, ("a.txt", b"1"), ("b.txt", b"2")).json()["files"]
    Attachment.objects.filter(pk=second["id"]).update(sent=True)

    removed = client.post(reverse("chat_attachment_remove", args=[chat.pk, first["id"]]))
    kept = client.post(reverse("chat_attachment_remove", args=[chat.pk, second["id"]]))

    assert (removed.status_code, kept.status_code) == (204, 404)
    assert in_workspace(workspaces, chat) == {"b.txt": b"2"}


@pytest.mark.django_db(transaction=True)
def test_two_uploads_at_once_cannot_pass_the_chats_bound_together(
    owner, chat, settings, workspaces
):
    settings.TOOLHUB_UPLOAD_CHAT_MAX_FILES = 1
    start = threading.Barrier(2)
    answers: list[int] = []

    def one(name: str) -> None:
        client = Client()
        client.force_login(owner)
        start.wait()
        answers.append(upload(client, chat, (name, b"x")).status_code)

    threads = [threading.Thread(target=one, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(answers) == [201, 413]
    assert len(in_workspace(workspaces, chat)) == 1
    assert Attachment.objects.count() == 1
    assert left_incoming(workspaces) == []


@pytest.mark.django_db(transaction=True)
def test_a_message_carries_its_files_to_the_model_and_an_image_as_an_image_block(api, owner, chat):
    client = api(owner)
    stored = client.post(
        f"/api/sessions/{chat.pk}/attachments/",
        {
            "file": [
                SimpleUploadedFile("dot.png", PNG, content_type="text/plain"),
                SimpleUploadedFile("data.csv", b"a,b\n1,2\n"),
            ]
        },
        format="multipart",
    )
    ids = [entry["id"] for entry in stored.json()["files"]]
    assert (
        client.get(f"/api/sessions/{chat.pk}/attachments/").json()["files"]
        == stored.json()["files"]
    )

    sent = client.post(f"/api/sessions/{chat.pk}/messages/", {"files": ids}, format="json")
    events = rest_events_until_done(client, chat.pk)

    assert sent.status_code == 202
    message = SessionEvent.objects.get(session=chat, kind="user_message").data
    assert [entry["media_type"] for entry in message["files"]] == ["image/png", "text/csv"]
    [answer] = [event for event in events if event["kind"] == "assistant_message"]
    assert "You attached 2 files, saved in the workspace: dot.png (" in answer["data"]["text"]
    assert client.get(f"/api/sessions/{chat.pk}/attachments/").json()["files"] == []
    [said] = messages_from_events([("user_message", message)])
    kinds = [block["type"] for block in said["content"]]
    assert kinds == ["text", "image"]
    [chat_message] = to_chat_messages([said])
    assert chat_message["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_a_message_naming_a_file_it_cannot_have_is_refused_and_stores_nothing(api, owner, chat):
    elsewhere = session_create(user=owner)
    Attachment.objects.create(session=elsewhere, name="x", media_type="text/plain", size=1)
    other_chats = str(Attachment.objects.get().pk)
    client = api(owner)

    answers = [
        client.post(f"/api/sessions/{chat.pk}/messages/", body, format="json")
        for body in (
            {"text": "hi", "files": [other_chats]},
            {"text": "hi", "files": [str(uuid.uuid4())]},
            {"text": "hi", "files": ["not-an-id"]},
            {"files": []},
        )
    ]

    assert [answer.status_code for answer in answers] == [400, 400, 400, 400]
    assert "not attached to this chat" in answers[0].json()["message"]
    assert not SessionEvent.objects.filter(session=chat).exists()


@pytest.mark.parametrize(
    "files",
    [{"a": 1}, ["x"], [str(uuid.uuid4())] * 2, [1], [str(uuid.uuid4()) for _ in range(101)]],
)
def test_a_frame_with_malformed_files_is_refused(files):
    with pytest.raises(FrameError) as refused:
        parse_frame(f'{{"type": "chat", "text": "hi", "files": {__import__("json").dumps(files)}}}')

    assert refused.value.code == "bad_frame"


def _post(
    app, path: str, *, length: int | None, chunks: int, signed: bool = True
) -> tuple[int, int]:
    """POST ``chunks`` MiB to ``path`` through the ASGI handler (``signed``: with a token,
    never checked here); its status and how many chunks it read."""
    headers = [(b"host", b"localhost"), (b"content-type", b"multipart/form-data; boundary=x")]
    if signed:
        headers.append((b"authorization", b"Token not-checked-before-the-body"))
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("localhost", 80),
    }
    read = 0
    sent: list[dict] = []

    async def receive() -> dict:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": b"x" * 2**20, "more_body": read < chunks}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], read


def test_a_2_gb_upload_is_refused_on_its_headers_and_an_endless_one_where_it_passes_the_bound(
    settings,
):
    settings.TOOLHUB_UPLOAD_MESSAGE_MAX_BYTES = 4 * 2**20
    app = OneHopASGIHandler()
    path = f"/chat/{uuid.uuid4()}/attachments/"

    declared = _post(app, path, length=2 * 10**9, chunks=2048)
    undeclared = _post(app, path, length=None, chunks=2048)
    elsewhere = _post(app, "/api/profiles/", length=None, chunks=2048)
    stranger = _post(app, path, length=None, chunks=2048, signed=False)

    assert declared == (413, 0)
    # The bound is the message's plus a MiB for the form's own parts.
    assert undeclared == (413, 6)
    # Anything else, and an upload from nobody signed in, may send 16 MiB.
    assert elsewhere == (413, 17)
    assert stranger == (413, 17)


def test_the_api_takes_a_file_larger_than_its_json_bodies(api, owner, chat, workspaces):
    big = b"x" * (3 * 2**20)

    answer = api(owner).post(
        f"/api/sessions/{chat.pk}/attachments/",
        {"file": SimpleUploadedFile("big.bin", big)},
        format="multipart",
    )

    assert answer.status_code == 201
    assert in_workspace(workspaces, chat)["big.bin"] == big


def test_a_name_too_long_for_the_disk_is_cut_to_fit_and_a_failed_upload_keeps_nothing(
    client, owner, chat, workspaces
):
    folder = workspaces / str(chat.pk)
    folder.mkdir(parents=True)
    # The agent took every name an upload of x.pdf could take.
    (folder / "x.pdf").write_bytes(b"")
    for number in range(1, 1000):
        (folder / f"x ({number}).pdf").write_bytes(b"")
    client.force_login(owner)

    [wide] = upload(client, chat, ("中" * 119 + ".txt", b"wide")).json()["files"]
    refused = upload(client, chat, ("first.txt", b"1"), ("x.pdf", b"2"))

    assert len(wide["name"].encode()) <= 200
    assert wide["name"].endswith(".txt")
    assert refused.status_code == 413
    assert "1000 files named like x.pdf" in refused.json()["message"]
    assert "first.txt" not in in_workspace(workspaces, chat)
    assert Attachment.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_regenerated_answer_and_an_edit_are_told_of_the_messages_files_again(client, owner, chat):
    client.force_login(owner)
    [stored] = upload(client, chat, ("plan.md", b"# plan")).json()["files"]

    async def talk() -> list[str]:
        socket = await open_socket(chat.pk, owner)
        answers = []
        for frame in (
            # Only its file: a regenerate answers it again, files and all.
            {"type": "chat", "text": "", "files": [stored["id"]]},
            {"type": "regenerate"},
            {"type": "edit", "seq": 1, "text": "read it twice"},
        ):
            await send(socket, frame)
            [answer] = events(await until(socket), "assistant_message")
            answers.append(answer["data"]["text"])
        await socket.disconnect()
        return answers

    answers = asyncio.run(talk())

    assert all(
        "You attached 1 file, saved in the workspace: plan.md (6 bytes" in a for a in answers
    )
    assert "read it twice" in answers[2]


@pytest.mark.django_db(transaction=True)
def test_an_edit_sends_the_image_the_model_saw_not_what_the_agent_made_of_it_since(
    client, owner, chat, workspaces
):
    client.force_login(owner)
    [stored] = upload(client, chat, ("dot.png", PNG)).json()["files"]

    async def talk() -> None:
        socket = await open_socket(chat.pk, owner)
        await send(socket, {"type": "chat", "text": "look", "files": [stored["id"]]})
        await until(socket)
        (workspaces / str(chat.pk) / "dot.png").write_bytes(b"\x89PNG\r\n\x1a\nthe agent's own")
        await send(socket, {"type": "edit", "seq": 1, "text": "look again"})
        await until(socket)
        await socket.disconnect()

    asyncio.run(talk())

    first, edited = SessionEvent.objects.filter(session=chat, kind="user_message").order_by("seq")
    assert edited.data["text"] == "look again"
    assert edited.data["files"] == first.data["files"]
    assert edited.data["images"] == first.data["images"]
    assert base64.b64decode(edited.data["images"][0]["data"]) == PNG
