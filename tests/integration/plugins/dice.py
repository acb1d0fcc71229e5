"""A plugin module for the start-up loading test: one tool, registered on import."""

from __future__ import annotations

from toolhub.tools import function


@function
def roll_dice(sides: int = 6) -> str:
    """Roll a die with the given number of sides."""
    return f"d{sides}"
