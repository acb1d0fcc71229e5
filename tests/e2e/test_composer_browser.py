"""The composer's Tools and Web search controls in a real browser: each is follow / on /
off, says what follow comes to under the chosen profile, and the next turn (the offline
demo model) is resolved with what was picked, as the inspector then shows."""

from __future__ import annotations

import os
import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import held_request, hold_requests, open_new_chat, open_options


@pytest.fixture(scope="module")
def brave_key():
    """web_search is available only with a key; the demo model never calls it here."""
    saved = os.environ.get("BRAVE_API_KEY")
    os.environ["BRAVE_API_KEY"] = "test-key"
    yield
    if saved is None:
        del os.environ["BRAVE_API_KEY"]
    else:
        os.environ["BRAVE_API_KEY"] = saved


@pytest.fixture(scope="module")
def product(brave_key, product):
    # The product of tests/e2e/conftest.py, started once the key is in its environment.
    return product


def _send(page, text: str) -> None:
    answers = page.locator(".bubble.assistant")
    before = answers.count()
    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")
    expect(answers).to_have_count(before + 1, timeout=20_000)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)


def test_follow_on_and_off_reach_the_next_turn_and_say_what_follow_means(product, page):
    open_new_chat(page, *product)
    open_options(page)
    tools = page.get_by_role("group", name="Tools")
    web = page.get_by_role("group", name="Web search")
    inspector = page.locator(".inspector")

    # A new chat follows: the agent and the profile decide.
    expect(tools.get_by_role("radio", name="Follow · on")).to_be_checked()
    expect(web.get_by_role("radio", name="Follow · on")).to_be_checked()
    expect(web).to_contain_text("Follow: on (the default profile has it).")

    # What follow means moves with the Profile select, without a round trip.
    page.get_by_label("Profile").select_option("files")
    expect(web.get_by_role("radio", name="Follow · off")).to_be_checked()
    expect(web).to_contain_text("Follow: off (not in the 'files' toolset).")
    page.get_by_label("Profile").select_option("research")
    expect(web).to_contain_text("Follow: on (the research profile has it).")

    web.get_by_role("radio", name="Off", exact=True).check()
    expect(web).to_contain_text("Off: never offered in this chat.")
    _send(page, "hello")
    expect(inspector.locator("#hidden-web_search")).to_contain_text(
        "web search is off in this conversation", timeout=10_000
    )

    web.get_by_role("radio", name="Follow · on").check()
    _send(page, "again")
    expect(inspector.locator("#hidden-web_search")).to_have_count(0, timeout=10_000)
    expect(inspector.locator("code", has_text="web_search").first).to_be_visible()

    # Keyboard: from Follow, the arrow key moves to On, then Off, as in any radio group.
    tools.get_by_role("radio", name="Follow · on").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    expect(tools.get_by_role("radio", name="Off", exact=True)).to_be_checked()
    expect(web).to_contain_text("Tools are off, so web search is too.")
    expect(web.get_by_role("radio", name="Follow · off")).to_be_visible()
    # Web search On is sent even with tools off, and both controls say so.
    web.get_by_role("radio", name="On", exact=True).check()
    expect(tools).to_contain_text("Off: this chat sends no tools but web search.")
    expect(web).to_contain_text("On: sent on its own, though tools are off.")
    _send(page, "just search")
    expect(inspector.locator("code", has_text="web_search").first).to_be_visible(timeout=10_000)
    expect(inspector).not_to_contain_text("None: this turn sends no tools.")
    web.get_by_role("radio", name="Follow · off").check()
    expect(tools).to_contain_text("Off: this chat sends no tools.")
    expect(web).to_contain_text("Tools are off, so web search is too.")
    _send(page, "no tools now")
    expect(inspector).to_contain_text("None: this turn sends no tools.", timeout=10_000)

    # The stored intent is what the page opens with.
    page.reload()
    open_options(page)
    expect(tools.get_by_role("radio", name="Off", exact=True)).to_be_checked()
    expect(web.get_by_role("radio", name="Follow · off")).to_be_checked()
    expect(page.get_by_label("Profile")).to_have_value("research")

    tools.get_by_role("radio", name="Follow · on").check()
    _send(page, "tools back")
    expect(inspector).not_to_contain_text("None: this turn sends no tools.", timeout=10_000)
    expect(inspector.locator("#hidden-web_search")).to_have_count(0)
    assert page.console_errors == []


def _answered_by(page):
    return page.locator(".turn-end .answered-by").last


def test_a_message_sent_right_after_a_choice_uses_it_without_a_reload(product, page):
    base, password = product
    open_new_chat(page, base, password)
    chat = page.url
    page.goto(f"{base}/agents/")
    page.get_by_label("New agent").fill("Reader")
    page.get_by_role("button", name="Create").click()
    page.get_by_label("Model").fill("demo-reader")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Agent saved.")).to_be_visible()
    page.goto(chat)
    first = page.locator("#agent option:checked").text_content()
    message = page.get_by_label("Message")
    # A marker the page keeps only if it is never loaded again.
    page.evaluate("window.notReloaded = true")

    # Each choice, then Enter at once: the turn uses what the controls show.
    open_options(page)
    page.get_by_label("Agent", exact=True).select_option(label="Reader")
    message.fill("one")
    message.press("Enter")
    expect(_answered_by(page)).to_have_text("Reader · demo-reader", timeout=20_000)

    open_options(page)
    page.get_by_label("Profile", exact=True).select_option("files")
    page.get_by_label("Model", exact=True).select_option("demo:demo")
    message.fill("two")
    message.press("Enter")
    expect(page.locator(".turn-end")).to_have_count(2, timeout=20_000)
    expect(_answered_by(page)).to_have_attribute("title", re.compile(r"profile files$"))
    # The chat's model, not the agent's demo-reader; a chip says it differs.
    expect(_answered_by(page)).to_have_text("Reader · demo")
    expect(page.get_by_role("button", name="Model: demo")).to_be_visible()

    open_options(page)
    page.get_by_label("Agent", exact=True).select_option(label=first)
    page.get_by_label("Profile", exact=True).select_option("research")
    message.fill("three")
    message.press("Enter")
    expect(page.locator(".turn-end")).to_have_count(3, timeout=20_000)
    # The picker says "(shared)" after an agent everyone has; the answer, its name alone.
    expect(_answered_by(page)).to_contain_text(f"{first.removesuffix(' (shared)')} · ")
    expect(_answered_by(page)).to_have_attribute("title", re.compile(r"profile research$"))
    assert page.evaluate("window.notReloaded") is True

    # The choices were stored as made: a reload shows them.
    page.reload()
    open_options(page)
    expect(page.locator("#agent option:checked")).to_have_text(first)
    expect(page.get_by_label("Profile", exact=True)).to_have_value("research")
    assert page.console_errors == []


def test_a_panel_read_before_a_choice_and_answered_after_it_does_not_undo_the_choice(product, page):
    """Another tab's choice makes this one read its options again; that read is held, as
    a slow network would, while the person here turns plan mode on and sees it confirmed.
    The older panel arriving after must not turn it back off."""
    open_new_chat(page, *product)
    other = page.context.new_page()
    other.goto(page.url)
    open_options(other)
    open_options(page)
    options_url = page.locator("[data-options-url]").get_attribute("data-options-url")
    held, stop = hold_requests(page, f"**{options_url}", lambda request: request.method == "GET")
    other.locator("#tools-off").check()
    late = held_request(page, held)
    read_before = late.fetch()
    stop()

    page.locator("#plan-mode").check()
    expect(page.locator("[data-options-said]")).to_contain_text("plan mode is on")

    def read(request):
        return request.method == "GET" and request.url.endswith(options_url)

    with page.expect_event("requestfinished", read):
        late.fulfill(response=read_before)
    # A turn of the page's own tasks: the answer, read, is drawn or dropped by then.
    page.evaluate("() => new Promise((done) => setTimeout(done))")

    expect(page.locator("#plan-mode")).to_be_checked()
    expect(page.locator("[data-options-said]")).to_contain_text("plan mode is on")
    page.reload()
    open_options(page)
    expect(page.locator("#plan-mode")).to_be_checked()
    expect(page.locator("#tools-off")).to_be_checked()
    assert page.console_errors == []


def test_a_choice_made_in_one_tab_shows_in_the_other_before_it_sends(product, page):
    open_new_chat(page, *product)
    other = page.context.new_page()
    other.goto(page.url)
    expect(other.locator(".inspector h2")).to_have_text("Next turn")
    open_options(other)
    expect(other.locator("#tools-follow")).to_be_checked()

    open_options(page)
    page.locator("#tools-off").check()
    expect(page.locator("#tools-off")).to_be_checked()
    page.locator("#plan-mode").check()

    # Told over its socket, the other tab draws the options as stored, unasked.
    expect(other.locator("#tools-off")).to_be_checked(timeout=10_000)
    expect(other.locator("#plan-mode")).to_be_checked(timeout=10_000)
    expect(other.get_by_role("button", name="Plan mode")).to_be_visible()
    other.get_by_label("Message").fill("from the other tab")
    other.get_by_label("Message").press("Enter")
    expect(other.locator(".turn-end")).to_have_count(1, timeout=20_000)
    inspector = other.get_by_role("complementary", name="Next turn")
    expect(inspector).to_contain_text("None: this turn sends no tools.", timeout=10_000)
    assert page.console_errors == []
