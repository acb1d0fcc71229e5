"""``usd``: an estimated cost as pages show it (``toolhub.lib.prices.usd_text``)."""

from __future__ import annotations

from django import template

from toolhub.lib.prices import usd_text

register = template.Library()


@register.filter
def usd(cost: float | None) -> str:
    return usd_text(cost)
