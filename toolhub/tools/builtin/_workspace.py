"""Confinement of path tools to the session's workspace directory.

A path is refused when it is absolute, contains ``..``, contains a NUL byte, or resolves
(following symlinks) outside the workspace. Resolution happens on every call, so a symlink
planted after an earlier call is caught too. A symlink loop is refused by name
(``SymlinkLoop``); tools that walk many paths skip loops and say which.

Errors name workspace paths only: never the host's directory the workspace lives in
(the runtime also scrubs it from any error a tool raises: ``toolhub.tools.context``).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from toolhub.tools.context import ToolContext


class PathEscapeError(ValueError):
    pass


class SymlinkLoop(PathEscapeError):
    """A path whose symlinks lead back to themselves: it names no file."""


def has_workspace(ctx: ToolContext) -> bool:
    return ctx.workspace is not None


def workspace_root(ctx: ToolContext) -> Path:
    if ctx.workspace is None:
        raise PathEscapeError("this session has no workspace")
    root = ctx.workspace.resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def check_relative(path: str) -> PurePosixPath:
    """Refuse, without touching the disk, what can never be a workspace path or pattern."""
    if not path or "\x00" in path:
        raise PathEscapeError("give a non-empty path relative to the workspace")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise PathEscapeError(f"{path}: absolute paths are not allowed; use a workspace path")
    if ".." in pure.parts:
        raise PathEscapeError(f"{path}: '..' is not allowed in workspace paths")
    return pure


def confine(ctx: ToolContext, path: str) -> Path:
    """The resolved absolute path for ``path`` inside the workspace, or PathEscapeError."""
    pure = check_relative(path)
    root = workspace_root(ctx)
    try:
        resolved = (root / pure).resolve()
    except (RuntimeError, OSError):
        # Python raises RuntimeError for a loop (3.12) and OSError ELOOP (3.13+); the
        # message names the host's path, so it is not passed on.
        raise SymlinkLoop(f"{path}: a symlink loop (it leads back to itself)") from None
    if resolved != root and not resolved.is_relative_to(root):
        raise PathEscapeError(f"{path}: leads outside the workspace (through a symlink)")
    return resolved


def relative(ctx: ToolContext, path: Path) -> str:
    return path.relative_to(workspace_root(ctx)).as_posix() or "."


def loops_note(loops: list[str]) -> str:
    """What a walk skipped, for the end of its result."""
    if not loops:
        return ""
    shown = ", ".join(loops[:5]) + (f" and {len(loops) - 5} more" if len(loops) > 5 else "")
    return f"\n(skipped {len(loops)} symlink loop{'s' if len(loops) > 1 else ''}: {shown})"


def is_binary(path: Path) -> bool:
    with path.open("rb") as handle:
        return b"\x00" in handle.read(8192)
