"""``read``: a text file from the workspace, with line numbers."""

from __future__ import annotations

from toolhub.tools.builtin._workspace import confine, has_workspace, is_binary
from toolhub.tools.context import ToolContext
from toolhub.tools.decorator import function

MAX_FILE_BYTES = 5_000_000


@function(can_use=has_workspace, label="Read file")
def read(path: str, offset: int = 1, limit: int = 2000, *, ctx: ToolContext) -> str:
    """Read a text file in the workspace; lines come numbered.

    Args:
        path: Path relative to the workspace.
        offset: First line to return (1-based).
        limit: Most lines to return.
    """
    target = confine(ctx, path)
    if not target.is_file():
        raise FileNotFoundError(f"{path}: no such file in the workspace")
    if target.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_FILE_BYTES:,} bytes")
    if is_binary(target):
        raise ValueError(f"{path}: binary file")
    lines = target.read_text(encoding="utf-8", errors="replace").splitlines()
    start = max(offset, 1)
    chosen = lines[start - 1 : start - 1 + max(limit, 0)]
    numbered = "\n".join(f"{number:>6}\t{line}" for number, line in enumerate(chosen, start))
    if start - 1 + len(chosen) < len(lines):
        numbered += f"\n… {len(lines) - (start - 1 + len(chosen))} more lines"
    return numbered
