"""``grep``: search workspace files with a regular expression."""

from __future__ import annotations

import re

from toolhub.tools.builtin._workspace import (
    PathEscapeError,
    confine,
    has_workspace,
    is_binary,
    relative,
)
from toolhub.tools.context import ToolContext
from toolhub.tools.tool import function

MAX_FILE_BYTES = 2_000_000


@function(can_use=has_workspace, label="Search files")
def grep(
    pattern: str,
    path: str = ".",
    include: str | None = None,
    ignore_case: bool = False,
    limit: int = 100,
    ctx: ToolContext | None = None,
) -> str:
    """Search text files in the workspace for a regular expression; prints file:line: text.

    Args:
        pattern: Python regular expression.
        path: File or folder to search, relative to the workspace.
        include: Only files whose name matches this glob, such as "*.py".
        ignore_case: Match without regard to case.
        limit: Most matching lines to return.
    """
    regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    start = confine(ctx, path)
    files = [start] if start.is_file() else sorted(start.rglob(include or "*"))
    matches: list[str] = []
    for file in files:
        if include and not file.match(include):
            continue
        try:
            file = confine(ctx, relative(ctx, file))
        except (PathEscapeError, ValueError):
            continue
        if not file.is_file() or file.stat().st_size > MAX_FILE_BYTES or is_binary(file):
            continue
        text = file.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                matches.append(f"{relative(ctx, file)}:{number}: {line}")
                if len(matches) >= limit:
                    return "\n".join(matches) + f"\n… stopped at {limit} matches"
    return "\n".join(matches) if matches else f"no matches for {pattern}"
