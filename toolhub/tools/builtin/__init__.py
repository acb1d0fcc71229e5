"""The built-in tool pack, one module per tool (or pair of tools).

Importing this package registers every built-in tool in the order of ``MODULES``: that is
the registry order, and so the order of every tool array. Append new tools at the end;
a tuple (not import statements, which formatters sort) keeps the order explicit.

Deferred out of the box (``defer=True``, docs/accounting.md): the tools a chat rarely
calls, ``enter_plan_mode``, ``send_message``, ``list_agents``, ``remember``, ``recall`` and
``calculate``. They stay in the catalog, one line each, and ``tool_search`` loads them.
``exit_plan_mode`` stays resident: it is offered only in plan mode, where it is the way out.
"""

from __future__ import annotations

import importlib

MODULES = (
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
    "plan_mode",
    "send_message",
    "list_agents",
    "memory",
    "current_time",
    "calculate",
)

for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")
