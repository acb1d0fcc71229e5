"""The index behind ``tool_search``: exact selection and lexical ranking over a fixed set.

An index is built per turn from the tools that turn's resolution allows, so a search can
never surface (or load) a vetoed tool. ``select:a,b`` loads exact names; any other query is
ranked with BM25 over name tokens, description and parameter text, ties by name, so the
same query always gives the same answer.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from toolhub.tools.tool import Tool

_TOKEN = re.compile(r"[a-z0-9]+")
_K1 = 1.2
_B = 0.75


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower().replace("_", " ").replace("-", " "))


def _document(tool: Tool) -> list[str]:
    words = tokens(tool.name) * 3 + tokens(tool.label) + tokens(tool.description)
    for name, spec in sorted(tool.parameters.get("properties", {}).items()):
        words += tokens(name) + tokens(str(spec.get("description", "")))
    return words


@dataclass(frozen=True, slots=True)
class SearchHit:
    tool: Tool
    score: float


class ToolIndex:
    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._docs = {name: Counter(_document(tool)) for name, tool in self._tools.items()}
        self._lengths = {name: sum(doc.values()) for name, doc in self._docs.items()}
        self._average = (sum(self._lengths.values()) / len(self._lengths)) if self._lengths else 0
        frequency: Counter[str] = Counter()
        for doc in self._docs.values():
            frequency.update(doc.keys())
        total = len(self._docs)
        self._idf = {
            term: math.log(1 + (total - count + 0.5) / (count + 0.5))
            for term, count in frequency.items()
        }

    @property
    def names(self) -> list[str]:
        return sorted(self._tools)

    def select(self, names: Sequence[str]) -> tuple[list[Tool], list[str]]:
        """Exact names: (found tools in the order asked, names not in this index)."""
        found, missing = [], []
        for name in dict.fromkeys(name.strip() for name in names if name.strip()):
            (found.append(self._tools[name]) if name in self._tools else missing.append(name))
        return found, missing

    def search(self, query: str, limit: int = 5) -> list[SearchHit]:
        terms = tokens(query)
        scored = []
        for name, doc in self._docs.items():
            score = 0.0
            norm = _K1 * (1 - _B + _B * self._lengths[name] / (self._average or 1))
            for term in terms:
                freq = doc.get(term, 0)
                if freq:
                    score += self._idf[term] * freq * (_K1 + 1) / (freq + norm)
            if score > 0:
                scored.append(SearchHit(self._tools[name], score))
        scored.sort(key=lambda hit: (-hit.score, hit.tool.name))
        return scored[: max(limit, 1)]
