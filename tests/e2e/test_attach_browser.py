"""Attaching files to a message in Chromium: by the paperclip, by dropping them on the
chat and by pasting one into the message box; each shows as a chip, a refused one says
why, and the message goes with its files (the demo model says back what it was told)."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.conftest import open_new_chat

DROP = """([name, text]) => {
  const transfer = new DataTransfer();
  transfer.items.add(new File([text], name, { type: "text/plain" }));
  const target = document.querySelector(".transcript");
  for (const type of ["dragover", "drop"]) {
    const init = { bubbles: true, cancelable: true, dataTransfer: transfer };
    target.dispatchEvent(new DragEvent(type, init));
  }
}"""
PASTE = """([name, text]) => {
  const transfer = new DataTransfer();
  transfer.items.add(new File([text], name, { type: "text/plain" }));
  const box = document.querySelector("#message");
  const init = { bubbles: true, cancelable: true, clipboardData: transfer };
  box.dispatchEvent(new ClipboardEvent("paste", init));
}"""


def test_files_attached_three_ways_go_with_the_message_and_the_model_is_told(product, page):
    base, password = product
    open_new_chat(page, base, password)
    chips = page.locator("[data-attached] .file-chip")

    with page.expect_file_chooser() as chosen:
        page.get_by_role("button", name="Attach files").click()
    chosen.value.set_files(
        [{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"remember the milk"}]
    )
    page.evaluate(DROP, ["dropped.csv", "a,b\n1,2\n"])
    page.evaluate(PASTE, ["pasted.txt", "from the clipboard"])

    expect(page.get_by_role("button", name="Remove pasted.txt")).to_be_visible()
    expect(chips).to_have_count(3)
    page.get_by_role("button", name="Remove dropped.csv").click()
    expect(chips).to_have_count(2)
    # A message may be only its files.
    page.get_by_role("button", name="Send").click()

    answer = page.locator(".message.assistant").last
    expect(answer).to_contain_text(
        "You attached 2 files, saved in the workspace: notes.txt", timeout=20_000
    )
    expect(answer).not_to_contain_text("dropped.csv")
    sent = page.locator(".message.user .attached-files").last
    expect(sent).to_contain_text("notes.txt")
    expect(sent).to_contain_text("pasted.txt")
    expect(chips).to_have_count(0)

    # After a reload the chat still shows which files the message carried.
    page.reload()
    expect(page.locator(".message.user .attached-files").last).to_contain_text("pasted.txt")


def test_a_file_past_the_bound_is_refused_in_words_before_it_uploads(product, page):
    base, password = product
    open_new_chat(page, base, password)
    page.evaluate("document.querySelector('[data-session]').dataset.uploadFile = '10'")

    with page.expect_file_chooser() as chosen:
        page.get_by_role("button", name="Attach files").click()
    chosen.value.set_files(
        [{"name": "big.bin", "mimeType": "application/octet-stream", "buffer": b"x" * 11}]
    )

    expect(page.locator("[data-composer-error]")).to_have_text(
        "Not attached: big.bin is larger than 10 bytes, the most one file may be."
    )
    expect(page.locator("[data-attached] .file-chip")).to_have_count(0)
