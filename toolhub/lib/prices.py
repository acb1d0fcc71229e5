"""What model calls cost, estimated from their token counts: US dollars per million
tokens, by model family, as Anthropic lists them (anthropic.com/pricing, late 2025).

A prompt-cache write costs 1.25 times the input price (five-minute cache) and a cache
read 0.1 times. A model not listed here has no estimate (``None``), never a guess; the
offline demo model costs nothing. Estimates only: the provider's invoice is the truth.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Price:
    input: float
    output: float


# Longest prefix first. Opus prices changed between releases, so only the ones listed
# are known; every Sonnet 4 release has had the same price.
PRICES: tuple[tuple[str, Price], ...] = (
    ("claude-opus-4-5", Price(5.0, 25.0)),
    ("claude-opus-4-1", Price(15.0, 75.0)),
    ("claude-opus-4-0", Price(15.0, 75.0)),
    ("claude-opus-4-2025", Price(15.0, 75.0)),
    ("claude-sonnet-4", Price(3.0, 15.0)),
    ("claude-3-7-sonnet", Price(3.0, 15.0)),
    ("claude-3-5-sonnet", Price(3.0, 15.0)),
    ("claude-haiku-4", Price(1.0, 5.0)),
    ("claude-3-5-haiku", Price(0.8, 4.0)),
)
# The offline demo model, by its exact name: "demo-reader" on a real server is unknown.
DEMO = "demo"
CACHE_WRITE = 1.25
CACHE_READ = 0.1


def price_of(model: str) -> Price | None:
    if model == DEMO:
        return Price(0.0, 0.0)
    return next((price for prefix, price in PRICES if model.startswith(prefix)), None)


def cost_usd(
    *,
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_read: int = 0,
    cache_write: int = 0,
    price: Price | None = None,
) -> float | None:
    """The estimated cost of calls to ``model`` with these token counts, at ``price`` (a
    provider's own, docs/models.md) or the table's; ``None`` when neither knows."""
    price = price or price_of(model)
    if price is None:
        return None
    billed_input = input_tokens + cache_write * CACHE_WRITE + cache_read * CACHE_READ
    return (billed_input * price.input + output_tokens * price.output) / 1_000_000


def usd_text(cost: float | None) -> str:
    """An estimated cost as a person reads it: "unknown" without a price, "free" for
    nothing, "under $0.0001" for less than rounding shows, never "$0.0000"."""
    if cost is None:
        return "unknown"
    if cost == 0:
        return "free"
    if cost < 0.0001:
        return "under $0.0001"
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"
