"""What a person does with a conversation in Chromium: copy, regenerate, edit and resend,
search, delete and undo, the shortcuts, and an inspector that follows the composer and
an operator's disable before any turn."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.conftest import (
    held_request,
    hold_requests,
    new_chat,
    open_new_chat,
    open_options,
    sign_in,
)


def _say(page, text: str) -> None:
    ends = page.locator(".turn-end").count()
    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".turn-end")).to_have_count(ends + 1, timeout=20_000)


def _edit_the_first(page):
    """The first message edited into "first words, edited": its switcher, at 2/2."""
    page.locator(".message.user").first.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Edit your message")
    editor.fill("first words, edited")
    editor.press("Enter")
    versions = page.get_by_role("group", name="Versions of what you wrote")
    expect(versions).to_contain_text("2/2", timeout=20_000)
    return versions


def test_copy_puts_a_message_and_a_code_block_on_the_clipboard(product, page):
    base, password = product
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    open_new_chat(page, base, password)
    _say(page, "use current_time")

    answer = page.locator(".message.assistant").last
    answer.get_by_role("button", name="Copy", exact=True).click()
    expect(answer.get_by_role("button", name="Copied")).to_be_visible()
    # As it reads, not its markdown source: no backticks in the text, and the rendered
    # HTML (its code span) for an editor that keeps formatting.
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("The tool returned: ")
    assert "`" not in copied
    html = page.evaluate(
        "(async () => { const [item] = await navigator.clipboard.read();"
        " return await (await item.getType('text/html')).text(); })()"
    )
    assert "<code>" in html
    assert "Copy" not in html
    # A fenced block is highlighted on the server and gets its own Copy code button.
    _say(page, "here is code:\n```python\nprint('hi')\n```")
    code = page.locator(".message.assistant").last.locator(".code-block")
    expect(code.locator("pre.highlight span.nb")).to_have_text("print")
    code.get_by_role("button", name="Copy code").click()
    assert page.evaluate("navigator.clipboard.readText()") == "print('hi')\n"
    # The whole answer: its paragraph and its code, a line each, no fence, no button.
    whole = page.locator(".message.assistant").last
    whole.get_by_role("button", name="Copy", exact=True).click()
    # The message's own button (its code block's says Copied for a moment too).
    expect(whole.locator("button[data-copy]")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()").endswith("print('hi')")
    assert "```" not in page.evaluate("navigator.clipboard.readText()")
    assert page.console_errors == []


def test_regenerate_replaces_the_last_answer_and_edit_resends_from_that_message(product, page):
    open_new_chat(page, *product)
    _say(page, "first words")
    _say(page, "second words")
    expect(page.locator(".bubble.user")).to_have_text(["first words", "second words"])

    answered = page.locator(".message.assistant").last.get_attribute("id")
    page.get_by_role("button", name="Regenerate").click()
    # The new answer is another item (a later seq); only then has the turn surely begun,
    # so Stop hidden means it ended (on a loaded machine it may not have started yet).
    expect(page.locator(".message.assistant").last).not_to_have_id(answered, timeout=20_000)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)
    expect(page.locator(".bubble.user")).to_have_text(["first words", "second words"])
    expect(page.locator(".bubble.assistant")).to_have_count(2)
    expect(page.get_by_role("button", name="Regenerate")).to_have_count(1)

    page.locator(".message.user").first.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Edit your message")
    expect(editor).to_be_focused()
    editor.fill("first words, edited")
    editor.press("Enter")

    expect(page.locator(".bubble.user")).to_have_text(["first words, edited"], timeout=20_000)
    expect(page.locator(".bubble.assistant")).to_have_count(1, timeout=20_000)
    expect(page.locator(".bubble.assistant")).to_contain_text("first words, edited")
    page.reload()
    expect(page.locator(".bubble.user")).to_have_text(["first words, edited"])
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)
    expect(page.locator(".context-gauge")).to_contain_text("of 200,000 tokens")
    assert page.console_errors == []


def test_an_edit_keeps_the_first_version_and_the_switcher_brings_it_back(product, page):
    open_new_chat(page, *product)
    _say(page, "first words")
    _say(page, "second words")

    versions = _edit_the_first(page)
    expect(page.locator(".bubble.user")).to_have_text(["first words, edited"], timeout=20_000)
    expect(versions.get_by_role("button", name="Next version")).to_be_disabled()

    versions.get_by_role("button", name="Previous version").click()

    # The original message, its own answer, and the second turn are back.
    expect(page.locator(".bubble.user")).to_have_text(["first words", "second words"])
    expect(page.locator(".bubble.assistant")).to_have_count(2)
    expect(page.locator(".bubble.assistant").first).to_contain_text("You said: first words")
    expect(page.locator(".bubble.assistant").last).to_contain_text("You said: second words")
    expect(versions).to_contain_text("1/2")
    # The next turn goes on from the branch shown, and a reload shows the same.
    _say(page, "third words")
    expect(page.locator(".bubble.user")).to_have_text(
        ["first words", "second words", "third words"]
    )
    page.reload()
    expect(page.locator(".bubble.user")).to_have_text(
        ["first words", "second words", "third words"]
    )
    expect(page.get_by_role("group", name="Versions of what you wrote")).to_contain_text("1/2")
    assert page.console_errors == []


def test_a_redraw_read_before_a_turn_and_drawn_after_it_keeps_that_turn(product, page):
    """A version switch redraws the chat twice (its own, and its branch event's). The
    second page is read now and handed over only after a whole new turn was drawn live,
    as a slow network would: the chat drawn must still hold that turn."""
    open_new_chat(page, *product)
    _say(page, "first words")
    _say(page, "second words")
    versions = _edit_the_first(page)

    # The chat page's redraws, not its navigations.
    held, stop = hold_requests(page, page.url, lambda request: request.resource_type == "fetch")
    versions.get_by_role("button", name="Previous version").click()
    held_request(page, held).continue_()
    expect(page.locator(".bubble.user")).to_have_text(["first words", "second words"])
    late = held_request(page, held)
    read_before = late.fetch()
    stop()

    _say(page, "third words")
    page.evaluate(
        """() => new MutationObserver((records, observer) => {
            if (records.some((record) => record.removedNodes.length > 1)) {
                window.redrawn = true;
                observer.disconnect();
            }
        }).observe(document.querySelector(".transcript"), { childList: true })"""
    )
    late.fulfill(response=read_before)
    page.wait_for_function("() => window.redrawn === true")

    expect(page.locator(".bubble.user")).to_have_text(
        ["first words", "second words", "third words"]
    )
    expect(page.locator(".bubble.assistant").last).to_contain_text("You said: third words")
    expect(page.locator(".turn-end")).to_have_count(3)
    # The words are drawn once, not again on top of the page that already had them.
    expect(page.get_by_text("You said: third words")).to_have_count(1)
    page.reload()
    expect(page.locator(".bubble.user")).to_have_text(
        ["first words", "second words", "third words"]
    )
    assert page.console_errors == []


def test_a_switch_refused_while_a_turn_runs_says_why_and_leaves_the_chat_as_it_was(product, page):
    open_new_chat(page, *product)
    _say(page, "first words")
    versions = _edit_the_first(page)
    page.get_by_label("Message").fill("use ask_user_question: Which colour?")
    page.get_by_label("Message").press("Enter")
    card = page.locator(".tool-card")
    expect(card).to_have_attribute("data-status", "running", timeout=20_000)

    previous = versions.get_by_role("button", name="Previous version")
    previous.click()

    # Said, and kept in sight: nothing was switched, so nothing is drawn again.
    expect(previous).to_be_enabled()
    expect(page.get_by_role("alert")).to_contain_text("still answering")
    expect(versions).to_contain_text("2/2")
    expect(card.locator(".question-text")).to_have_text("Which colour?")
    page.get_by_label("Message").fill("blue")
    page.get_by_label("Message").press("Enter")
    expect(card).to_have_attribute("data-status", "ok", timeout=20_000)
    expect(page.get_by_role("alert")).to_contain_text("still answering")
    # Chromium logs the refusal's 409 itself; nothing else went wrong.
    assert [error for error in page.console_errors if "409 (Conflict)" not in error] == []


def test_an_edit_refused_because_a_turn_began_opens_again_with_what_was_written(product, page):
    open_new_chat(page, *product)
    _say(page, "first words")
    page.locator(".message.user").first.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Edit your message")
    message = page.get_by_label("Message", exact=True)
    editor.fill("first words, rewritten")
    # Meanwhile a turn begins (this tab's composer here; another tab's would do the same).
    message.fill("use ask_user_question: Which colour?")
    message.press("Enter")
    card = page.locator(".tool-card")
    expect(card).to_have_attribute("data-status", "running", timeout=20_000)

    editor.press("Enter")

    expect(page.get_by_role("alert")).to_contain_text("still answering")
    expect(page.get_by_label("Edit your message")).to_have_value("first words, rewritten")
    expect(message).to_have_value("")
    message.fill("blue")
    message.press("Enter")
    expect(card).to_have_attribute("data-status", "ok", timeout=20_000)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)
    page.get_by_label("Edit your message").press("Enter")
    expect(page.locator(".bubble.user")).to_have_text(["first words, rewritten"], timeout=20_000)
    assert page.console_errors == []


def test_search_finds_a_chat_by_its_words_and_opens_it_there(product, page):
    open_new_chat(page, *product)
    _say(page, "the zebra crossing puzzle")
    new_chat(page, product[0])

    page.keyboard.press("Control+k")
    search = page.get_by_label("Search your chats")
    expect(search).to_be_focused()
    search.fill("zebra")
    hit = page.locator(".search-results a", has_text="zebra crossing")
    expect(hit).to_be_visible(timeout=10_000)
    hit.click()

    expect(page.locator(".item.linked .bubble.user")).to_have_text("the zebra crossing puzzle")
    assert page.console_errors == []


def test_question_mark_lists_the_shortcuts_and_esc_closes_them(product, page):
    open_new_chat(page, *product)
    page.locator(".pane").click()

    page.keyboard.press("?")
    shortcuts = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(shortcuts).to_be_visible()
    expect(shortcuts).to_contain_text("Search chats")
    page.keyboard.press("Escape")
    expect(shortcuts).to_be_hidden()

    # Typed into the message box, "?" is just a character.
    page.get_by_label("Message").press("?")
    expect(shortcuts).to_be_hidden()
    expect(page.get_by_label("Message")).to_have_value("?")


def test_a_deleted_chat_comes_back_with_undo(product, page):
    open_new_chat(page, *product)
    _say(page, "keep this thought")
    chat_url = page.url

    page.get_by_text("Chat actions").click()
    page.get_by_role("button", name="Delete this chat").click()
    expect(page.get_by_role("status").filter(has_text="Deleted")).to_contain_text(
        "keep this thought"
    )
    page.get_by_role("button", name="Undo").click()

    page.wait_for_url(chat_url)
    expect(page.locator(".bubble.user")).to_have_text(["keep this thought"])
    assert page.console_errors == []


def test_the_inspector_follows_the_composer_before_any_turn(product, page):
    open_new_chat(page, *product)
    inspector = page.get_by_role("complementary", name="Next turn")
    expect(inspector.get_by_text("Sent with every message")).to_be_visible(timeout=10_000)

    open_options(page)
    page.get_by_role("group", name="Tools").get_by_role("radio", name="Off", exact=True).check()
    expect(inspector).to_contain_text("None: this turn sends no tools.", timeout=10_000)
    page.get_by_role("group", name="Tools").get_by_role("radio", name="On", exact=True).check()
    expect(inspector).not_to_contain_text("None: this turn sends no tools.", timeout=10_000)
    assert page.locator(".bubble").count() == 0
    assert page.console_errors == []


def test_an_operators_disable_reaches_an_open_chat_before_its_next_turn(product, page):
    base, password = product
    open_new_chat(page, base, password)
    inspector = page.get_by_role("complementary", name="Next turn")
    expect(inspector.locator("code", has_text="grep").first).to_be_visible(timeout=10_000)

    ops = page.context.browser.new_context(storage_state=page.context.storage_state()).new_page()
    ops.goto(f"{base}/ops/tools/")
    ops.get_by_label("Reason to disable grep").fill("index rebuilding")
    ops.get_by_role("button", name="Disable grep").click()
    ops.wait_for_url(f"{base}/ops/tools/")

    hidden = page.locator("#hidden-grep")
    expect(hidden).to_contain_text("turned off by an operator", timeout=10_000)
    expect(hidden).to_contain_text("index rebuilding")
    ops.get_by_role("button", name="Enable grep").click()
    expect(page.locator("#hidden-grep")).to_have_count(0, timeout=10_000)
    assert page.console_errors == []


def test_a_person_who_signs_in_lands_on_the_chat_with_the_composer_ready(product, page):
    base, password = product
    sign_in(page, base, password)

    expect(page.get_by_role("button", name="New chat").first).to_be_visible()


def test_a_chat_is_renamed_in_place_and_esc_leaves_it_as_it_was(product, page):
    open_new_chat(page, *product)
    _say(page, "hello")
    heading = page.get_by_role("heading", name="hello", exact=True)

    page.get_by_role("button", name="Rename this chat").click()
    title = page.get_by_label("The chat's title")
    expect(title).to_be_focused()
    title.fill("Never saved")
    title.press("Escape")
    expect(heading).to_be_visible()
    expect(page.get_by_role("button", name="Rename this chat")).to_be_focused()

    page.get_by_role("button", name="Rename this chat").click()
    title.fill("Trip notes")
    title.press("Enter")
    expect(page.get_by_role("heading", name="Trip notes")).to_be_visible()
    chats = page.get_by_role("navigation", name="Chats")
    expect(chats.locator('a[aria-current="page"]')).to_have_text("Trip notes")
    assert page.console_errors == []
