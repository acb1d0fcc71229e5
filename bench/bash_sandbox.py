"""What the bash sandbox costs: an ``echo hi`` round trip through the bash tool.

Runs ``echo hi`` 100 times (after a warm-up) through ``bash`` in its bubblewrap box, and
100 times through a tool of the same shape that starts the command the way bash did before
the box (``unshare --user --map-root-user --pid --fork --mount-proc --kill-child bash -c``,
in the workspace, with a scrubbed environment), both through ``Tool.execute``. Prints p50
and p99 of each, one line each; never asserted.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toolhub.tools import ToolContext, function, get, sandbox
from toolhub.tools.tool import ToolResult

ROUNDS = 100
WARM_UP = 5
_UNSHARE = ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc")
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb"}


@function(register_globally=False, runs_on="worker")
async def unshare_bash(command: str, ctx: ToolContext | None = None) -> ToolResult:
    """The launch bash used before the sandbox: namespaces, no box.

    Args:
        command: The command line.
    """
    process = await asyncio.create_subprocess_exec(
        *_UNSHARE,
        "--kill-child",
        "bash",
        "-c",
        command,
        cwd=ctx.workspace,
        env={**_ENV, "HOME": str(ctx.workspace)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    output = await process.stdout.read()
    code = await process.wait()
    return ToolResult(content=f"{output.decode().rstrip()}\n[exit code {code}]")


async def _timings(tool, ctx: ToolContext) -> list[float]:
    timings = []
    for round_ in range(WARM_UP + ROUNDS):
        started = time.perf_counter()
        result = await tool.execute({"command": "echo hi"}, ctx)
        elapsed = (time.perf_counter() - started) * 1000
        if result.content != "hi\n[exit code 0]":
            raise SystemExit(f"bash_sandbox: {tool.name} answered {result.content!r}")
        if round_ >= WARM_UP:
            timings.append(elapsed)
    return sorted(timings)


def _line(label: str, timings: list[float]) -> str:
    p50 = timings[len(timings) // 2]
    p99 = timings[max(0, int(len(timings) * 0.99) - 1)]
    return f"bash_sandbox {label} echo_hi n={len(timings)} p50={p50:.1f}ms p99={p99:.1f}ms"


def main() -> None:
    reason = sandbox.unavailable_reason()
    if reason is not None:
        raise SystemExit(f"bash_sandbox: {reason}")
    # Reachable by the box's user (a root process hands the workspace to another uid).
    scratch = Path(tempfile.mkdtemp(prefix="toolhub-bench-bash-"))
    scratch.chmod(0o711)
    try:
        workspace = scratch / "workspace"
        workspace.mkdir()
        ctx = ToolContext(workspace=workspace, env={})
        boxed = asyncio.run(_timings(get("bash"), ctx))
        before = asyncio.run(_timings(unshare_bash, ctx))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(_line("launch=bwrap", boxed))
    print(_line("launch=unshare(before)", before))


if __name__ == "__main__":
    main()
