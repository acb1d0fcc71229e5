"""What a person's model calls used: tokens by model, with prompt-cache reads and writes,
and the estimated cost (``toolhub.lib.prices``), for all their chats or one.

Read from the provider calls every turn stores (``ProviderCall``), in one grouped query;
a chat in the bin still counts until it is purged (its calls go with it). A model with no
known price has no cost (``None``), never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, Sum

from sessions_app.models import ProviderCall
from toolhub.lib.prices import Price, cost_usd

CHATS_LISTED = 20


@dataclass(frozen=True, slots=True)
class Tokens:
    calls: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    # US dollars; None when a model in it has no known price.
    cost: float | None = 0.0

    def __add__(self, other: Tokens) -> Tokens:
        cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        return Tokens(
            self.calls + other.calls,
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            cost,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "input_tokens": self.input,
            "output_tokens": self.output,
            "cache_read_input_tokens": self.cache_read,
            "cache_creation_input_tokens": self.cache_write,
            "cost_usd": None if self.cost is None else round(self.cost, 6),
        }


@dataclass(frozen=True, slots=True)
class ChatUsage:
    session_id: str
    title: str
    deleted: bool
    tokens: Tokens


@dataclass(frozen=True, slots=True)
class Usage:
    by_model: dict[str, Tokens]
    total: Tokens
    chats: list[ChatUsage]

    def to_json(self) -> dict[str, Any]:
        return {
            "by_model": [
                {"model": model, **tokens.to_json()} for model, tokens in self.by_model.items()
            ],
            "total": self.total.to_json(),
            "chats": [
                {
                    "session": chat.session_id,
                    "title": chat.title,
                    "deleted": chat.deleted,
                    **chat.tokens.to_json(),
                }
                for chat in self.chats
            ],
        }


# Calls are grouped by the prices they were made at as well as by model.
PRICED = ("price_input", "price_output")
_SUMS = {
    "calls": Count("id"),
    "input": Sum("input_tokens"),
    "output": Sum("output_tokens"),
    "cache_read": Sum("cache_read_input_tokens"),
    "cache_write": Sum("cache_creation_input_tokens"),
}


def _tokens(row: Mapping[str, Any]) -> Tokens:
    """One group of calls: one model at one price (the calls' own, else the table's)."""
    counts = {key: row[key] or 0 for key in ("input", "output", "cache_read", "cache_write")}
    priced = row["price_input"] is not None and row["price_output"] is not None
    cost = cost_usd(
        price=Price(row["price_input"], row["price_output"]) if priced else None,
        model=row["model"],
        input_tokens=counts["input"],
        output_tokens=counts["output"],
        cache_read=counts["cache_read"],
        cache_write=counts["cache_write"],
    )
    return Tokens(row["calls"], **counts, cost=cost)


def usage_of(*, user: Any, session_id: Any = None) -> Usage:
    """``user``'s usage by model, in total, and for their chats that used the most tokens
    (``CHATS_LISTED``); only ``session_id``'s when given (it must be theirs). Three grouped
    queries, however many chats and calls there are. Each call is priced at the prices it
    was made at (two providers may price one model id apart), else the table's."""
    calls = ProviderCall.objects.filter(session__owner=user)
    if session_id is not None:
        calls = calls.filter(session_id=session_id)
    by_model: dict[str, Tokens] = {}
    for row in calls.values("model", *PRICED).annotate(**_SUMS).order_by("model"):
        name = row["model"] or "unknown"
        by_model[name] = by_model.get(name, Tokens()) + _tokens(row)
    total = sum(by_model.values(), Tokens())
    everything = Sum(
        F("input_tokens")
        + F("output_tokens")
        + F("cache_read_input_tokens")
        + F("cache_creation_input_tokens")
    )
    top = list(
        calls.values("session_id")
        .annotate(total=everything)
        .order_by("-total", "session_id")
        .values_list("session_id", flat=True)[:CHATS_LISTED]
    )
    chats: dict[Any, ChatUsage] = {}
    rows = (
        calls.filter(session_id__in=top)
        .values("session_id", "session__title", "session__deleted", "model", *PRICED)
        .annotate(**_SUMS)
        .order_by("session_id", "model")
    )
    for row in rows:
        known = chats.get(row["session_id"])
        tokens = _tokens(row) if known is None else known.tokens + _tokens(row)
        chats[row["session_id"]] = ChatUsage(
            str(row["session_id"]),
            row["session__title"],
            row["session__deleted"] is not None,
            tokens,
        )
    return Usage(by_model=by_model, total=total, chats=[chats[key] for key in top])
