"""Optional semantic ranking for tool_search (filled in with the chosen offline model)."""

from __future__ import annotations

from collections.abc import Sequence

SEMANTIC_WEIGHT = 0.5


class SemanticIndex:
    @classmethod
    def build(cls, documents: Sequence[str]) -> SemanticIndex | None:
        return None

    def similarities(self, query: str) -> list[float]:
        raise NotImplementedError
