"""``grep``: search workspace files with a regular expression.

Patterns are RE2 (google-re2), whose matching time is linear in the text: no pattern a
model writes can make a search backtrack for seconds, as ``(a+)+$`` does in Python's
``re``. The price is RE2's syntax: no backreferences or lookaround, and such a pattern is
refused with that reason. The work per call is bounded too: at most ``MAX_SCAN_BYTES`` of
text are searched, each file at most ``MAX_FILE_BYTES``.
"""

from __future__ import annotations

from typing import Any

import re2

from toolhub.tools.builtin._workspace import (
    PathEscapeError,
    SymlinkLoop,
    confine,
    has_workspace,
    is_binary,
    loops_note,
    relative,
)
from toolhub.tools.context import ToolContext
from toolhub.tools.decorator import function

MAX_FILE_BYTES = 2_000_000
MAX_SCAN_BYTES = 50_000_000
MAX_PATTERN_CHARS = 1_000
# RE2's own memory for a compiled pattern; a pattern needing more is refused.
PATTERN_MEMORY = 8 << 20


def _compile(pattern: str, ignore_case: bool) -> Any:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"pattern longer than {MAX_PATTERN_CHARS} characters")
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    options.max_mem = PATTERN_MEMORY
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args else "invalid"
        raise ValueError(
            f"not a pattern grep can use ({detail}); patterns are RE2 syntax, without "
            "backreferences or lookaround"
        ) from None


@function(can_use=has_workspace, label="Search files")
def grep(
    pattern: str,
    path: str = ".",
    include: str | None = None,
    ignore_case: bool = False,
    limit: int = 100,
    *,
    ctx: ToolContext,
) -> str:
    """Search text files in the workspace for a regular expression; prints file:line: text.

    Args:
        pattern: Regular expression (RE2 syntax: no backreferences or lookaround).
        path: File or folder to search, relative to the workspace.
        include: Only files whose name matches this glob, such as "*.py".
        ignore_case: Match without regard to case.
        limit: Most matching lines to return.
    """
    regex = _compile(pattern, ignore_case)
    start = confine(ctx, path)
    scanned = 0
    files = [start] if start.is_file() else sorted(start.rglob(include or "*"))
    matches: list[str] = []
    loops: list[str] = []
    for file in files:
        if include and not file.match(include):
            continue
        try:
            file = confine(ctx, relative(ctx, file))
        except SymlinkLoop:
            loops.append(relative(ctx, file))
            continue
        except (PathEscapeError, ValueError):
            continue
        if not file.is_file() or file.stat().st_size > MAX_FILE_BYTES or is_binary(file):
            continue
        scanned += file.stat().st_size
        if scanned > MAX_SCAN_BYTES:
            matches.append(f"… stopped after searching {MAX_SCAN_BYTES:,} bytes; narrow the path")
            break
        text = file.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                matches.append(f"{relative(ctx, file)}:{number}: {line}")
                if len(matches) >= limit:
                    matches.append(f"… stopped at {limit} matches")
                    return "\n".join(matches) + loops_note(loops)
    found = "\n".join(matches) if matches else f"no matches for {pattern}"
    return found + loops_note(loops)
