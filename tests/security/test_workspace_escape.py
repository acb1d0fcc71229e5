"""A hostile workspace: what the agent made with bash (symlinks to /etc, a folder swapped
for a symlink while it is read, loops, FIFOs, odd names) never lets the Files panel, its
downloads, its previews or its zip read anything outside the chat's workspace."""

from __future__ import annotations

import io
import os
import threading
import time
import zipfile

import pytest

from sessions_app.services import session_create
from toolhub.lib.workspace_fs import NotAFile, RefusedPath, file_open, workspace_walk

pytestmark = pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous")

OUTSIDE = b"outside the workspace: never served"


@pytest.fixture
def workspace(settings, tmp_path, owner):
    settings.TOOLHUB_WORKSPACE_ROOT = tmp_path / "workspaces"
    session = session_create(user=owner)
    folder = tmp_path / "workspaces" / str(session.pk)
    folder.mkdir(parents=True)
    (folder / "ok.txt").write_bytes(b"inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_bytes(OUTSIDE)
    return session, folder, tmp_path / "outside"


def _routes(session, path: str) -> list[str]:
    query = f"?path={path}"
    page, api = f"/chat/{session.pk}/workspace/", f"/api/sessions/{session.pk}/workspace/"
    return [
        f"{page}preview/{query}",
        f"{page}download/{query}",
        f"{page}image/{query}",
        f"{api}download/{query}",
    ]


def _get(client, api, owner, route: str):
    return api(owner).get(route) if route.startswith("/api/") else client.get(route)


def _body(response) -> bytes:
    return b"".join(response) if response.streaming else response.content


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "../../etc/passwd",
        "..%2F..%2Fetc%2Fpasswd",
        "/etc/passwd",
        "%2Fetc%2Fpasswd",
        "a%00b",
        "ok.txt%0A",
    ],
)
def test_a_path_that_climbs_is_absolute_or_holds_a_control_character_is_refused(
    owner, client, api, workspace, path
):
    session, _, _ = workspace
    client.force_login(owner)

    for route in _routes(session, path):
        response = _get(client, api, owner, route)
        assert response.status_code == 400, route
        assert b"root:" not in _body(response)


@pytest.mark.django_db
def test_symlinks_to_etc_and_to_etc_passwd_are_listed_as_links_and_never_read(
    owner, client, api, workspace
):
    session, folder, _ = workspace
    (folder / "etc").symlink_to("/etc")
    (folder / "passwd").symlink_to("/etc/passwd")
    client.force_login(owner)

    listed = api(owner).get(f"/api/sessions/{session.pk}/workspace/").json()["files"]
    panel = client.get(f"/chat/{session.pk}/workspace/").content.decode()
    archive = zipfile.ZipFile(io.BytesIO(_body(client.get(f"/chat/{session.pk}/workspace/zip/"))))

    assert {entry["path"]: entry["kind"] for entry in listed} == {
        "ok.txt": "file",
        "etc": "link",
        "passwd": "link",
    }
    assert "etc/passwd" not in panel
    assert panel.count("a link, not followed") == 2
    assert archive.namelist() == ["ok.txt"]
    for path in ("passwd", "etc/passwd", "etc/hostname", "etc"):
        for route in _routes(session, path):
            response = _get(client, api, owner, route)
            assert response.status_code == 404, route
            assert b"root:" not in _body(response)


@pytest.mark.django_db
def test_a_folder_swapped_for_a_symlink_is_not_followed_at_any_step(owner, client, api, workspace):
    session, folder, outside = workspace
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "a" / "b" / "secret.txt").write_bytes(b"the agent's own")
    listed = api(owner).get(f"/api/sessions/{session.pk}/workspace/").json()["files"]
    assert "a/b/secret.txt" in {entry["path"] for entry in listed}
    # After the list was read, the deepest folder, then a middle one, become links out.
    (folder / "a" / "b" / "secret.txt").unlink()
    (folder / "a" / "b").rmdir()
    (folder / "a" / "b").symlink_to(outside)
    client.force_login(owner)

    deep = [_get(client, api, owner, route) for route in _routes(session, "a/b/secret.txt")]
    (folder / "a" / "b").unlink()
    (folder / "a").rmdir()
    (folder / "a").symlink_to(folder.parent.parent)
    middle = [_get(client, api, owner, route) for route in _routes(session, "a/outside/secret.txt")]

    for response in deep + middle:
        assert response.status_code == 404
        assert OUTSIDE not in _body(response)


@pytest.mark.django_db
def test_a_workspace_that_is_itself_a_symlink_is_not_followed(owner, api, workspace):
    session, folder, outside = workspace
    (folder / "ok.txt").unlink()
    folder.rmdir()
    folder.symlink_to(outside)

    listed = api(owner).get(f"/api/sessions/{session.pk}/workspace/").json()
    download = api(owner).get(f"/api/sessions/{session.pk}/workspace/download/?path=secret.txt")

    assert listed["files"] == []
    assert download.status_code == 404


def test_a_symlink_raced_in_for_a_folder_while_files_are_read_never_leads_out(tmp_path):
    root, outside = tmp_path / "ws", tmp_path / "outside"
    (root / "dir").mkdir(parents=True)
    outside.mkdir()
    (root / "dir" / "f.txt").write_bytes(b"inside")
    (outside / "f.txt").write_bytes(OUTSIDE)
    stop = threading.Event()

    def swap() -> None:
        # The folder and a link out trade places, letting the reader run between steps.
        while not stop.is_set():
            os.rename(root / "dir", root / "real")
            os.symlink(outside, root / "dir")
            time.sleep(0)
            os.unlink(root / "dir")
            os.rename(root / "real", root / "dir")
            time.sleep(0)

    swapper = threading.Thread(target=swap)
    swapper.start()
    read = []
    try:
        for _ in range(2_000):
            try:
                with file_open(root, "dir/f.txt") as opened:
                    read.append(opened.head(100))
            except NotAFile:
                read.append(b"")
    finally:
        stop.set()
        swapper.join()

    assert OUTSIDE not in read
    # Both states were met: the race was run, not missed.
    assert b"inside" in read
    assert b"" in read


def test_loops_fifos_and_names_with_control_characters_neither_hang_nor_break_a_walk(tmp_path):
    root = tmp_path / "ws"
    (root / "d").mkdir(parents=True)
    (root / "d" / "up").symlink_to("..")
    (root / "self").symlink_to("self")
    os.mkfifo(root / "pipe")
    (root / "bad\nname.txt").write_bytes(b"x")
    (root / b"latin-\xe9.txt".decode("utf-8", "surrogateescape")).write_bytes(b"x")

    listing = workspace_walk(root, most=1_000)

    shown = {entry.path: (entry.kind, entry.servable) for entry in listing.entries}
    assert shown == {
        "d/up": ("link", False),
        "self": ("link", False),
        "pipe": ("other", False),
        "bad?name.txt": ("file", False),
        "latin-\ufffd.txt": ("file", False),
    }
    with pytest.raises(NotAFile), file_open(root, "pipe"):
        pass
    with pytest.raises(RefusedPath), file_open(root, "bad\nname.txt"):
        pass
    with pytest.raises(NotAFile), file_open(root, "d/up/pipe"):
        pass


def test_a_walk_stops_at_its_bound_and_says_so(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    for number in range(30):
        (root / f"f{number}").write_bytes(b"")

    listing = workspace_walk(root, most=10)

    assert (len(listing.entries), listing.complete) == (10, False)


def test_a_deep_tree_is_walked_only_so_deep(tmp_path):
    root = tmp_path / "ws"
    deep = root.joinpath(*["d"] * 70)
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_bytes(b"x")

    listing = workspace_walk(root, most=1_000)

    assert (listing.entries, listing.complete) == ((), False)
