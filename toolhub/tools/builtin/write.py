"""``write``: create or replace a file in the workspace."""

from __future__ import annotations

from toolhub.tools.builtin._workspace import confine, has_workspace, relative
from toolhub.tools.context import ToolContext
from toolhub.tools.decorator import function


@function(can_use=has_workspace, unsafe_in=("plan",), label="Write file")
def write(path: str, content: str, *, ctx: ToolContext) -> str:
    """Write a file in the workspace, creating folders as needed; replaces what was there.

    Args:
        path: Path relative to the workspace.
        content: The whole new content of the file.
    """
    target = confine(ctx, path)
    if target.is_dir():
        raise IsADirectoryError(f"{path}: is a folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Re-check after creating folders: a racing symlink must not redirect the write.
    target = confine(ctx, path)
    data = content.encode("utf-8")
    target.write_bytes(data)
    return f"wrote {len(data):,} bytes to {relative(ctx, target)}"
