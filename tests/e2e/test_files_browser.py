"""The chat's Files panel in Chromium, at a phone's width in dark mode: a file written into
the chat's workspace is listed, previewed as text and downloaded
(sessions_app/workspace_files.py)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest import app_env, daphne
from tests.e2e.conftest import open_new_chat
from tests.products import seeded_var_dir

NOTES = "# Findings\n\n<b>not bold</b> & plain text\n"


@pytest.fixture(scope="module")
def product_with_files():
    """The product as ``product`` serves it, with where its workspaces live."""
    var_dir = Path(tempfile.mkdtemp(prefix="toolhub-product-"))
    var_dir.chmod(0o711)
    try:
        seed = seeded_var_dir(var_dir)
        with daphne(app_env(var_dir)) as base:
            yield base, seed.password, var_dir / "workspaces"
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)


def test_a_file_in_the_workspace_is_listed_previewed_and_downloaded_from_the_files_panel(
    product_with_files, page
):
    base, password, workspaces = product_with_files
    open_new_chat(page, base, password)
    # A phone's width (the chats list is a drawer there) in dark mode.
    page.set_viewport_size({"width": 390, "height": 844})
    page.emulate_media(color_scheme="dark")
    session_id = re.search(r"/chat/([0-9a-f-]+)/", page.url).group(1)
    folder = workspaces / session_id / "out"
    folder.mkdir(parents=True)
    (folder / "notes.md").write_text(NOTES, encoding="utf-8")

    page.get_by_role("button", name="Files", exact=True).click()
    panel = page.get_by_role("dialog", name="Files")
    expect(panel.get_by_text("out/notes.md")).to_be_visible()
    panel.get_by_role("button", name="Preview out/notes.md").click()

    expect(panel.locator("pre.workspace-text")).to_contain_text("<b>not bold</b> & plain text")
    expect(panel.locator("pre.workspace-text b")).to_have_count(0)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    box = panel.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= 390
    with page.expect_download() as download:
        panel.get_by_role("link", name="Download out/notes.md").click()
    assert download.value.suggested_filename == "notes.md"
    assert Path(download.value.path()).read_text(encoding="utf-8") == NOTES
    assert page.console_errors == []
