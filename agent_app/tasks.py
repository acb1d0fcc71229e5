"""Celery tasks of the agent app: thin, they take ids and call one service."""

from __future__ import annotations

from celery import shared_task

from agent_app.turns.runs import run_in_worker


@shared_task(name="toolhub.tool_run", acks_late=True, reject_on_worker_lost=True)
def tool_run(run_id: str) -> None:
    """Run a worker tool's ``ToolRun`` (a redelivered task finds it claimed and returns)."""
    run_in_worker(run_id=run_id)
