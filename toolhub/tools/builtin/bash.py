"""``bash``: run a shell command in the session's sandbox, streaming its output.

Every command runs in a bubblewrap box of its own (``toolhub.tools.sandbox``): only the
workspace is writable, nothing on the host or the network is reachable, and CPU, memory,
processes and file size are limited. Where no box can start, the tool is unavailable
(layer 4, with the reason) and never runs a command unconfined.

The whole box ends with the call: when the command exits, times out, is cancelled, or
prints more than the output limit, bwrap is killed and the kernel takes every process in
the box along. bwrap's ``--die-with-parent`` fires when the *thread* that started it
ends; the box is started from the tool's event-loop thread, which outlives the call,
and the call never returns before the box is dead. Output is kept bounded while it
streams: the first part and the last part, never all of it.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal

from toolhub.tools import sandbox
from toolhub.tools.builtin._workspace import has_workspace, workspace_root
from toolhub.tools.context import TailAccumulator, ToolContext
from toolhub.tools.tool import ToolResult, ToolUnavailable, function

MAX_OUTPUT_CHARS = 30_000
# A killed box is gone within milliseconds; this only bounds a wait that should not hang.
KILL_WAIT_SECONDS = 5.0
# What the box's limits look like from outside: killed by SIGXFSZ or SIGXCPU.
_LIMIT_EXITS = {
    128 + signal.SIGXFSZ: "the file size limit",
    128 + signal.SIGXCPU: "the CPU time limit",
}


def sandbox_ready() -> bool:
    """Layer 4: whether a box can start here; raises with the reason when not."""
    reason = sandbox.unavailable_reason()
    if reason is not None:
        raise ToolUnavailable(reason)
    return True


@function(
    requires_approval=True,
    runs_on="worker",
    check_fn=sandbox_ready,
    can_use=has_workspace,
    unsafe_in=("plan",),
    max_result_chars=MAX_OUTPUT_CHARS,
    stream_capacity_chars=MAX_OUTPUT_CHARS,
    timeout_min=1,
    timeout_max=3600,
    label="Shell",
)
async def bash(command: str, timeout: int = 120, *, ctx: ToolContext) -> ToolResult:
    """Run a bash command in the workspace and return its output and exit code. It runs
    in a sandbox: only the workspace (/workspace) is writable, and there is no network.

    Args:
        command: The command line, run with bash -c in /workspace.
        timeout: Seconds before the command and everything it started are killed.
    """
    root = workspace_root(ctx)
    output_limit = sandbox.config().output_bytes
    await asyncio.to_thread(sandbox.hand_over, root)
    with sandbox.launch(root, ("bash", "-c", command)) as box:
        process = await asyncio.create_subprocess_exec(
            *box.args,
            **box.popen_kwargs(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    head: list[str] = []
    head_size = 0
    tail = TailAccumulator(MAX_OUTPUT_CHARS // 2)
    printed = 0
    try:
        stdout = process.stdout
        assert stdout is not None, "started with stdout=PIPE"
        while printed <= output_limit and (chunk := await stdout.read(65536)):
            chunk = chunk[: output_limit + 1 - printed]
            printed += len(chunk)
            text = decoder.decode(chunk)
            ctx.update(text)
            if head_size < MAX_OUTPUT_CHARS // 2:
                take = text[: MAX_OUTPUT_CHARS // 2 - head_size]
                head.append(take)
                head_size += len(take)
                text = text[len(take) :]
            tail.append(text)
        if printed <= output_limit:
            await process.wait()
    finally:
        await _end_box(process)
    output = "".join(head)
    if tail.dropped_chars:
        output += f"\n[… {tail.dropped_chars:,} characters omitted …]\n"
    output += tail.text
    code = process.returncode
    if printed > output_limit:
        ending = f"[stopped: more than {output_limit / 2**20:g} MiB of output]"
    elif code in _LIMIT_EXITS:
        ending = f"[exit code {code}: stopped at {_LIMIT_EXITS[code]}]"
    else:
        ending = f"[exit code {code}]"
    summary = f"{output.rstrip()}\n{ending}".lstrip()
    if printed > output_limit or code != 0:
        return ToolResult(content=summary, is_error=True, status="error")
    return ToolResult(content=summary)


async def _end_box(process: asyncio.subprocess.Process) -> None:
    """Kill the box's bwrap processes at once (its process group); with bwrap, the box's
    pid 1, the kernel kills everything else in the box. Then read the output pipe to its
    end: asyncio only reports the exit once the pipe is closed, and a reader that stopped
    at the output limit would otherwise wait forever."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)

    async def drain() -> None:
        stdout = process.stdout
        assert stdout is not None, "started with stdout=PIPE"
        while await stdout.read(65536):
            pass
        await process.wait()

    with contextlib.suppress(Exception):
        await asyncio.wait_for(drain(), KILL_WAIT_SECONDS)
