"""Every text colour of the stylesheet against the backgrounds it is used on reaches WCAG
AA (4.5:1 for normal text), in the light theme and in the dark one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSS = Path(__file__).resolve().parents[2] / "static" / "toolhub" / "app.css"
# (text, background) as the stylesheet pairs them.
PAIRS = [
    ("fg", "bg"),
    ("fg", "card"),
    ("muted", "bg"),
    ("muted", "card"),
    ("accent", "bg"),
    ("accent", "card"),
    ("ok", "bg"),
    ("ok", "card"),
    ("fail", "bg"),
    ("fail", "card"),
    ("on-accent", "accent"),
    ("on-accent", "fail"),
]


def _themes() -> dict[str, dict[str, str]]:
    """Each colour of ``:root`` is ``light-dark(<light>, <dark>)``."""
    root = re.search(r":root\s*{([^}]*)}", CSS.read_text()).group(1)
    pairs = re.findall(
        r"--([\w-]+):\s*light-dark\(\s*(#[0-9a-fA-F]{6})\s*,\s*(#[0-9a-fA-F]{6})\s*\)", root
    )
    assert len(pairs) >= 9, "every colour is light-dark(light, dark)"
    return {
        "light": {name: light for name, light, _ in pairs},
        "dark": {name: dark for name, _, dark in pairs},
    }


def _luminance(colour: str) -> float:
    channels = [int(colour[index : index + 2], 16) / 255 for index in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(one: str, other: str) -> float:
    high, low = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_text_colour_reaches_aa_contrast_on_its_backgrounds(theme):
    colours = _themes()[theme]

    failing = {
        f"{text} on {background}": round(_contrast(colours[text], colours[background]), 2)
        for text, background in PAIRS
        if _contrast(colours[text], colours[background]) < 4.5
    }

    assert failing == {}
