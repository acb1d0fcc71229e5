"""Celery tasks of the agent app: thin, they take ids and call one service."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.concurrency import get_implementation
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.signals import worker_init, worker_process_init

from agent_app.mcp import mcp_start
from agent_app.turns.worker import run_in_task
from toolhub.tools.sandbox import reap_orphan_sandboxes

logger = logging.getLogger(__name__)


def _connect_mcp_in_child(**_: object) -> None:
    # Each prefork child connects its own MCP servers (a thread does not survive a fork).
    mcp_start()


@worker_init.connect
def _connect_mcp_in_worker(sender: Any = None, **_: object) -> None:
    # Pools that run tasks in the main process (solo, threads) connect there instead.
    pool = get_implementation(getattr(sender, "pool_cls", "prefork"))
    if not issubclass(pool, PreforkPool):
        mcp_start()
        return
    # Connected here, not at import: Celery's Django fixup connects its own child receiver
    # at worker_init, before this runs, and receivers run in that order. So in each child
    # the fixup first drops the database pool inherited through the fork (its threads did
    # not survive it), and only then does the MCP thread read the server table, through a
    # pool of the child's own. The other order read through a pool being closed under it.
    worker_process_init.connect(_connect_mcp_in_child, weak=False, dispatch_uid="toolhub-mcp")


@worker_init.connect
@worker_process_init.connect
def _reap_orphan_sandboxes(**_: object) -> None:
    # bash boxes left by a worker that died before --die-with-parent could act (the new
    # child of a prefork pool looks too: it replaces one that may have been killed).
    if reaped := reap_orphan_sandboxes():
        logger.warning("killed %d orphaned bash sandbox process(es): %s", len(reaped), reaped)


@shared_task(name="toolhub.tool_run", acks_late=True, reject_on_worker_lost=True)
def tool_run(run_id: str) -> None:
    """Run a worker tool's ``ToolRun`` (a redelivered task finds it claimed and returns)."""
    run_in_task(run_id=run_id)
