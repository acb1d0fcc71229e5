"""The chat page when its server dies mid-turn and comes back on the same address: the
page reconnects, shows the turn ended (the running card says lost, an alert says why),
hides Stop, and takes the next message — nobody has to press Stop."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest import app_env, daphne, free_port
from tests.e2e.conftest import open_new_chat, run_command_approved
from tests.products import seeded_var_dir

MARKER = f"{time.time_ns() % 1_000_000}.75"


@pytest.fixture
def restartable(bubblewrap):
    """The embedded product (SQLite, in-process tools, the demo model) and what it takes
    to serve it again on the same port."""
    var_dir = Path(tempfile.mkdtemp(prefix="toolhub-restart-"))
    var_dir.chmod(0o711)
    env = app_env(var_dir, TOOLHUB_TURN_LOST_AFTER="6")
    try:
        yield env, var_dir, seeded_var_dir(var_dir).password, free_port()
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)


def test_a_chat_whose_server_died_mid_turn_shows_the_turn_lost_and_takes_the_next_message(
    restartable, page
):
    env, var_dir, password, port = restartable
    started: list[subprocess.Popen] = []
    with daphne(env, log=var_dir / "before.log", started=started, port=port) as base:
        open_new_chat(page, base, password)
        run_command_approved(page, f"echo started; sleep {MARKER}", until="started")
        card = page.locator(".tool-card")
        expect(page.get_by_role("button", name="Stop")).to_be_visible()
        started[0].kill()
        started[0].wait()

    with daphne(env, log=var_dir / "after.log", port=port):
        expect(card).to_have_attribute("data-status", "lost", timeout=30_000)
        expect(page.get_by_role("alert")).to_contain_text("server running this turn stopped")
        expect(page.get_by_role("button", name="Stop")).to_be_hidden()

        answers = page.locator(".bubble.assistant")
        # The demo model's "Calling bash." before the tool; the next answer comes after it.
        expect(answers).to_have_count(1)
        page.get_by_label("Message").fill("hello again")
        page.get_by_label("Message").press("Enter")
        expect(answers).to_have_count(2, timeout=20_000)
        expect(page.get_by_role("button", name="Stop")).to_be_hidden(timeout=20_000)
        expect(page.get_by_role("alert")).to_have_count(1)
