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
    text = CSS.read_text()
    light_block = re.search(r":root\s*{([^}]*)}", text).group(1)
    dark_block = re.search(r"prefers-color-scheme:\s*dark\)\s*{\s*:root\s*{([^}]*)}", text).group(1)

    def colours(block: str) -> dict[str, str]:
        return dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", block))

    light = colours(light_block)
    return {"light": light, "dark": {**light, **colours(dark_block)}}


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
