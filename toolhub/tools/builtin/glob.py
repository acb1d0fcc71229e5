"""``glob``: find workspace files by pattern."""

from __future__ import annotations

from toolhub.tools.builtin._workspace import (
    PathEscapeError,
    SymlinkLoop,
    check_relative,
    confine,
    has_workspace,
    loops_note,
    relative,
    workspace_root,
)
from toolhub.tools.context import ToolContext
from toolhub.tools.decorator import function


@function(can_use=has_workspace, label="Find files")
def glob(pattern: str, limit: int = 200, *, ctx: ToolContext) -> str:
    """List workspace files matching a glob pattern such as "**/*.py", sorted by path.

    Args:
        pattern: Glob pattern relative to the workspace.
        limit: Most paths to return.
    """
    check_relative(pattern)
    root = workspace_root(ctx)
    found: list[str] = []
    loops: list[str] = []
    for match in sorted(root.glob(pattern)):
        try:
            inside = confine(ctx, relative(ctx, match))
        except SymlinkLoop:
            loops.append(relative(ctx, match))
            continue
        except (PathEscapeError, ValueError):
            continue
        if inside.is_file():
            found.append(relative(ctx, match))
    if not found:
        return f"no files match {pattern}" + loops_note(loops)
    shown = found[: max(limit, 1)]
    more = f"\n… {len(found) - len(shown)} more" if len(found) > len(shown) else ""
    return "\n".join(shown) + more + loops_note(loops)
