"""Django start-up loads the tool plugins named in TOOLHUB_TOOL_MODULES."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, app_env

pytestmark = pytest.mark.processes

_PROBE = (
    "import django; django.setup(); "
    "from toolhub.tools import registry; "
    "print(registry.names()[-1]); print(registry.load_errors)"
)


def _start(tmp_path, modules: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT,
        env=app_env(
            tmp_path, DJANGO_SETTINGS_MODULE="toolhub.settings", TOOLHUB_TOOL_MODULES=modules
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_a_configured_plugin_module_registers_its_tools_at_start_up(tmp_path):
    result = _start(tmp_path, "tests.integration.plugins.dice")

    assert result.stdout.splitlines() == ["roll_dice", "{}"]
    assert "tool plugin tests.integration.plugins.dice loaded: 1 tools" in result.stderr


def test_a_broken_plugin_module_is_reported_and_the_product_still_starts(tmp_path):
    result = _start(tmp_path, "tests.integration.plugins.missing, tests.integration.plugins.dice")

    assert result.stdout.splitlines()[0] == "roll_dice"
    assert "tests.integration.plugins.missing" in result.stdout.splitlines()[1]
    assert "tool plugin tests.integration.plugins.missing failed to load" in result.stderr
