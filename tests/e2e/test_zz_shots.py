from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.conftest import open_new_chat
from tests.e2e.test_attach_browser import DROP

OUT = "var/test-output/issue43"


def test_shots(product, page):
    base, password = product
    page.set_viewport_size({"width": 1440, "height": 900})
    open_new_chat(page, base, password)
    page.evaluate(DROP, ["quarterly-report.csv", "a,b\n1,2\n"])
    expect(page.locator("[data-attached] .file-chip [data-file-remove]")).to_be_visible()
    page.get_by_label("Message").fill("Sum the second column")
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".turn-end")).to_have_count(1, timeout=20_000)
    page.get_by_label("Message").fill("And the first?")
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".turn-end")).to_have_count(2, timeout=20_000)
    page.locator(".message.user").first.get_by_role("button", name="Edit").click()
    page.keyboard.press("Control+a")
    page.keyboard.type("Sum the first column instead")
    page.keyboard.press("Enter")
    expect(page.get_by_text("2/2").first).to_be_visible(timeout=20_000)
    page.evaluate(DROP, ["notes.txt", "waiting"])
    expect(page.locator("[data-attached] .file-chip [data-file-remove]")).to_be_visible()
    for width, height in ((1440, 900), (390, 844)):
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(300)
            page.screenshot(path=f"{OUT}/chat-{width}-{scheme}.png")
            page.get_by_role("button", name="Files", exact=True).click()
            panel = page.get_by_role("dialog", name="Files")
            expect(panel).to_be_visible()
            panel.get_by_role("button", name="Preview quarterly-report.csv").click()
            page.wait_for_timeout(300)
            page.screenshot(path=f"{OUT}/files-{width}-{scheme}.png")
            page.keyboard.press("Escape")
