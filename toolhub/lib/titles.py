"""A chat's title from its first message: pure text, no state.

Both the turn (which titles a new chat as it claims it) and the chat services (which keep
a model-written title only while the chat still has the one its first message gave it)
compute it, so it lives below both, and the two always agree.
"""

from __future__ import annotations

AUTO_TITLE_CHARS = 60


def title_from(text: str) -> str:
    """A new chat's title from its first message: one line, cut at a word with an
    ellipsis when longer than ``AUTO_TITLE_CHARS``."""
    line = " ".join(text.split())
    if len(line) <= AUTO_TITLE_CHARS:
        return line
    cut = line[: AUTO_TITLE_CHARS - 1]
    if " " in cut[AUTO_TITLE_CHARS // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:-") + "…"
