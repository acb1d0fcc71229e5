"""The words of tool_search: tokenizing, stemming, and the BM25F ranker over tool fields.

A tool is one document of field-weighted words: its name and title (``NAME_WEIGHT``), its
description (``DESCRIPTION_WEIGHT``), its parameter names and descriptions and any
phrasings a model wrote for it (``PARAMETER_WEIGHT``). ``Lexical`` scores a query's words
against them with BM25.

Invariants: pure Python unless a caller hands in numpy (``Lexical.vector``, for the
semantic ranker, which has it): the lexical ranker runs where numpy is not installed; a score
depends only on the index and the query, never on an earlier query; every contribution
a term makes to a tool is computed once, when the index is made, so a query costs one
addition per posting and nothing more (at 10,000 tools a common word has thousands).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from toolhub.tools import phrasings
from toolhub.tools.tool import Tool

WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_K1 = 1.2
_B = 0.75
# Field weights: a word in the name says more about a tool than one in a parameter note.
NAME_WEIGHT = 3
DESCRIPTION_WEIGHT = 2
PARAMETER_WEIGHT = 1
STOP_WORDS = frozenset(
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
    """A light stemmer (plurals, -ing, -ed, a final e, doubled consonants), enough for
    word forms to meet: files/file, batches/batch, created/creating/create."""
    if len(word) > 3:
        if word.endswith("ies") and len(word) > 4:
            word = word[:-3] + "y"
        elif word.endswith(("ches", "shes", "sses", "xes", "zes")):
            word = word[:-2]
        elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
            word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]
    return word


def tokens(text: str) -> list[str]:
    words = (word.lower() for word in WORD.findall(text))
    return [stem(word) for word in words if word not in STOP_WORDS]


def title(tool: Tool) -> str:
    """A title that says more than the name (an MCP tool's ``title``), else nothing."""
    label = " ".join(tool.label.split())
    return label if tokens(label) != tokens(tool.name) else ""


def document(tool: Tool) -> Counter[str]:
    """A tool's words, each counted as often as it occurs times its field's weight."""
    doc: Counter[str] = Counter()
    for word in tokens(tool.name) + tokens(title(tool)):
        doc[word] += NAME_WEIGHT
    for word in tokens(tool.description):
        doc[word] += DESCRIPTION_WEIGHT
    for name, spec in sorted(tool.parameters.get("properties", {}).items()):
        for word in tokens(name) + tokens(str(spec.get("description", ""))):
            doc[word] += PARAMETER_WEIGHT
    # How people ask for it, written by a model (phrasings): weighed as parameter text.
    for word in tokens(phrasings.known(tool)):
        doc[word] += PARAMETER_WEIGHT
    return doc


class Lexical:
    """BM25 over field-weighted documents, addressed by row: per term, the rows that have
    it and what it adds to each (idf times the saturated, length-normalized frequency)."""

    def __init__(self, docs: Sequence[Counter[str]]) -> None:
        lengths = [sum(doc.values()) for doc in docs]
        average = sum(lengths) / len(docs) if docs else 1.0
        seen: Counter[str] = Counter()
        for doc in docs:
            seen.update(doc.keys())
        self.idf = {
            term: math.log(1 + (len(docs) - count + 0.5) / (count + 0.5))
            for term, count in seen.items()
        }
        self._postings: dict[str, list[tuple[int, float]]] = {}
        # The postings as numpy arrays, made at the first ``vector`` (numpy is optional).
        self._arrays: dict[str, tuple[Any, Any]] | None = None
        for row, (doc, length) in enumerate(zip(docs, lengths, strict=True)):
            norm = _K1 * (1 - _B + _B * length / average)
            for term, freq in doc.items():
                gain = self.idf[term] * freq * (_K1 + 1) / (freq + norm)
                self._postings.setdefault(term, []).append((row, gain))

    def scores(self, terms: Mapping[str, float]) -> dict[int, float]:
        """Each row's BM25 for ``terms`` (each weighed by its value); rows sharing no term
        are absent."""
        scores: dict[int, float] = {}
        get = scores.get
        for term, weight in terms.items():
            for row, gain in self._postings.get(term, ()):
                scores[row] = get(row, 0.0) + weight * gain
        return scores

    def postings(self, term: str) -> list[tuple[int, float]]:
        """The rows that have ``term``, each with what it adds to their score."""
        return self._postings.get(term, [])

    def vector(self, np: Any, terms: Mapping[str, float], count: int) -> Any:
        """``scores`` as a numpy vector over all ``count`` rows (0 where no term is shared;
        a shared term always adds more than 0, its idf being positive)."""
        if self._arrays is None:
            self._arrays = {
                term: (
                    np.array([row for row, _ in postings], dtype=np.intp),
                    np.array([gain for _, gain in postings]),
                )
                for term, postings in self._postings.items()
            }
        scores = np.zeros(count)
        for term, weight in terms.items():
            if term in self._arrays:
                rows, gains = self._arrays[term]
                # A term's rows are distinct, so one fancy-indexed addition is exact.
                scores[rows] += weight * gains
        return scores
