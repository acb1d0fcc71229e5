"""The index behind ``tool_search``: exact selection and ranked search over a fixed set.

An index is built per turn from the tools that turn's resolution allows, so a search can
never surface (or load) a vetoed tool. ``select:a,b`` loads exact names. Any other query
is ranked lexically with BM25 over fields (name tokens split on ``_ - .`` and case, the
description, parameter names and descriptions), after stop-word removal and light
stemming; a query that is exactly a tool's name puts that tool first. Where the optional
embedding model is installed (``toolhub.tools.embeddings``), a semantic ranker runs too
(sentence and token similarity, each standardized over the index, then mixed) and the two
rankers are fused. Ties break by name, so the same query always gives the same answer.

A ranked query must clear a relevance floor before it finds anything. Without the model,
some tool must share a word with it. With the model, its closest tool by sentence
similarity must reach ``RELEVANCE_FLOOR``, and the match must be anchored: the query shares
a word with some tool, or that tool is ``CLOSE_MATCH`` similar, or it leads the runner-up
(and ``embeddings.MIN_SIMILARITY``, where unrelated text sits) by ``STANDOUT_MARGIN``. A
query that is exactly a tool's name always clears it. The floor reads raw cosines and words
in common, never the scores standardized over the index, which would crown some tool of any
index for any query. Below the floor a search has no hits, so nothing is loaded; it names
the nearest tools instead.
"""

from __future__ import annotations

import difflib
import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from toolhub.tools import embeddings
from toolhub.tools.tool import Tool

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_K1 = 1.2
_B = 0.75
# Field weights: a word in the name says more about a tool than one in a parameter note.
_NAME_WEIGHT = 3
_DESCRIPTION_WEIGHT = 2
_PARAMETER_WEIGHT = 1
# The relevance floor (see the module docstring), on MiniLM's sentence cosine scale, chosen
# with bench/tool_search.py: the shared 240-tool corpus and its dev queries, the even half to
# choose and the odd half to check, against random letters, random words that share no word
# with any tool, and off-topic phrases. Whole corpus, hybrid: recall@5 0.908 with the floor,
# 0.912 without (recall@1 0.717 both); 96.5% / 99.5% / 92.5% of the three kinds of nonsense
# find nothing, none without. In 5-tool indexes (--index-size 5), where few queries share a
# word, recall@5 is 0.933 against 0.992 and 99-100% of nonsense finds nothing; such a miss
# lists every tool. STANDOUT_MARGIN, on the halves: at 0.1, 5-6% of random strings got into
# 5-tool indexes, at 0.125 2-3%; 0.15 kept them all out but cost up to another point of
# recall@5. One floor on similarity alone does worse both ways: at 0.25, recall@5 is 0.867
# (0.829 in 5-tool indexes) and 17.5% of random strings get in.
RELEVANCE_FLOOR = 0.15
CLOSE_MATCH = 0.35
STANDOUT_MARGIN = 0.125
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
    """The text the semantic ranker embeds for a tool: its name as words, then its
    description (parameter text dilutes a sentence embedding; the lexical side has it)."""
    words = " ".join(word.lower() for word in _WORD.findall(tool.name))
    return f"{words}: {tool.description}".strip()


@dataclass(frozen=True, slots=True)
class SearchHit:
    tool: Tool
    score: float


class SearchHits(list[SearchHit]):
    """A search's hits, best first. Empty when no tool cleared the relevance floor; then
    ``nearest`` names the tools closest to the query anyway. Those are not hits: nothing
    loads them, they are there for a retry with ``select:<name>``."""

    def __init__(self, hits: Iterable[SearchHit] = (), *, nearest: Sequence[str] = ()) -> None:
        super().__init__(hits)
        self.nearest: tuple[str, ...] = tuple(nearest)


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

    def search(self, query: str, limit: int = 5, *, mode: str | None = None) -> SearchHits:
        """The best ``limit`` tools for ``query``; only tools some ranker finds related, and
        none at all unless the query clears the relevance floor.

        ``mode`` is ``lexical``, ``semantic`` or ``hybrid`` (the default when the model is
        installed). Past the floor, a tool is related when it shares a word with the query
        or its embedding is at least ``embeddings.MIN_SIMILARITY`` from the query's.
        """
        mode = mode if self._semantic else "lexical"
        mode = mode or "hybrid"
        limit = max(limit, 1)
        lexical = self.lexical_scores(query)
        related = set(lexical) if mode != "semantic" else set()
        scores = lexical
        matched = bool(lexical)
        if mode != "lexical" and self._semantic is not None:
            similarities = self._semantic.similarities(query)
            # The floor is the same in every mode that has the model: it judges the query,
            # whichever ranker then orders the tools.
            matched = _clears_floor(similarities.sentence, shares_word=matched)
            related |= {
                name
                for name, similarity in zip(self._order, similarities.sentence, strict=True)
                if similarity >= embeddings.MIN_SIMILARITY
            }
            semantic = self._semantic_scores(similarities)
            scores = dict(zip(self._order, semantic, strict=True))
            if mode == "hybrid":
                scores = self._fused(lexical, semantic)
        exact = query.strip()
        if exact in self._tools:
            matched = True
            related.add(exact)
            scores[exact] = math.inf
        if not matched:
            return SearchHits(nearest=self._nearest(query, scores, limit))
        ranked = sorted(related, key=lambda name: (-scores[name], name))
        return SearchHits(SearchHit(self._tools[name], scores[name]) for name in ranked[:limit])

    def _nearest(self, query: str, scores: dict[str, float], limit: int) -> list[str]:
        """The names a query that matched nothing came closest to: by the ranker's own score
        where it scored every tool, else (lexical, no word shared) by spelling."""
        if len(scores) < len(self._order):
            text = query.strip().lower()
            scores = {
                name: difflib.SequenceMatcher(None, text, name.lower()).ratio()
                for name in self._order
            }
        return sorted(self._order, key=lambda name: (-scores[name], name))[:limit]

    @staticmethod
    def _semantic_scores(similarities: embeddings.Similarities) -> list[float]:
        """Both similarities standardized over this index (z-scores), then mixed: their
        raw scales differ (token similarity runs high for any text), their spreads agree."""
        weight = embeddings.TOKEN_WEIGHT
        return [
            weight * token + (1 - weight) * sentence
            for sentence, token in zip(
                _standardized(similarities.sentence),
                _standardized(similarities.token),
                strict=True,
            )
        ]

    def _fused(self, lexical: dict[str, float], semantic: list[float]) -> dict[str, float]:
        """Add the semantic score to the standardized lexical one, weighted. Scores, not
        ranks, are fused: a ranker that is sure of one tool should count for more than one
        that is not, which rank fusion throws away."""
        lexical_all = _standardized([lexical.get(name, 0.0) for name in self._order])
        weight = embeddings.SEMANTIC_WEIGHT
        return {
            name: weight * sem + (1 - weight) * lex
            for name, sem, lex in zip(self._order, semantic, lexical_all, strict=True)
        }


def _clears_floor(sentence: list[float], *, shares_word: bool) -> bool:
    """Whether a query is about any tool in the index, from its sentence similarities."""
    best, *others = heapq.nlargest(2, sentence)
    if best < RELEVANCE_FLOOR:
        return False
    runner_up = max(others[0] if others else -1.0, embeddings.MIN_SIMILARITY)
    return shares_word or best >= CLOSE_MATCH or best - runner_up >= STANDOUT_MARGIN


def _standardized(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    spread = math.sqrt(sum((value - mean) ** 2 for value in values) / len(values)) or 1.0
    return [(value - mean) / spread for value in values]
