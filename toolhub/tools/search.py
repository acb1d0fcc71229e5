"""The index behind ``tool_search``: exact selection and ranked search over a fixed set.

An index is made per resolution from the tools that turn's resolution allows, so a search
can never surface (or load) a vetoed tool. ``select:a,b`` loads exact names. Any other query
is ranked lexically with BM25 over fields (name and title tokens split on ``_ - .`` and
case, the description, parameter names and descriptions), after stop-word removal and
light stemming; a query that is exactly a tool's name puts that tool first. The words a
query implies without saying them (``glossary.expansion``: "slack" implies chat, "ls"
list directory, "PROJ-12" a ticket) count too, at ``EXPANSION_WEIGHT``, and join the
query the semantic ranker encodes. Where the optional embedding model is installed
(``toolhub.tools.embeddings``), a semantic ranker runs too and the two rankers' scores are
fused: sentence similarity over the whole index, then late interaction for the best
``CANDIDATES`` (each standardized). The late interaction asks both ways: does the tool
speak to every word of the query (token similarity), and is the query about all of the
tool (the reverse score, over its text and over its name)? Of near-duplicates, one that
also does something the query never mentions, or belongs to a service it never names,
ranks below the one that does just what was asked. A tool's source (its MCP server,
``catalog.group_of``) counts as a whole: the closer the query is to what the source is
about (``SOURCE_WEIGHT``), the higher its tools; an index of one source is ranked as if
there were none. A word of the query that names a source (``_source_names``: a company's
server, whose tools use the word more than all others do) leaves the text the model
encodes and counts for the source instead (``NAMED_SOURCE_WEIGHT``). Nothing in it knows
any catalog.
Ties break by name, so the same query always gives the same answer (a text shared by
several tools is scored once, so they tie exactly). Where a model has written how people
ask for a tool (``phrasings``), that text joins the tool's in both rankers.
docs/tool-search.md has the measurements behind every constant.

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
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from toolhub.tools import embeddings, glossary, phrasings
from toolhub.tools.catalog import group_of
from toolhub.tools.embedding_model import Encoding
from toolhub.tools.search_text import STOP_WORDS, WORD, Lexical, document, stem, title, tokens
from toolhub.tools.tool import Tool

__all__ = ["SearchHit", "SearchHits", "ToolIndex", "document_text", "prepare", "stem", "tokens"]

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
# The semantic ranker's second stage re-scores this many tools with late interaction,
# standardizing it over them and an even sample of about STATISTICS_SAMPLE others. At
# 10,000 tools, dev hit@5 was 0.742 re-scoring 50, 0.750 at 100, 0.758 at 200 (measured
# offline on the first stage's best N; docs/tool-search.md). A sample of 16 instead of 64
# gave the same hit@5 within a query at every scale (with the source score) and scores
# ~30% fewer rows; 50 candidates lost a point on the held-out queries at 10,000.
CANDIDATES = 100
STATISTICS_SAMPLE = 16
# What the query's closeness to a tool's source counts for (added to the tool's score):
# the source (``catalog.group_of``: its MCP server) as a whole, the query's mean cosine to
# its tools' sentence vectors (``_source_scores``). A server is about one thing, so of
# near-copies the one whose server the query is about wins over a kitchen-sink server's,
# whose tools are on average far from any one query. Chosen by 5-fold cross-validation
# (0 / 0.5 / … / 3, mean dev hit@5 over 240, 1,000 and 10,000 tools): four folds chose
# 1.5, one 2.0. The cosine to the mean's direction, a source's best 3 similarities or its
# best one lost (docs/tool-search.md).
SOURCE_WEIGHT = 1.5
# What a query's naming a source counts for (added to its tools' first-stage scores), where
# the word naming it is the source's name more than anyone's word (``_source_names``). The
# word itself leaves the text the model encodes (BM25 keeps it), and the named source's
# source score is the best any source has: a name counts once, for the source, not again
# in every one of its tools' words ("invoices for Northwind" is about invoices; Northwind's
# tool that does something else to invoices should not win on the name alone). Chosen by 5-fold
# cross-validation (0 / 0.5 / 1 / 2 / 3, mean dev hit@5 over the three scales): three
# folds chose 0.5, one 1.0, one 0 (docs/tool-search.md).
NAMED_SOURCE_WEIGHT = 0.5
CLOSE_MATCH = 0.35
STANDOUT_MARGIN = 0.125


def document_text(tool: Tool) -> str:
    """The text the semantic ranker embeds for a tool: its name as words (and its title
    where that says more), then its description, then how people ask for it where a model
    wrote that (phrasings). Parameter text dilutes a sentence embedding (measured:
    bench/tool_search.py); the lexical side has it."""
    return _document_text(tool, phrasings.known(tool))


def name_words(tool: Tool) -> str:
    """A tool's name as lower-case words: how its encoded text starts."""
    return " ".join(word.lower() for word in WORD.findall(tool.name))


@functools.lru_cache(maxsize=65_536)
def _document_text(tool: Tool, phrasing: str) -> str:
    label = title(tool)
    head = f"{name_words(tool)} ({label})" if label else name_words(tool)
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
    the first search, so a turn that never searches never waits for either. Rows are the
    tools in name order, so the lower row wins a tie."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._order = sorted(self._tools)
        # Per row, how many model tokens its name is (its encoded text starts with it).
        self._heads: dict[int, int] = {}
        # Per source (``_source_rows``), its sentence vectors' mean, and each row's source
        # as a numpy vector: made at the first semantic search, since the semantic index is.
        self._centroids: Any = None
        self._groups: Any = None
        prepare(self._tools.values())

    @functools.cached_property
    def _lexical(self) -> Lexical:
        return Lexical([document(self._tools[name]) for name in self._order])

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
        implies (``glossary.expansion``) that it does not say itself; by tool name."""
        rows = self._lexical_rows(query, implied)
        return {self._order[row]: score for row, score in rows.items()}

    def _lexical_rows(self, query: str, implied: str) -> dict[int, float]:
        return self._lexical.scores(_terms(query, implied))

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
        exact = self._order.index(query.strip()) if query.strip() in self._tools else None
        if semantic is None:
            lexical = self._lexical_rows(query, implied)
            if exact is not None:
                lexical[exact] = math.inf
            if not lexical:
                return SearchHits(nearest=self._nearest(query, None, limit))
            ranked = heapq.nsmallest(limit, lexical, key=lambda row: (-lexical[row], row))
            return self._hits(ranked, lexical)
        said, named = self._named(semantic.np, query)
        terms = _terms(query, implied)
        lexical_all = self._lexical.vector(semantic.np, terms, len(self._order))
        encoded = semantic.encode(f"{said} {implied}".strip())
        sentence = semantic.sentence(encoded)
        shares_word = lexical_all > 0
        # The floor is the same in every mode that has the model: it judges the query,
        # whichever ranker then orders the tools.
        matched = exact is not None or _clears_floor(sentence, shares_word=shares_word.any())
        scores = self._semantic_scores(
            semantic, encoded, sentence, lexical_all, mode=mode, named=named
        )
        if exact is not None:
            scores[exact] = math.inf
        if not matched:
            return SearchHits(nearest=self._nearest(query, scores, limit))
        related = sentence >= embeddings.MIN_SIMILARITY
        if mode != "semantic":
            related |= shares_word
        if exact is not None:
            related[exact] = True
        return self._hits(_best(semantic.np, scores, related, limit), scores)

    def _hits(self, rows: Iterable[int], scores: Any) -> SearchHits:
        return SearchHits(
            SearchHit(self._tools[self._order[row]], float(scores[row])) for row in rows
        )

    def _nearest(self, query: str, scores: Any, limit: int) -> list[str]:
        """The names a query that matched nothing came closest to: by the ranker's own score
        where it scored every tool, else (lexical, no word shared) by spelling."""
        if scores is None:
            text = query.strip().lower()
            scores = [
                difflib.SequenceMatcher(None, text, name.lower()).ratio() for name in self._order
            ]
        rows = heapq.nsmallest(limit, range(len(self._order)), key=lambda row: (-scores[row], row))
        return [self._order[row] for row in rows]

    def _semantic_scores(
        self,
        semantic: embeddings.SemanticIndex,
        encoded: Encoding,
        sentence: Any,
        lexical: Any,
        *,
        mode: str,
        named: Any = None,
    ) -> Any:
        """Every tool's score, in two stages. First the sentence similarity, standardized
        over this index (z-scores), mixed with the standardized lexical score in hybrid
        mode. Then the ``CANDIDATES`` best are re-scored by late interaction
        (``SemanticIndex.interaction``): the token similarity takes the place of half the
        sentence one, and the reverse score (over the tool's whole text and over its name)
        is added, so of near-duplicates the one whose words the query speaks to wins.
        Each is standardized over the candidates and an even sample of the rest, so a
        query's cost stops growing with the index. Scores, not ranks, are fused: a ranker
        sure of one tool should count for more than one that is not. A tool outside the
        candidates keeps its first-stage score with the lowest second-stage scores seen,
        so it is listed below every candidate it trails."""
        np = semantic.np
        weight = embeddings.SEMANTIC_WEIGHT if mode == "hybrid" else 1.0
        sentence_z = _standardized(sentence)
        first = weight * sentence_z
        count = len(self._order)
        if mode == "hybrid":
            first += (1 - weight) * _standardized(lexical)
        first += SOURCE_WEIGHT * self._source_scores(semantic, encoded, sentence, named)
        if named is not None:
            first += NAMED_SOURCE_WEIGHT * named
        scored = _scored_rows(np, first)
        heads = [self._head(semantic, int(row)) for row in scored]
        forward, reverse, head = semantic.interaction(encoded, scored, heads)
        # The token score takes the place of `share` of the standardized sentence score.
        share = embeddings.TOKEN_WEIGHT * weight
        final = first - share * sentence_z
        for values, gain in (
            (forward, share),
            (reverse, embeddings.REVERSE_WEIGHT),
            (head, embeddings.HEAD_WEIGHT),
        ):
            standard = _standardized(values)
            column = np.full(count, float(standard.min()))
            column[scored] = standard
            final += gain * column
        return final

    @functools.cached_property
    def _source_rows(self) -> tuple[list[int], int]:
        """Each row's source as a number, and how many sources there are."""
        numbers: dict[str, int] = {}
        rows = [numbers.setdefault(self.sources[name], len(numbers)) for name in self._order]
        return rows, len(numbers)

    @functools.cached_property
    def _source_names(self) -> dict[str, list[int]]:
        """The words that name sources here, each with the rows of the sources it names: a
        word of a source's name (``catalog.group_of``) that the tools of the sources so
        named use more than all other tools do (a company's server, "northwind": its
        tools say northwind, few others do; not a server named for what it does,
        "tickets", among other servers' ticket tools). None in an index of one source."""
        if self._source_rows[1] < 2:
            return {}
        members: dict[str, list[int]] = {}
        for row, name in enumerate(self._order):
            members.setdefault(self.sources[name], []).append(row)
        named: dict[str, set[int]] = {}
        for source, rows in members.items():
            for word in tokens(source):
                if len(word) > 1 and word.isalpha():
                    named.setdefault(word, set()).update(rows)
        words = {}
        for word, inside in named.items():
            using = {row for row, _ in self._lexical.postings(word)}
            if len(using & inside) > len(using - inside):
                words[word] = sorted(inside)
        return words

    def _named(self, np: Any, query: str) -> tuple[str, Any]:
        """The query without the words that name sources (``_source_names``), and per row
        whether the query names its source (None: it names none). A query that is
        nothing but names keeps them."""
        names = self._source_names
        said = [word for word in WORD.findall(query) if word.lower() not in STOP_WORDS]
        found = {stem(word.lower()) for word in said} & names.keys()
        if not found or not {stem(word.lower()) for word in said} - found:
            return query, None
        column = np.zeros(len(self._order))
        for word in found:
            column[names[word]] = 1.0
        rest = WORD.sub(lambda match: "" if stem(match[0].lower()) in found else match[0], query)
        return " ".join(rest.split()), column

    def _source_scores(
        self, semantic: embeddings.SemanticIndex, encoded: Encoding, sentence: Any, named: Any
    ) -> Any:
        """Per row, its source's closeness to the query (the query's mean cosine to the
        source's tools) less the mean over rows, over the spread of the rows' sentence
        similarities; 0 everywhere in an index of one source: nothing to tell apart. A
        source the query names (``named``) is as close as the closest source."""
        np = semantic.np
        rows, count = self._source_rows
        if count < 2:
            return np.zeros(len(rows), np.float32)
        if self._centroids is None:
            self._groups = np.asarray(rows, dtype=np.intp)
            self._centroids = semantic.centroids(self._groups, count)
        groups = self._groups
        # On the tools' own scale (the spread of their sentence similarities), not
        # standardized over the sources: over two sources that would always be -1 and +1,
        # however alike they are.
        column = (self._centroids @ encoded.vector)[groups]
        if named is not None:
            column = np.where(named > 0, column.max(), column)
        return (column - column.mean()) / (float(sentence.std()) or 1.0)

    def _head(self, semantic: embeddings.SemanticIndex, row: int) -> int:
        if row not in self._heads:
            self._heads[row] = semantic.pieces(name_words(self._tools[self._order[row]]))
        return self._heads[row]


def _scored_rows(np: Any, first: Any) -> Any:
    """The rows the second stage scores: the ``CANDIDATES`` best by the first stage's
    score, and an even sample of about ``STATISTICS_SAMPLE`` others to standardize over."""
    count = len(first)
    candidates = (
        np.argpartition(-first, CANDIDATES)[:CANDIDATES] if count > CANDIDATES else np.arange(count)
    )
    step = max(count // STATISTICS_SAMPLE, 1)
    return np.union1d(candidates, np.arange(0, count, step))


def _terms(query: str, implied: str) -> dict[str, float]:
    """The query's words, each weighed by how often it says it, and the words it implies
    without saying them, at ``EXPANSION_WEIGHT``."""
    return {**dict.fromkeys(tokens(implied), EXPANSION_WEIGHT), **Counter(tokens(query))}


def _best(np: Any, scores: Any, related: Any, limit: int) -> list[int]:
    """The rows of the ``limit`` best related scores, best first, ties by row (name)."""
    rows = np.flatnonzero(related)
    if len(rows) > limit:
        # Everything at least as good as the limit-th best, so a tie there breaks by row.
        cut = np.partition(scores[rows], len(rows) - limit)[len(rows) - limit]
        rows = rows[scores[rows] >= cut]
    ordered = rows[np.lexsort((rows, -scores[rows]))]
    return [int(row) for row in ordered[:limit]]


def _clears_floor(sentence: Any, *, shares_word: bool) -> bool:
    """Whether a query is about any tool in the index, from its sentence similarities."""
    best, *others = heapq.nlargest(2, sentence.tolist()) if len(sentence) < 64 else _two(sentence)
    if best < RELEVANCE_FLOOR:
        return False
    runner_up = max(others[0] if others else -1.0, embeddings.MIN_SIMILARITY)
    return shares_word or best >= CLOSE_MATCH or best - runner_up >= STANDOUT_MARGIN


def _two(values: Any) -> list[float]:
    """The two largest of a long numpy vector, largest first, without a list of it."""
    top = values[values.argpartition(len(values) - 2)[-2:]]
    return sorted(top.tolist(), reverse=True)


def _standardized(values: Any) -> Any:
    spread = float(values.std()) or 1.0
    return (values - values.mean()) / spread
