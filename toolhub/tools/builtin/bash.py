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
from dataclasses import dataclass, field

from toolhub.tools import sandbox
from toolhub.tools.builtin._workspace import has_workspace, workspace_root
from toolhub.tools.context import TailAccumulator, ToolContext
from toolhub.tools.decorator import function
from toolhub.tools.tool import ToolResult, ToolUnavailable

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
    output = _Output()
    try:
        await _read(process, output, ctx=ctx, limit=output_limit)
    finally:
        await _end_box(process)
    return _result(output, code=process.returncode, limit=output_limit)


@dataclass(slots=True)
class _Output:
    """What a box printed, kept bounded while it streams: the first part and the last
    part, never all of it, and how many bytes it printed in all."""

    head: list[str] = field(default_factory=list)
    head_size: int = 0
    tail: TailAccumulator = field(default_factory=lambda: TailAccumulator(MAX_OUTPUT_CHARS // 2))
    printed: int = 0

    def add(self, text: str) -> None:
        if self.head_size < MAX_OUTPUT_CHARS // 2:
            take = text[: MAX_OUTPUT_CHARS // 2 - self.head_size]
            self.head.append(take)
            self.head_size += len(take)
            text = text[len(take) :]
        self.tail.append(text)

    def text(self) -> str:
        output = "".join(self.head)
        if self.tail.dropped_chars:
            output += f"\n[… {self.tail.dropped_chars:,} characters omitted …]\n"
        return output + self.tail.text


async def _read(
    process: asyncio.subprocess.Process, output: _Output, *, ctx: ToolContext, limit: int
) -> None:
    """Stream the box's output to the call's tail and keep it in ``output``, until the
    command exits or has printed more than ``limit`` bytes."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    stdout = process.stdout
    assert stdout is not None, "started with stdout=PIPE"
    while output.printed <= limit and (chunk := await stdout.read(65536)):
        chunk = chunk[: limit + 1 - output.printed]
        output.printed += len(chunk)
        text = decoder.decode(chunk)
        ctx.update(text)
        output.add(text)
    if output.printed <= limit:
        await process.wait()


def _result(output: _Output, *, code: int | None, limit: int) -> ToolResult:
    """The output and how the command ended; an error unless it exited with 0."""
    if output.printed > limit:
        ending = f"[stopped: more than {limit / 2**20:g} MiB of output]"
    elif code in _LIMIT_EXITS:
        ending = f"[exit code {code}: stopped at {_LIMIT_EXITS[code]}]"
    else:
        ending = f"[exit code {code}]"
    summary = f"{output.text().rstrip()}\n{ending}".lstrip()
    if output.printed > limit or code != 0:
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
