"""Browser fixtures: the product served as `make run` serves it, and a Chromium page.

Every test here starts processes (a daphne, Chromium), so the whole directory is marked
``processes``. A module's tests share its product, and the browser tests that run in a
row share one Chromium, each in a context of its own."""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.conftest import ROOT, app_env, daphne, manage
from tests.products import seeded_var_dir

BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextlib.contextmanager
def started_product(**settings: str):
    """The embedded product, seeded and served, with ``settings`` in its environment;
    yields its base URL and the demo password."""
    # Outside pytest's temporary root, which is private to whoever runs the tests: the
    # bash sandbox's user must be able to reach the product's workspaces.
    var_dir = Path(tempfile.mkdtemp(prefix="toolhub-product-"))
    var_dir.chmod(0o711)
    try:
        seed = seeded_var_dir(var_dir)
        with daphne(app_env(var_dir, **settings)) as base:
            yield base, seed.password
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def product():
    with started_product() as started:
        yield started


# Each test's last page, as a screenshot: var/test-output/e2e/<test>.png.
SCREENSHOTS = ROOT / "var" / "test-output" / "e2e"


@pytest.fixture(scope="package")
def browser(chromium_path):
    """One Chromium for the browser tests in a row; each test gets a context of its own
    (cookies, storage and pages apart), as a new browser profile would. It closes when a
    test from elsewhere comes next: Playwright's sync API holds an event loop running on
    the main thread, where the asyncio tests need to run theirs."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=BROWSER_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser, request):
    before = set(browser.contexts)
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
    # An uncaught exception is not a console message: a script that fails to load would
    # otherwise pass every check that reads the page as the server drew it.
    page.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
    page.console_errors = errors
    try:
        yield page
    finally:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^\w.-]+", "_", request.node.name)
        with contextlib.suppress(Exception):
            page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)
        # With every context the test opened (a second tab, an operator's window): an open
        # chat page left behind would go on reconnecting to a product that is gone.
        for opened in [*browser.contexts]:
            if opened not in before:
                opened.close()


@contextlib.contextmanager
def product_with_server(var_dir: Path, add_server: str):
    """A product that connects MCP servers as it starts, with the one ``add_server`` (code
    for ``manage.py shell``) creates; yields its base URL and the demo password."""
    env = app_env(var_dir, TOOLHUB_MCP_CONNECT="1")
    seed = seeded_var_dir(var_dir)
    added = manage("shell", "-c", add_server, env=env)
    assert added.returncode == 0, added.stderr
    with daphne(env) as base:
        yield base, seed.password


def sign_in(page, base: str, password: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/chat/**")


def new_chat(page, base: str) -> None:
    page.goto(f"{base}/chat/")
    page.get_by_role("button", name="New chat").first.click()
    page.wait_for_url(f"{base}/chat/*/")


def open_new_chat(page, base: str, password: str) -> None:
    """Sign in and open a new chat."""
    sign_in(page, base, password)
    new_chat(page, base)


def open_options(page) -> None:
    """Open the chat's options (agent, profile, Tools, Web search, plan mode), which sit
    behind one button of the composer's row, unless they are open already."""
    button = page.get_by_role("button", name="Chat options")
    if button.get_attribute("aria-expanded") != "true":
        button.click()


def hold_requests(page, url: str, keep=lambda request: True) -> tuple[list, Callable[[], None]]:
    """Hold the requests to ``url`` that ``keep`` picks, as a slow network would, until the
    test lets each go (``held_request``); the second value stops holding new ones."""
    held: list = []
    holding = [True]

    def hold(route):
        if holding and keep(route.request):
            held.append(route)
        else:
            route.continue_()

    page.route(url, hold)
    return held, lambda: holding.clear()


def held_request(page, held: list, *, deadline_ms: int = 20_000):
    """The first request a route handler of the test put in ``held``, once it is there.
    Route handlers run while Playwright waits, so this waits a moment at a time."""
    for _ in range(deadline_ms // 20):
        if held:
            return held.pop(0)
        page.wait_for_timeout(20)
    raise AssertionError("the page did not make the request")


def run_command_approved(page, command: str, *, until: str) -> None:
    """Ask the demo model to run ``command`` with bash, allow it, and wait until its
    live tail shows ``until``."""
    page.get_by_label("Message").fill(f"use bash: {command}")
    page.get_by_label("Message").press("Enter")
    page.get_by_role("button", name="Allow once: bash").click(timeout=20_000)
    expect(page.locator(".tool-card pre.tail")).to_contain_text(until, timeout=20_000)


def pytest_collection_modifyitems(items) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.processes)
