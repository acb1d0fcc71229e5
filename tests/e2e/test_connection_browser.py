"""The chat page's socket when the server refuses it as it connects (here: the chat is
open in as many places as allowed), in Chromium: what the person sent meanwhile is
neither lost nor sent twice."""

from __future__ import annotations

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.e2e.conftest import open_new_chat, started_product


@pytest.fixture(scope="module")
def product_of_one_socket_per_chat():
    with started_product(TOOLHUB_SOCKETS_PER_CHAT="1") as started:
        yield started


def test_a_message_sent_while_the_chat_was_refused_a_connection_goes_once_one_is_free(
    product_of_one_socket_per_chat, page
):
    open_new_chat(page, *product_of_one_socket_per_chat)
    other = page.context.new_page()
    errors: list[str] = []
    other.on("console", lambda line: line.type == "error" and errors.append(line.text))
    sent: list[str] = []

    def watch(socket):
        socket.on("framesent", lambda frame: sent.append(frame))

    other.on("websocket", watch)
    other.clock.install()
    other.goto(page.url)
    connection = other.locator(".connection")
    expect(connection).to_contain_text("This chat is open in 1 place already")
    message = other.get_by_label("Message", exact=True)
    message.fill("from the second tab")
    message.press("Enter")

    # The page tries again (its 10 s wait, skipped) and sends what waited at once, on a
    # socket the server refuses again before it reads a frame.
    sent.clear()
    with other.expect_websocket() as opened:
        other.clock.fast_forward(10_000)
    opened.value.wait_for_event("close")
    assert any("from the second tab" in frame for frame in sent)
    expect(other.locator(".bubble.user")).to_have_count(0)

    # The first tab closes, its place is freed as the server hears it go; the next try is
    # taken, and the message goes, once.
    page.close()
    for _ in range(5):
        with other.expect_websocket() as opened:
            other.clock.fast_forward(10_000)
        try:
            first = opened.value.wait_for_event("framereceived", timeout=5_000)
        except PlaywrightTimeout:
            break  # taken, with nothing to say: nothing was sent on it
        if "too_many_sockets" not in first:
            break
    expect(other.locator(".bubble.user")).to_have_text(["from the second tab"], timeout=20_000)
    expect(other.locator(".turn-end")).to_have_count(1, timeout=20_000)
    expect(connection).to_be_hidden()
    # Chromium logs each refused socket itself; nothing else went wrong.
    assert [error for error in errors if "WebSocket" not in error] == []
