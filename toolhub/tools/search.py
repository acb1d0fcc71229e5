"""The index behind ``tool_search``: exact selection and ranked search over a fixed set.

An index is made per resolution from the tools that turn's resolution allows, so a search
can never surface (or load) a vetoed tool. ``select:a,b`` loads exact names. Any other query
is ranked lexically with BM25 over fields (name and title tokens split on ``_ - .`` and
case, the description, parameter names and descriptions), after stop-word removal and
light stemming; a query that is exactly a tool's name puts that tool first. The words a
query implies without saying them (``glossary.expansion``: "slack" implies chat, "ls"
list directory, "PROJ-12" a ticket) count too, at ``EXPANSION_WEIGHT``, and join the
query the semantic ranker encodes. Where the optional embedding model is installed
(``toolhub.tools.embeddings``), a semantic ranker runs too (sentence similarity over the
whole index, then token similarity for the best ``CANDIDATES``, each standardized) and
the two rankers' scores are fused. Ties break by name, so the same query always gives
the same answer. Where a model has written how people ask for a tool (``phrasings``),
that text joins the tool's in both rankers. docs/tool-search.md has the measurements
behind every constant.

Making an index costs a dict and queues its tools' texts for the background encoder:
no turn waits for the model unless it searches before the background is done.

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
import functools
import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from toolhub.tools import embeddings, glossary, phrasings
from toolhub.tools.catalog import group_of
from toolhub.tools.embedding_model import Encoding
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
# (0.829 in 5-tool indexes) and 17.5% of random strings get in. (Those figures predate the
# glossary; "recall@5" there is what the bench now prints as hit@5. With the glossary the
# floor turns away the same share of nonsense: docs/tool-search.md.)
RELEVANCE_FLOOR = 0.15
# What a word the query implies (glossary.expansion) counts for, against one it says.
EXPANSION_WEIGHT = 0.5
# The semantic ranker's second stage re-scores this many tools with token similarity,
# standardizing it over them and an even sample of about STATISTICS_SAMPLE others.
CANDIDATES = 50
STATISTICS_SAMPLE = 64
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
    for word in tokens(tool.name) + tokens(_title(tool)):
        doc[word] += _NAME_WEIGHT
    for word in tokens(tool.description):
        doc[word] += _DESCRIPTION_WEIGHT
    for name, spec in sorted(tool.parameters.get("properties", {}).items()):
        for word in tokens(name) + tokens(str(spec.get("description", ""))):
            doc[word] += _PARAMETER_WEIGHT
    # How people ask for it, written by a model (phrasings): weighed as parameter text.
    for word in tokens(phrasings.known(tool)):
        doc[word] += _PARAMETER_WEIGHT
    return doc


def _title(tool: Tool) -> str:
    """A title that says more than the name (an MCP tool's ``title``), else nothing."""
    label = " ".join(tool.label.split())
    return label if tokens(label) != tokens(tool.name) else ""


def document_text(tool: Tool) -> str:
    """The text the semantic ranker embeds for a tool: its name as words (and its title
    where that says more), then its description, then how people ask for it where a model
    wrote that (phrasings). Parameter text dilutes a sentence embedding (measured:
    bench/tool_search.py); the lexical side has it."""
    return _document_text(tool, phrasings.known(tool))


@functools.lru_cache(maxsize=65_536)
def _document_text(tool: Tool, phrasing: str) -> str:
    words = " ".join(word.lower() for word in _WORD.findall(tool.name))
    title = _title(tool)
    head = f"{words} ({title})" if title else words
    text = f"{head}: {tool.description}".strip()
    return f"{text} Asked as: {phrasing}" if phrasing else text


def prepare(tools: Iterable[Tool]) -> None:
    """Have the semantic ranker encode ``tools`` in the background (see embeddings), and
    a model write how people ask for them where one is configured (see phrasings)."""
    tools = list(tools)
    phrasings.want(tools)
    embeddings.prepare(document_text(tool) for tool in tools)


# A tool whose phrasing arrives is encoded again, with it, before a search needs it.
phrasings.set_on_written(lambda tools: embeddings.prepare(document_text(tool) for tool in tools))


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
    """Made once per set of tools (each resolution's deferred ones); queries only read it.

    Making one costs a dict: the lexical tables are built at the first search, and the
    semantic ranker's encodings are queued for the background at once and looked up at
    the first search, so a turn that never searches never waits for either."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._order = sorted(self._tools)
        self._rows = {name: row for row, name in enumerate(self._order)}
        prepare(self._tools.values())

    @functools.cached_property
    def _lexical(self) -> _Lexical:
        return _Lexical([(name, _document(self._tools[name])) for name in self._order])

    @functools.cached_property
    def _semantic(self) -> embeddings.SemanticIndex | None:
        return embeddings.SemanticIndex.build(
            [document_text(self._tools[name]) for name in self._order]
        )

    @property
    def names(self) -> list[str]:
        return list(self._order)

    @functools.cached_property
    def sources(self) -> dict[str, str]:
        """Each tool's source (``catalog.group_of``) by name: what ``select:<source>``
        loads, as the catalog counts it."""
        return {name: group_of(self._tools[name]) for name in self._order}

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

    def lexical_scores(self, query: str, implied: str = "") -> dict[str, float]:
        """BM25 of the query's words, plus ``EXPANSION_WEIGHT`` times that of the words it
        implies (``glossary.expansion``) that it does not say itself."""
        said = Counter(tokens(query))
        scores = self._lexical.scores(said)
        more = Counter({term: 1 for term in tokens(implied) if term not in said})
        for name, score in self._lexical.scores(more).items():
            scores[name] = scores.get(name, 0.0) + EXPANSION_WEIGHT * score
        return scores

    def search(self, query: str, limit: int = 5, *, mode: str | None = None) -> SearchHits:
        """The best ``limit`` tools for ``query``; only tools some ranker finds related, and
        none at all unless the query clears the relevance floor.

        ``mode`` is ``lexical``, ``semantic`` or ``hybrid`` (the default when the model is
        installed). Past the floor, a tool is related when it shares a word with the query
        (or with the words it implies) or its embedding is at least
        ``embeddings.MIN_SIMILARITY`` from the query's.
        """
        semantic = self._semantic if mode != "lexical" else None
        mode = (mode or "hybrid") if semantic is not None else "lexical"
        limit = max(limit, 1)
        implied = glossary.expansion(query)
        lexical = self.lexical_scores(query, implied)
        related = set(lexical) if mode != "semantic" else set()
        scores = lexical
        matched = bool(lexical)
        if semantic is not None:
            encoded = semantic.encode(f"{query} {implied}".strip())
            sentence = semantic.sentence(encoded)
            # The floor is the same in every mode that has the model: it judges the query,
            # whichever ranker then orders the tools.
            matched = _clears_floor(sentence, shares_word=matched)
            near = (sentence >= embeddings.MIN_SIMILARITY).nonzero()[0]
            related |= {self._order[row] for row in near}
            scores = self._semantic_scores(semantic, encoded, sentence, lexical, mode=mode)
        exact = query.strip()
        if exact in self._tools:
            matched = True
            related.add(exact)
            scores[exact] = math.inf
        if not matched:
            return SearchHits(nearest=self._nearest(query, scores, limit))
        ranked = heapq.nsmallest(limit, related, key=lambda name: (-scores[name], name))
        return SearchHits(SearchHit(self._tools[name], scores[name]) for name in ranked)

    def _nearest(self, query: str, scores: dict[str, float], limit: int) -> list[str]:
        """The names a query that matched nothing came closest to: by the ranker's own score
        where it scored every tool, else (lexical, no word shared) by spelling."""
        if len(scores) < len(self._order):
            text = query.strip().lower()
            scores = {
                name: difflib.SequenceMatcher(None, text, name.lower()).ratio()
                for name in self._order
            }
        return heapq.nsmallest(limit, self._order, key=lambda name: (-scores[name], name))

    def _semantic_scores(
        self,
        semantic: embeddings.SemanticIndex,
        encoded: Encoding,
        sentence: Any,
        lexical: dict[str, float],
        *,
        mode: str,
    ) -> dict[str, float]:
        """Every tool's score, in two stages. First the sentence similarity, standardized
        over this index (z-scores), mixed with the standardized lexical score in hybrid
        mode. Then the ``CANDIDATES`` best are re-scored with the token similarity in place
        of half the sentence one; it is standardized with the mean and spread of the
        candidates and an even sample of the rest (all of them in a small index), so the
        cost of a query stops growing with the index. Scores, not ranks, are fused: a
        ranker sure of one tool should count for more than one that is not.

        A tool outside the candidates keeps its first-stage score with the lowest token
        score seen, so it can still be listed, below every candidate it trails."""
        np = semantic.np
        weight = embeddings.SEMANTIC_WEIGHT if mode == "hybrid" else 1.0
        sentence_z = _standardized(sentence)
        first = weight * sentence_z
        if mode == "hybrid":
            lexical_all = np.zeros(len(self._order))
            if lexical:
                rows = [self._rows[name] for name in lexical]
                lexical_all[rows] = list(lexical.values())
            first += (1 - weight) * _standardized(lexical_all)
        count = len(self._order)
        candidates = (
            np.argpartition(-first, CANDIDATES)[:CANDIDATES]
            if count > CANDIDATES
            else np.arange(count)
        )
        step = max(count // STATISTICS_SAMPLE, 1)
        scored = np.union1d(candidates, np.arange(0, count, step))
        token = _standardized(semantic.token(encoded, scored))
        token_all = np.full(count, float(token.min()))
        token_all[scored] = token
        # The token score takes the place of `share` of the standardized sentence score.
        share = embeddings.TOKEN_WEIGHT * weight
        final = first + share * (token_all - sentence_z)
        return dict(zip(self._order, final.tolist(), strict=True))


class _Lexical:
    """BM25 over field-weighted documents: document frequencies and postings."""

    def __init__(self, docs: list[tuple[str, Counter[str]]]) -> None:
        self._docs = dict(docs)
        self._lengths = {name: sum(doc.values()) for name, doc in docs}
        self._average = sum(self._lengths.values()) / len(docs) if docs else 1
        frequency: Counter[str] = Counter()
        self._postings: dict[str, list[str]] = {}
        for name, doc in docs:
            frequency.update(doc.keys())
            for term in doc:
                self._postings.setdefault(term, []).append(name)
        self._idf = {
            term: math.log(1 + (len(docs) - seen + 0.5) / (seen + 0.5))
            for term, seen in frequency.items()
        }

    def scores(self, terms: Counter[str]) -> dict[str, float]:
        scores: dict[str, float] = {}
        for term, weight in terms.items():
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


def _clears_floor(sentence: Any, *, shares_word: bool) -> bool:
    """Whether a query is about any tool in the index, from its sentence similarities."""
    best, *others = heapq.nlargest(2, sentence.tolist())
    if best < RELEVANCE_FLOOR:
        return False
    runner_up = max(others[0] if others else -1.0, embeddings.MIN_SIMILARITY)
    return shares_word or best >= CLOSE_MATCH or best - runner_up >= STANDOUT_MARGIN


def _standardized(values: Any) -> Any:
    spread = float(values.std()) or 1.0
    return (values - values.mean()) / spread
