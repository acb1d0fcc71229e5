"""Worker tools for the worker tests. A real Celery worker loads this module through
``TOOLHUB_TOOL_MODULES``; the test process registers the same tools for its turns. Side
effects go to files named in the arguments, so a test sees what ran in another process."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from toolhub.tools import ToolContext, function


@function(runs_on="worker", timeout=120)
async def chatter(lines: int = 100, ctx: ToolContext | None = None) -> str:
    """Print numbered lines as fast as possible.

    Args:
        lines: How many lines to print.
    """
    for number in range(lines):
        ctx.update(f"line {number} {time.time():.6f}\n")
        if number % 200 == 0:
            await asyncio.sleep(0)
    return f"printed {lines} lines"


@function(runs_on="worker", timeout=300, stream_capacity_chars=4_000)
async def flood(megabytes: int = 50, ctx: ToolContext | None = None) -> str:
    """Print this many megabytes of output.

    Args:
        megabytes: How much to print.
    """
    chunk = ("x" * 1023 + "\n") * 64
    for number in range(megabytes * 16):
        ctx.update(chunk)
        if number % 16 == 0:
            await asyncio.sleep(0)
    return f"printed {megabytes} MB"


@function(runs_on="worker", timeout=120)
async def sleeper(
    seconds: float = 30, marker: str = "", tally: str = "", ctx: ToolContext | None = None
) -> str:
    """Sleep, printing a line a second; on cancel, note the cleanup in ``marker``.

    Args:
        seconds: How long to sleep.
        marker: A file that records the cleanup.
        tally: A file that gets a line each time the tool starts.
    """
    if tally:
        with open(tally, "a") as file:  # noqa: ASYNC230 (a test's side effect)
            file.write("ran\n")
    try:
        for second in range(int(seconds)):
            ctx.update(f"second {second}\n")
            await asyncio.sleep(1)
    finally:
        if marker:
            Path(marker).write_text("cleaned up")  # noqa: ASYNC240 (a test's side effect)
    return "slept"


@function(runs_on="worker", timeout=1)
async def napper(marker: str = "") -> str:
    """Sleep longer than its one-second timeout allows; note the cleanup in ``marker``.

    Args:
        marker: A file that records the cleanup.
    """
    try:
        await asyncio.sleep(60)
    finally:
        if marker:
            Path(marker).write_text("cleaned up")  # noqa: ASYNC240 (a test's side effect)
    return "woke"


@function(runs_on="worker", timeout=1)
async def blocker(seconds: float = 20) -> str:
    """Block its event loop, ignoring every cancel, for this long.

    Args:
        seconds: How long to block.
    """
    time.sleep(seconds)  # noqa: ASYNC251 (blocking is what this tool is for)
    return "unblocked"


@function(runs_on="worker")
def tally(path: str) -> str:
    """Append a line to ``path`` (counts how often it really ran).

    Args:
        path: The file to append to.
    """
    with open(path, "a") as file:
        file.write("ran\n")
    return "tallied"


TOOLS = [chatter, flood, sleeper, napper, blocker, tally]


@function(runs_on="worker", timeout=60)
async def whoami(seconds: float = 1.0) -> str:
    """Say which worker process ran this call, after a pause (so calls overlap).

    Args:
        seconds: How long to pause first.
    """
    await asyncio.sleep(seconds)
    return f"worker pid {os.getpid()}"
