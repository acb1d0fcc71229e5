"""``bash``: run a shell command in the workspace, streaming its output.

The command runs with a scrubbed environment inside its own user and PID namespaces
(``unshare``), with a private /proc: it cannot read the server's environment through
``/proc/<parent>/environ``, and when the command ends, times out or is cancelled, the
namespace's init dies and takes every process in it along, even ones that called
``setsid``. Where namespaces are not available the tool is unavailable (layer 4) rather
than run unconfined. Output is kept bounded while it streams: the first part and the last
part, never all of it.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
import os
import shutil
import signal
import subprocess

from toolhub.tools.builtin._workspace import has_workspace, workspace_root
from toolhub.tools.context import TailAccumulator, ToolContext
from toolhub.tools.tool import ToolResult, function

MAX_OUTPUT_CHARS = 30_000
KILL_GRACE_SECONDS = 2.0
_SAFE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb"}
_SANDBOX = (
    "unshare",
    "--user",
    "--map-root-user",
    "--pid",
    "--fork",
    "--mount-proc",
    "--kill-child",
)


@functools.cache
def sandbox_available() -> bool:
    """Whether this machine lets us start the namespace sandbox (checked once)."""
    if shutil.which("unshare") is None:
        return False
    try:
        probe = subprocess.run(  # noqa: S603 (fixed arguments)
            [*_SANDBOX, "true"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


@function(
    requires_approval=True,
    runs_on="worker",
    check_fn=sandbox_available,
    can_use=has_workspace,
    unsafe_in=("plan",),
    max_result_chars=MAX_OUTPUT_CHARS,
    stream_capacity_chars=MAX_OUTPUT_CHARS,
    timeout_min=1,
    timeout_max=3600,
    label="Shell",
)
async def bash(command: str, timeout: int = 120, ctx: ToolContext | None = None) -> ToolResult:
    """Run a bash command in the workspace and return its output and exit code.

    Args:
        command: The command line, run with bash -c.
        timeout: Seconds before the command and everything it started are killed.
    """
    root = workspace_root(ctx)
    process = await asyncio.create_subprocess_exec(
        *_SANDBOX,
        "bash",
        "-c",
        command,
        cwd=root,
        env={**_SAFE_ENV, "HOME": str(root)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    head: list[str] = []
    head_size = 0
    tail = TailAccumulator(MAX_OUTPUT_CHARS // 2)
    try:
        while chunk := await process.stdout.read(65536):
            text = decoder.decode(chunk)
            ctx.update(text)
            if head_size < MAX_OUTPUT_CHARS // 2:
                take = text[: MAX_OUTPUT_CHARS // 2 - head_size]
                head.append(take)
                head_size += len(take)
                text = text[len(take) :]
            tail.append(text)
        code = await process.wait()
    finally:
        await _kill_group(process)
    output = "".join(head)
    if tail.dropped_chars:
        output += f"\n[… {tail.dropped_chars:,} characters omitted …]\n"
    output += tail.text
    summary = f"{output.rstrip()}\n[exit code {code}]".lstrip()
    if code != 0:
        return ToolResult(content=summary, is_error=True, status="error")
    return ToolResult(content=summary)


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    """End the command's whole process group: politely, then for sure."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        if sig is signal.SIGKILL:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(process.wait()), KILL_GRACE_SECONDS)
            if not _group_alive(process.pid):
                return
    with contextlib.suppress(Exception):
        await process.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
