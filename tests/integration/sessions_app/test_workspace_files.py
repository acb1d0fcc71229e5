"""The Files panel and its API: a chat's workspace listed, previewed, downloaded one file at
a time or whole as a zip, by the chat's owner only, always as a sandboxed attachment."""

from __future__ import annotations

import io
import os
import uuid
import zipfile
from pathlib import Path

import pytest

from sessions_app.services import session_create, session_trash
from sessions_app.transcript_items import Card

# Bodies are async iterators (sent a chunk at a time under ASGI); the test client reads
# them whole, and says so.
pytestmark = pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous")

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 40


@pytest.fixture
def workspace_root(settings, tmp_path):
    settings.TOOLHUB_WORKSPACE_ROOT = tmp_path / "workspaces"
    return settings.TOOLHUB_WORKSPACE_ROOT


def _workspace(root: Path, session, files: dict[str, bytes]) -> Path:
    folder = root / str(session.pk)
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _body(response) -> bytes:
    return b"".join(response) if response.streaming else response.content


def _routes(session_id) -> list[str]:
    page, api = f"/chat/{session_id}/workspace/", f"/api/sessions/{session_id}/workspace/"
    return [
        page,
        f"{page}preview/?path=a.txt",
        f"{page}download/?path=a.txt",
        f"{page}image/?path=a.txt",
        f"{page}zip/",
        api,
        f"{api}download/?path=a.txt",
        f"{api}zip/",
    ]


@pytest.mark.django_db
def test_the_panel_lists_the_workspace_newest_first_with_sizes_in_words(
    owner, client, workspace_root
):
    session = session_create(user=owner)
    folder = _workspace(
        workspace_root, session, {"old.txt": b"x" * 12_000, "notes/new.md": b"# hi\n"}
    )
    os.utime(folder / "old.txt", (1_600_000_000, 1_600_000_000))
    client.force_login(owner)

    page = client.get(f"/chat/{session.pk}/workspace/").content.decode()

    assert page.index("notes/new.md") < page.index("old.txt")
    assert "12 KB" in page
    assert "2 files, newest first." in page
    assert "Download all as a zip" in page


@pytest.mark.django_db
def test_a_chat_without_a_workspace_says_no_files_yet(owner, client, api, workspace_root):
    session = session_create(user=owner)
    client.force_login(owner)

    page = client.get(f"/chat/{session.pk}/workspace/").content.decode()
    listed = api(owner).get(f"/api/sessions/{session.pk}/workspace/").json()

    assert "No files yet." in page
    assert listed["files"] == []
    assert listed["zip_refusal"] == "There are no files to zip yet."


@pytest.mark.django_db
def test_the_list_shows_at_most_its_bound_and_says_how_many_more(
    owner, client, api, settings, workspace_root
):
    settings.TOOLHUB_WORKSPACE_LIST_MAX = 3
    session = session_create(user=owner)
    _workspace(workspace_root, session, {f"f{n}.txt": b"." for n in range(5)})
    client.force_login(owner)

    page = client.get(f"/chat/{session.pk}/workspace/").content.decode()
    listed = api(owner).get(f"/api/sessions/{session.pk}/workspace/").json()

    assert "3 files of 5, newest first." in page
    assert "2 more not listed here." in page
    assert (len(listed["files"]), listed["more"], listed["complete"]) == (3, 2, True)


@pytest.mark.django_db
def test_a_text_file_previews_escaped_in_a_pre_and_a_long_one_is_cut(owner, client, workspace_root):
    session = session_create(user=owner)
    _workspace(
        workspace_root,
        session,
        {"page.html": b"<script>alert(1)</script>", "big.log": b"line\n" * 30_000},
    )
    client.force_login(owner)
    preview = f"/chat/{session.pk}/workspace/preview/?path="

    small = client.get(f"{preview}page.html").content.decode()
    big = client.get(f"{preview}big.log").content.decode()

    assert '<pre class="workspace-text">&lt;script&gt;alert(1)&lt;/script&gt;</pre>' in small
    assert "<script>" not in small
    assert "Showing the first 64 KB." in big
    assert big.count("line") < 30_000 // 2


@pytest.mark.django_db
def test_an_image_previews_inline_only_when_its_bytes_are_a_raster_image(
    owner, client, workspace_root
):
    session = session_create(user=owner)
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    _workspace(workspace_root, session, {"chart.png": PNG, "logo.svg": svg, "fake.png": svg})
    client.force_login(owner)
    base = f"/chat/{session.pk}/workspace/"

    preview = client.get(f"{base}preview/?path=chart.png").content.decode()
    image = client.get(f"{base}image/?path=chart.png")
    svg_preview = client.get(f"{base}preview/?path=logo.svg").content.decode()

    assert f'src="{base}image/?path=chart.png"' in preview
    assert image.status_code == 200
    assert _body(image) == PNG
    assert image["Content-Type"] == "image/png"
    assert image["X-Content-Type-Options"] == "nosniff"
    assert image["Content-Security-Policy"].startswith("sandbox")
    assert "Content-Disposition" not in image
    assert "<img" not in svg_preview
    for name in ("logo.svg", "fake.png"):
        assert client.get(f"{base}image/?path={name}").status_code == 404


@pytest.mark.django_db
def test_a_file_downloads_as_a_sandboxed_attachment_on_both_routes(
    owner, client, api, workspace_root
):
    session = session_create(user=owner)
    _workspace(workspace_root, session, {"out/report.csv": b"a,b\n1,2\n"})
    client.force_login(owner)

    responses = [
        client.get(f"/chat/{session.pk}/workspace/download/?path=out/report.csv"),
        api(owner).get(f"/api/sessions/{session.pk}/workspace/download/?path=out/report.csv"),
    ]

    for response in responses:
        assert response.status_code == 200
        assert _body(response) == b"a,b\n1,2\n"
        assert response["Content-Disposition"] == 'attachment; filename="report.csv"'
        assert response["Content-Type"] == "application/octet-stream"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["Content-Security-Policy"] == "sandbox; default-src 'none'"
        assert response["Content-Length"] == "8"


@pytest.mark.django_db
def test_a_file_named_like_a_script_page_downloads_and_never_renders(owner, client, workspace_root):
    session = session_create(user=owner)
    name = "<script>.html"
    _workspace(workspace_root, session, {name: b"<script>alert(document.cookie)</script>"})
    client.force_login(owner)

    response = client.get(f"/chat/{session.pk}/workspace/download/", {"path": name})
    listed = client.get(f"/chat/{session.pk}/workspace/").content.decode()

    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment;")
    assert "html" not in response["Content-Type"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "&lt;script&gt;.html" in listed
    assert "<script>.html" not in listed


@pytest.mark.django_db
def test_the_zip_holds_every_file_with_its_bytes(owner, client, api, workspace_root):
    session = session_create(user=owner)
    files = {"a.txt": b"alpha", "deep/er/b.bin": bytes(range(256)) * 1000, "c.png": PNG}
    _workspace(workspace_root, session, files)
    client.force_login(owner)

    for response in (
        client.get(f"/chat/{session.pk}/workspace/zip/"),
        api(owner).get(f"/api/sessions/{session.pk}/workspace/zip/"),
    ):
        assert response.status_code == 200
        assert response["Content-Disposition"].startswith("attachment;")
        assert response["X-Content-Type-Options"] == "nosniff"
        archive = zipfile.ZipFile(io.BytesIO(_body(response)))
        assert sorted(archive.namelist()) == sorted(files)
        assert {name: archive.read(name) for name in files} == files


@pytest.mark.django_db
def test_a_zip_past_the_bytes_bound_is_refused_saying_why(
    owner, client, api, settings, workspace_root
):
    settings.TOOLHUB_WORKSPACE_ZIP_MAX_BYTES = 1000
    session = session_create(user=owner)
    _workspace(workspace_root, session, {"a.bin": b"x" * 800, "b.bin": b"y" * 800})
    client.force_login(owner)

    page = client.get(f"/chat/{session.pk}/workspace/zip/")
    answer = api(owner).get(f"/api/sessions/{session.pk}/workspace/zip/")
    panel = client.get(f"/chat/{session.pk}/workspace/").content.decode()

    assert page.status_code == 409
    assert "files come to 1.6 KB, more than the 1 KB a zip takes" in page.content.decode()
    assert (answer.status_code, answer.json()["code"]) == (409, "too_large")
    assert "Download the files you need one at a time." in answer.json()["message"]
    assert "Download all as a zip" not in panel
    assert "more than the 1 KB a zip takes" in panel


@pytest.mark.django_db
def test_a_zip_bomb_workspace_is_refused_by_file_count_and_by_a_sparse_files_size(
    owner, api, settings, workspace_root
):
    settings.TOOLHUB_WORKSPACE_ZIP_MAX_FILES = 50
    many, sparse = session_create(user=owner), session_create(user=owner)
    _workspace(workspace_root, many, {f"d{n % 7}/f{n}": b"" for n in range(51)})
    folder = _workspace(workspace_root, sparse, {})
    with (folder / "huge.img").open("wb") as handle:
        handle.truncate(300_000_000)  # no bytes on disk, 300 MB by its size

    by_count = api(owner).get(f"/api/sessions/{many.pk}/workspace/zip/").json()
    by_size = api(owner).get(f"/api/sessions/{sparse.pk}/workspace/zip/").json()

    assert "more than 50 files" in by_count["message"]
    assert "files come to 300 MB, more than the 200 MB a zip takes" in by_size["message"]
    assert by_size["code"] == "too_large"


@pytest.mark.django_db
def test_another_persons_chat_a_binned_chat_and_a_made_up_id_are_404_on_every_route(
    owner, other_user, client, api, workspace_root
):
    mine, binned = session_create(user=owner), session_create(user=owner)
    for session in (mine, binned):
        _workspace(workspace_root, session, {"a.txt": b"secret"})
    session_trash(user=owner, session=binned)
    client.force_login(other_user)

    for route in _routes(mine.pk):
        who = api(other_user) if route.startswith("/api/") else client
        assert who.get(route).status_code == 404, route
    client.force_login(owner)
    for session_id in (binned.pk, uuid.uuid4()):
        for route in _routes(session_id):
            who = api(owner) if route.startswith("/api/") else client
            assert who.get(route).status_code == 404, route


@pytest.mark.django_db
def test_the_api_lists_links_and_special_files_as_not_downloadable(owner, api, workspace_root):
    session = session_create(user=owner)
    folder = _workspace(workspace_root, session, {"a.txt": b"a"})
    (folder / "to-etc").symlink_to("/etc")
    os.mkfifo(folder / "pipe")

    listed = api(owner).get(f"/api/sessions/{session.pk}/workspace/").json()["files"]

    kinds = {entry["path"]: (entry["kind"], entry["downloadable"]) for entry in listed}
    assert kinds == {
        "a.txt": ("file", True),
        "to-etc": ("link", False),
        "pipe": ("other", False),
    }
    assert (
        api(owner).get(f"/api/sessions/{session.pk}/workspace/download/?path=pipe").status_code
        == 404
    )


def test_a_write_that_succeeded_links_its_file_and_a_failed_or_escaping_one_does_not():
    def card(name: str, path: object, status: str = "ok") -> Card:
        return Card("c1", "call", name, {"path": path}, None, "t", status=status)

    assert card("write", "./out//report.md").written_path == "out/report.md"
    assert card("edit", "src/app.py").written_path == "src/app.py"
    assert card("write", "report.md", status="error").written_path == ""
    assert card("write", "../../etc/passwd").written_path == ""
    assert card("write", "/etc/passwd").written_path == ""
    assert card("read", "report.md").written_path == ""
    assert card("write", 42).written_path == ""
