"""The index behind ``tool_search``: exact selection and ranked search over a fixed set.

An index is built per turn from the tools that turn's resolution allows, so a search can
never surface (or load) a vetoed tool. ``select:a,b`` loads exact names. Any other query
is ranked lexically with BM25 over fields (name tokens split on ``_ - .`` and case, the
description, parameter names and descriptions), after stop-word removal and light
stemming; a query that is exactly a tool's name puts that tool first. Where the optional
embedding model is installed (``toolhub.tools.embeddings``), a semantic ranker runs too
and the two are fused. Ties break by name, so the same query always gives the same answer.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from toolhub.tools import embeddings
from toolhub.tools.tool import Tool

_WORD = re.compile(r"[A-Za-z][a-z]*|[A-Z]+(?![a-z])|\d+")
_K1 = 1.2
_B = 0.75
# Field weights: a word in the name says more about a tool than one in a parameter note.
_NAME_WEIGHT = 3
_DESCRIPTION_WEIGHT = 2
_PARAMETER_WEIGHT = 1
_STOP_WORDS = frozenset(
    (
        "a",
        "an",
        "the",
        "to",
        "of",
        "in",
        "on",
        "for",
        "from",
        "with",
        "by",
        "at",
        "as",
        "is",
        "are",
        "be",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "and",
        "or",
        "not",
        "no",
        "my",
        "me",
        "i",
        "we",
        "our",
        "you",
        "your",
        "them",
        "they",
        "their",
        "what",
        "which",
        "how",
        "do",
        "does",
        "can",
        "please",
        "some",
        "any",
        "all",
        "into",
        "onto",
        "about",
    )
)


def stem(word: str) -> str:
    """A light suffix stripper: plurals, -ing, -ed, -ly; enough to match word forms."""
    for suffix, replacement in (
        ("ies", "y"),
        ("sses", "ss"),
        ("ing", ""),
        ("ed", ""),
        ("ly", ""),
        ("es", ""),
        ("s", ""),
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith("ss"):
                return word
            word = word[: len(word) - len(suffix)] + replacement
            break
    if len(word) > 4 and word[-1] == word[-2] and word[-1] not in "lsz":
        word = word[:-1]
    return word


def tokens(text: str) -> list[str]:
    words = (word.lower() for word in _WORD.findall(text))
    return [stem(word) for word in words if word not in _STOP_WORDS]


def _document(tool: Tool) -> Counter[str]:
    doc: Counter[str] = Counter()
    for word in tokens(tool.name):
        doc[word] += _NAME_WEIGHT
    for word in tokens(tool.description):
        doc[word] += _DESCRIPTION_WEIGHT
    for name, spec in sorted(tool.parameters.get("properties", {}).items()):
        for word in tokens(name) + tokens(str(spec.get("description", ""))):
            doc[word] += _PARAMETER_WEIGHT
    return doc


def document_text(tool: Tool) -> str:
    """The text a semantic ranker embeds for a tool."""
    params = " ".join(
        f"{name.replace('_', ' ')}: {spec.get('description', '')}"
        for name, spec in sorted(tool.parameters.get("properties", {}).items())
    )
    return f"{tool.name.replace('_', ' ')}. {tool.description} {params}".strip()


@dataclass(frozen=True, slots=True)
class SearchHit:
    tool: Tool
    score: float


class ToolIndex:
    """Built once per set of tools; queries only read it."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._order = sorted(self._tools)
        self._docs = {name: _document(self._tools[name]) for name in self._order}
        self._lengths = {name: sum(doc.values()) for name, doc in self._docs.items()}
        self._average = sum(self._lengths.values()) / len(self._lengths) if self._lengths else 1
        frequency: Counter[str] = Counter()
        for doc in self._docs.values():
            frequency.update(doc.keys())
        total = len(self._docs)
        self._idf = {
            term: math.log(1 + (total - seen + 0.5) / (seen + 0.5))
            for term, seen in frequency.items()
        }
        self._postings: dict[str, list[str]] = {}
        for name in self._order:
            for term in self._docs[name]:
                self._postings.setdefault(term, []).append(name)
        self._semantic = embeddings.SemanticIndex.build(
            [document_text(self._tools[name]) for name in self._order]
        )

    @property
    def names(self) -> list[str]:
        return list(self._order)

    @property
    def modes(self) -> tuple[str, ...]:
        return ("lexical", "semantic", "hybrid") if self._semantic else ("lexical",)

    def select(self, names: Sequence[str]) -> tuple[list[Tool], list[str]]:
        """Exact names: (found tools in the order asked, names not in this index)."""
        found, missing = [], []
        for name in dict.fromkeys(name.strip() for name in names if name.strip()):
            if name in self._tools:
                found.append(self._tools[name])
            else:
                missing.append(name)
        return found, missing

    def lexical_scores(self, query: str) -> dict[str, float]:
        scores: dict[str, float] = {}
        for term, weight in Counter(tokens(query)).items():
            idf = self._idf.get(term)
            if idf is None:
                continue
            for name in self._postings[term]:
                freq = self._docs[name][term]
                norm = _K1 * (1 - _B + _B * self._lengths[name] / self._average)
                scores[name] = scores.get(name, 0.0) + weight * idf * freq * (_K1 + 1) / (
                    freq + norm
                )
        return scores

    def search(self, query: str, limit: int = 5, *, mode: str | None = None) -> list[SearchHit]:
        mode = mode or self.modes[-1]
        if mode == "lexical" or not self._semantic:
            scores = self.lexical_scores(query)
        elif mode == "semantic":
            scores = dict(zip(self._order, self._semantic.similarities(query), strict=True))
        else:
            scores = self._fused(query)
        exact = query.strip()
        if exact in self._tools:
            scores[exact] = math.inf
        ranked = sorted(
            (name for name, score in scores.items() if score > 0),
            key=lambda name: (-scores[name], name),
        )
        return [SearchHit(self._tools[name], scores[name]) for name in ranked[: max(limit, 1)]]

    def _fused(self, query: str) -> dict[str, float]:
        """Scale each ranker's scores to [0, 1] over this query and add them, weighted.

        Scores, not ranks, are fused: a ranker that is sure (one clear winner) should
        count for more than one that is not, which rank fusion throws away.
        """
        lexical = self.lexical_scores(query)
        semantic = dict(zip(self._order, self._semantic.similarities(query), strict=True))
        top_lexical = max(lexical.values(), default=0.0) or 1.0
        low, high = min(semantic.values()), max(semantic.values())
        spread = (high - low) or 1.0
        return {
            name: embeddings.SEMANTIC_WEIGHT * (semantic[name] - low) / spread
            + (1 - embeddings.SEMANTIC_WEIGHT) * lexical.get(name, 0.0) / top_lexical
            for name in self._order
        }
