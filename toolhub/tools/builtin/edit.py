"""``edit``: exact string replacement in a workspace file."""

from __future__ import annotations

from toolhub.tools.builtin._workspace import confine, has_workspace, relative
from toolhub.tools.context import ToolContext
from toolhub.tools.decorator import function


@function(can_use=has_workspace, unsafe_in=("plan",), label="Edit file")
def edit(
    path: str,
    old_string: str,
    new_string: str,
    replace_all: bool = False,
    *,
    ctx: ToolContext,
) -> str:
    """Replace an exact string in a workspace file.

    The old string must occur exactly once unless replace_all is set.

    Args:
        path: Path relative to the workspace.
        old_string: Text to find, exactly as it appears in the file.
        new_string: Text to put in its place.
        replace_all: Replace every occurrence instead of exactly one.
    """
    if old_string == new_string:
        raise ValueError("old_string and new_string are the same")
    if not old_string:
        raise ValueError("old_string must not be empty")
    target = confine(ctx, path)
    if not target.is_file():
        raise FileNotFoundError(f"{path}: no such file in the workspace")
    text = target.read_text(encoding="utf-8")
    count = text.count(old_string)
    if count == 0:
        raise ValueError(f"{path}: old_string was not found")
    if count > 1 and not replace_all:
        raise ValueError(
            f"{path}: old_string occurs {count} times; add context to make it unique "
            "or set replace_all"
        )
    target.write_text(text.replace(old_string, new_string), encoding="utf-8")
    return f"replaced {count if replace_all else 1} occurrence(s) in {relative(ctx, target)}"
