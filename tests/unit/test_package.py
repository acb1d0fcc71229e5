"""toolhub.tools stands on its own: no Django, and the built-in pack registers on import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

BUILTINS = [
    "read",
    "write",
    "edit",
    "glob",
    "grep",
    "bash",
    "web_fetch",
    "web_search",
    "tool_search",
    "ask_user_question",
    "enter_plan_mode",
    "exit_plan_mode",
    "send_message",
    "list_agents",
    "remember",
    "recall",
    "current_time",
    "calculate",
]


@pytest.mark.processes
def test_importing_the_runtime_loads_neither_django_nor_celery():
    probe = (
        "import sys, toolhub.tools; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'celery'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == "[]"


def test_every_builtin_tool_registers_at_import_in_a_fixed_order():
    from toolhub.tools import registry

    assert registry.names()[: len(BUILTINS)] == BUILTINS


def test_bash_is_a_worker_tool_that_asks_for_approval():
    from toolhub.tools import ToolContext, get

    bash = get("bash")

    assert bash.runs_on == "worker"
    assert bash.needs_approval({"command": "ls"}, ToolContext())
