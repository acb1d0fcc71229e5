"""A chat downloaded from its menu as Markdown and JSON, and the JSON imported again from
the chats list as a new chat, in Chromium (sessions_app/export.py)."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import expect

from tests.e2e.conftest import SCREENSHOTS, open_new_chat


def test_a_chat_is_downloaded_as_markdown_and_json_and_the_json_imports_again(
    product, page, tmp_path
):
    open_new_chat(page, *product)
    page.get_by_label("Message").fill("use calculate: 6 * 7")
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".turn-end")).to_have_count(1, timeout=20_000)

    page.get_by_text("Chat actions").click()
    with page.expect_download() as markdown:
        page.get_by_role("link", name="as Markdown").click()
    text = Path(markdown.value.path()).read_text(encoding="utf-8")
    assert text.startswith("# use calculate: 6 * 7")
    assert "**Tool call** `calculate`" in text
    with page.expect_download() as exported:
        page.get_by_role("link", name="as JSON").click()
    saved = tmp_path / exported.value.suggested_filename
    exported.value.save_as(saved)
    assert json.loads(saved.read_text())["format"] == "toolhub.chat"

    chats = page.get_by_role("navigation", name="Chats")
    chats.get_by_text("Import a chat").click()
    chats.get_by_label("A JSON export of a chat").set_input_files(saved)
    chats.get_by_role("button", name="Import").click()

    expect(page.get_by_text("Imported “use calculate: 6 * 7”.")).to_be_visible()
    expect(page.locator(".bubble.user")).to_have_text(["use calculate: 6 * 7"])
    expect(page.locator(".tool-card", has_text="calculate").last).to_contain_text("ok")
    expect(chats.get_by_role("link", name="use calculate: 6 * 7")).to_have_count(2)
    page.screenshot(path=SCREENSHOTS / "chat_imported.png")
    assert page.console_errors == []
