"""The settings page as a person uses it in Chromium: a default profile that new chats
start with, and a theme that overrides the system's."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.conftest import SCREENSHOTS, new_chat, open_options, sign_in

LIGHT_BG, DARK_BG = "rgb(247, 247, 248)", "rgb(20, 20, 24)"


def _background(page) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


def _save(page) -> None:
    # The page after a save says so; the one before may say so too (an earlier save).
    with page.expect_navigation():
        page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Settings saved.")).to_be_visible()


def test_a_default_profile_set_in_settings_is_what_a_new_chat_starts_with(product, page):
    base, password = product
    sign_in(page, base, password)
    page.goto(f"{base}/programs/")
    page.get_by_label("New profile").fill("narrow")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_text("Profile narrow created")).to_be_visible()

    page.get_by_role("link", name="Settings").click()
    page.get_by_label("Tool profile").select_option("narrow")
    _save(page)
    expect(page.get_by_label("Tool profile")).to_have_value("narrow")

    new_chat(page, base)
    expect(page.get_by_label("Profile", exact=True)).to_have_value("narrow")
    page.screenshot(path=SCREENSHOTS / "new_chat_with_default_profile.png")

    page.goto(f"{base}/settings/")
    page.get_by_label("Tool profile").select_option("default")
    _save(page)
    assert page.console_errors == []


def test_a_chosen_theme_overrides_the_systems_on_every_page(product, page):
    base, password = product
    sign_in(page, base, password)
    page.emulate_media(color_scheme="light")
    page.goto(f"{base}/settings/")
    assert _background(page) == LIGHT_BG

    page.get_by_label("Dark").check()
    _save(page)
    assert _background(page) == DARK_BG
    page.goto(f"{base}/programs/")
    assert _background(page) == DARK_BG
    page.screenshot(path=SCREENSHOTS / "dark_theme_on_a_light_system.png")

    page.emulate_media(color_scheme="dark")
    page.goto(f"{base}/settings/")
    page.get_by_label("Light").check()
    _save(page)
    assert _background(page) == LIGHT_BG

    page.get_by_label("Follow the system").check()
    _save(page)
    assert _background(page) == DARK_BG
    assert page.console_errors == []


def test_an_agent_with_a_narrower_profile_is_picked_in_the_composer_and_the_inspector_shows_it(
    product, page
):
    base, password = product
    sign_in(page, base, password)
    page.goto(f"{base}/programs/")
    page.get_by_label("New profile").fill("no-shell")
    page.get_by_role("button", name="Create").click()
    for tool in ("bash", "web_fetch"):
        page.get_by_role("button", name=f"Remove {tool}").click()
        expect(page.locator(f"#add-{tool}")).to_be_visible()

    page.get_by_role("link", name="Agents").click()
    page.get_by_label("New agent").fill("Reader")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_text("Agent Reader created")).to_be_visible()
    page.get_by_label("Model").fill("demo-reader")
    page.get_by_label("Tool profile").select_option("no-shell")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Agent saved.")).to_be_visible()
    expect(page.locator("#agent-meter")).to_contain_text("Model demo-reader")
    page.screenshot(path=SCREENSHOTS / "agents_page.png", full_page=True)

    new_chat(page, base)
    page.get_by_label("Message").fill("a draft that survives")
    open_options(page)
    page.locator("label.segment", has_text="Off").first.click()
    page.get_by_label("Agent", exact=True).select_option(label="Reader")
    # Chosen is applied: no page load, the draft and the other choices kept.
    expect(
        page.get_by_role("group", name="Chat options").get_by_text(
            "From your next message, Reader answers."
        )
    ).to_be_visible()
    expect(page.get_by_label("Message")).to_have_value("a draft that survives")
    expect(page.locator("#tools-off")).to_be_checked()
    expect(page.get_by_role("button", name="Tools off")).to_be_visible()  # a chip
    page.locator("label.segment", has_text="Follow").first.click()
    expect(
        page.get_by_role("group", name="Chat options").get_by_text(
            "From your next message, tools follow"
        )
    ).to_be_visible()
    expect(page.get_by_text("Its model: demo-reader")).to_be_visible()
    profile = page.get_by_label("Profile", exact=True)
    expect(profile.locator("option:checked")).to_have_text("no-shell (the agent's)")

    inspector = page.get_by_role("complementary", name="Next turn")
    expect(inspector).to_contain_text("Reader answers, with the model demo-reader.", timeout=10_000)
    resident = inspector.locator("details", has_text="Sent with every message")
    expect(resident.locator("code", has_text="read")).to_have_count(1)
    expect(resident.locator("code", has_text="bash")).to_have_count(0)
    expect(inspector.locator("#hidden-bash")).to_contain_text("removed from the profile 'no-shell'")
    page.screenshot(path=SCREENSHOTS / "agent_picked_in_the_composer.png")
    assert page.console_errors == []


def test_a_long_agent_list_narrows_as_a_name_is_typed_and_a_tool_it_removed_is_gone(product, page):
    base, password = product
    sign_in(page, base, password)
    page.goto(f"{base}/agents/")
    for n in range(9):
        page.get_by_label("New agent").fill(f"helper-{n}")
        with page.expect_navigation():
            page.get_by_role("button", name="Create").click()
    expect(page.get_by_text("Agent helper-8 created")).to_be_visible()
    with page.expect_navigation():
        page.get_by_role("button", name="Remove bash", exact=True).click()
    expect(page.get_by_text("bash removed from helper-8.")).to_be_visible()
    expect(page.locator("#hidden-bash")).to_contain_text("removed by the agent")
    expect(page.get_by_role("button", name="Add back bash")).to_be_visible()

    new_chat(page, base)
    open_options(page)
    finder = page.get_by_label("Find an agent")
    finder.fill("per-8")
    picker = page.get_by_label("Agent", exact=True)
    expect(picker).to_have_value(
        page.locator("#agent option", has_text="helper-8").get_attribute("value")
    )
    # Only the match is left to choose from.
    assert page.locator("#agent option:not([hidden])").all_inner_texts() == ["helper-8"]
    finder.press("Enter")
    expect(
        page.get_by_role("group", name="Chat options").get_by_text(
            "From your next message, helper-8 answers."
        )
    ).to_be_visible()
    inspector = page.get_by_role("complementary", name="Next turn")
    expect(inspector.locator("#hidden-bash")).to_contain_text(
        "removed by the agent", timeout=10_000
    )
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=SCREENSHOTS / "agent_filter_phone.png")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.console_errors == []


def test_a_window_set_on_an_agent_shows_where_it_comes_from_and_an_unknown_one_is_assumed(
    product, page
):
    base, password = product
    sign_in(page, base, password)
    page.goto(f"{base}/agents/")
    page.get_by_label("New agent").fill("Short memory")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_text("Agent Short memory created")).to_be_visible()
    expect(page.locator("#agent-window")).to_contain_text("200,000 tokens, assumed")

    page.get_by_label("Context window (tokens)").fill("a lot")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text("a whole number of tokens")
    page.get_by_label("Context window (tokens)").fill("4,096")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Agent saved.")).to_be_visible()
    expect(page.locator("#agent-window")).to_have_text(
        "Context window: 4,096 tokens, as set on the agent."
    )

    # The demo model's server says nothing: the chat's gauge says its window is assumed.
    new_chat(page, base)
    page.get_by_label("Message").fill("hello")
    page.get_by_label("Message").press("Enter")
    gauge = page.locator("[data-gauge-text]")
    expect(gauge).to_contain_text("of 200,000 tokens", timeout=20_000)
    expect(gauge).to_contain_text("window assumed")
    assert "assumed" in gauge.get_attribute("title")
    # The refused save answered 400, which Chromium logs; nothing else may have failed.
    assert [error for error in page.console_errors if "400 (Bad Request)" not in error] == []


def test_on_a_phone_each_usage_number_says_what_it_counts(product, page):
    base, password = product
    sign_in(page, base, password)
    new_chat(page, base)
    page.get_by_label("Message").fill("hello")
    page.get_by_label("Message").press("Enter")
    expect(page.locator(".turn-end .usage")).to_be_visible(timeout=20_000)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{base}/settings/")

    cells = page.locator("table.usage").first.locator("tbody td")
    expect(cells.first).to_be_visible()
    labels = cells.evaluate_all(
        "cells => cells.map(cell => getComputedStyle(cell, '::before').content)"
    )

    assert labels[:6] == [
        '"Calls: "',
        '"Input: "',
        '"Output: "',
        '"Cache read: "',
        '"Cache write: "',
        '"Est. cost: "',
    ]
    assert page.console_errors == []
