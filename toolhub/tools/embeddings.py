"""The semantic half of tool_search: sentence embeddings from a model shipped in a package.

The model (``embedding_model``) is all-MiniLM-L6-v2 as an int8 ONNX file, run by
onnxruntime: nothing is downloaded, ever. It comes with the optional ``semantic`` extra;
without it, or with ``enabled`` set to False, ``SemanticIndex.build`` returns None and
tool_search ranks lexically. Once per machine the model is rewritten so that its weights
stay int8 in memory (``model_rewrite``), beside the encoding cache; when that fails the
packaged model runs. This module owns the switch (``configure``), when the model is
loaded, the one background thread per process that encodes tool texts, and the scores a
search reads (``SemanticIndex``); the encodings themselves are kept by ``embedding_cache``.

Two similarities come from one model run. The sentence one (cosine of mean-pooled
vectors) tells whether a tool is related at all and picks the candidates. The token one
is late interaction in the manner of ColBERT: each query token finds its closest token in
a tool's text (contextual vectors from the same forward pass), averaged over the query. It
keeps what pooling blurs (one decisive word in a long description), so it re-ranks the
candidates.

Cost, and where it is paid (docs/tool-search.md has the figures):

- A tool's text is encoded once per definition, never on a turn's path: ``prepare``
  queues it when the tool registers or a server lists it (and when a turn's index is
  made), and one background thread per process loads the model and encodes the queue.
  That thread starts when a serving process says so (``start``) or at the first search,
  never on import or ``configure``.
- Encodings are kept by the hash of the model (and its packages' versions) and the text,
  in memory (bounded) and in a SQLite file (``configure(cache_file=...)``) that restarts
  and other processes share (``embedding_cache``).
- The runtime's memory stays bounded: the model runs without onnxruntime's arena, in
  batches of similar length, and a tool text's token vectors are kept as int8, widened
  only for the candidates a search re-scores, a few at a time. Where there is a disk
  cache, an index holds only its sentence vectors (and each document's size and offset):
  at its build it places its documents' token vectors in the process's token store (one
  unnamed file that every index shares, each distinct text written once:
  ``token_store``), and a search reads the rows it scores from there by offset (at
  10,000 tools, ~150 MB less at peak than holding them, for ~0.3 ms a search).

Invariants: encoding never raises into a search (a model or cache failure turns the
semantic ranker off, or skips the disk, with one log line; a token store file that
cannot be made, written or read in full leaves the index reading the encodings from the
encoder, with one log line); a search waits at most
``_SEARCH_WAIT_SECONDS`` for a model another thread is loading, then ranks lexically.
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from toolhub.tools.embedding_cache import Encoder, give_back_freed_memory
from toolhub.tools.embedding_model import Encoding, load_model
from toolhub.tools.token_store import TokenRows

logger = logging.getLogger(__name__)

# How much the semantic ranker counts in the fused score (the lexical one gets the rest),
# and within it the share of the token similarity. Chosen by cross-validation over folds
# of the dev queries (bench/tool_search.py prints the folds' choices).
SEMANTIC_WEIGHT = 0.9
TOKEN_WEIGHT = 0.75
# What the reverse late-interaction score (how much of a tool's text the query is about)
# and its share over the tool's name add to a candidate's standardized score. With
# TOKEN_WEIGHT, chosen by cross-validation with every scale (240, 1,000, 10,000 tools) in
# the objective: one fold chose these; the others chose reverse 1.0, which gains a point
# or two at scale but ranks grep over glob for "find files matching a pattern" and the
# channel message over the direct one for "DM priya on slack" in small indexes (tested).
# docs/tool-search.md has the folds' figures.
REVERSE_WEIGHT = 0.5
HEAD_WEIGHT = 0.25
# Below this cosine similarity (and with no word in common) a tool is unrelated to the
# query: on MiniLM's scale unrelated sentences sit near 0, paraphrases above 0.4.
MIN_SIMILARITY = 0.1
# How many documents' token vectors a search widens to float32 at once (~4 MB).
_SCORE_ROWS = 64
# How many documents an index build reads at once.
_BUILD_ROWS = 256
# How long exit waits for the batch in the model (a batch takes well under a second).
_CLOSE_SECONDS = 10.0
# How long a search waits for another thread that is loading (or rewriting) the model
# before it ranks lexically this once.
_SEARCH_WAIT_SECONDS = 10.0

# Set by ``configure`` (the apps do it from settings before the first search).
enabled = True
cache_path: Path | None = None
rewritten_dir: Path | None = None

_load_lock = threading.Lock()


def _encoder(wait: float = -1) -> Encoder | None:
    """The process's encoder, loading it if need be (None: semantic search is off). A
    search and the background thread may both be first: one loads, the other waits, for
    at most ``wait`` seconds when given (then None, this once)."""
    if not _load_lock.acquire(timeout=wait):
        return None
    try:
        return _loaded_encoder()
    finally:
        _load_lock.release()


@functools.cache
def _loaded_encoder() -> Encoder | None:
    try:
        # The cache file is asked for at each read: a later ``configure`` counts.
        return Encoder(load_model(rewritten_dir=rewritten_dir), cache_path=lambda: cache_path)
    except ImportError:
        logger.info("semantic tool search is off: install the 'semantic' extra for it")
    except Exception:
        logger.exception("semantic tool search is off: the embedding model failed to load")
    return None


def available() -> bool:
    return enabled and _encoder() is not None


class _Background:
    """One daemon thread per process that loads the model and encodes queued texts."""

    def __init__(self) -> None:
        self._queue: dict[str, None] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self.busy = False
        self.started = False
        self.closing = False

    def add(self, texts: Iterable[str]) -> None:
        with self._wake:
            self._queue.update(dict.fromkeys(texts))
            self._kick()

    def start(self) -> None:
        with self._wake:
            self.started = True
            self._kick()

    def stop(self) -> None:
        with self._wake:
            self.started = False
            self._queue.clear()

    def _kick(self) -> None:
        # Until started (configure, or a first index), texts only queue: tools register
        # at import, before settings say whether this process searches semantically.
        if not self._queue or not self.started or not enabled or self.closing:
            return
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="toolhub-embeddings", daemon=True
            )
            self._thread.start()
        self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue:
                    self.busy = False
                    self._wake.notify_all()
                    self._wake.wait()
                self.busy = True
                batch = list(self._queue)[:256]
                for text in batch:
                    del self._queue[text]
            try:
                encoder = _encoder() if enabled and not self.closing else None
                if encoder is not None:
                    encoder.documents(batch, stop=lambda: self.closing)
            except Exception:
                logger.exception("background encoding of %d tool texts failed", len(batch))

    def close(self) -> None:
        """At exit: encode nothing more and let a batch in the model finish, so the
        interpreter never tears down under a native call (onnxruntime aborts then)."""
        with self._wake:
            self.closing = True
            self._queue.clear()
            self._wake.wait_for(lambda: not self.busy, timeout=_CLOSE_SECONDS)

    def wait(self, timeout: float | None = None) -> bool:
        """Until the queue is empty and nothing is encoding (tests and benchmarks)."""
        with self._wake:
            return self._wake.wait_for(lambda: not self._queue and not self.busy, timeout=timeout)


_background = _Background()
atexit.register(_background.close)


def prepare(texts: Iterable[str]) -> None:
    """Encode ``texts`` soon, in the background, if semantic search is on. Never blocks
    on the model: a caller on a turn's path pays for a dict update."""
    if enabled:
        _background.add(texts)


def forget_in_memory() -> None:
    """Drop this process's in-memory encodings (the disk cache stays): a benchmark's way
    to see what a restarted process pays."""
    encoder = _encoder()
    if encoder is not None:
        encoder.forget()


def wait_prepared(timeout: float | None = None) -> bool:
    """Whether everything prepared so far is encoded (waiting up to ``timeout``)."""
    return _background.wait(timeout)


def configure(
    *,
    semantic_search: bool,
    cache_file: str | Path | None,
    model_dir: str | Path | None = None,
) -> None:
    """Switch semantic search on or off, name the shared encoding cache (None: none) and
    the directory of the rewritten model (default: the cache's; None with no cache: the
    packaged model runs). Starts no thread: ``start`` does, or the first search. The
    model a process loaded stays loaded: a later ``model_dir`` counts in new ones."""
    global enabled, cache_path, rewritten_dir
    enabled = semantic_search
    cache_path = Path(cache_file) if cache_file else None
    rewritten_dir = Path(model_dir) if model_dir else cache_path.parent if cache_path else None
    if not enabled:
        _background.stop()


def start() -> None:
    """Load the model and encode what registered so far (and from now on) in the
    background, if semantic search is on. A serving process calls it as it starts, so its
    first search finds the model loaded; a process that only imports the project (a
    command, a test) never pays for the model or its thread unless it searches."""
    if enabled:
        _background.start()


class SemanticIndex:
    """Sentence vectors of a set of documents as one matrix. Their token vectors are read
    only for the rows a search scores: where there is a disk cache, from the process's
    token store (``token_store.TokenRows``), else from the encoder (its bounded memory,
    then the disk cache) if that file failed; without a disk cache, held here (nowhere
    else to read them)."""

    def __init__(
        self, encoder: Encoder, documents: Sequence[str], encoded: Sequence[Encoding] = ()
    ) -> None:
        """``encoded``: the documents' encodings where the caller has them (a test's)."""
        np = encoder.np
        self.np = np
        self._encoder = encoder
        # Where there is a disk cache: where the documents' token vectors are in the
        # process's token store (``token_store``), read by offset.
        self._stored: TokenRows | None = None
        # Each distinct text is scored once and its score copied to every row that has
        # it: the same text always scores the same, to the last bit, so a tie breaks by
        # name. A product computes columns by different paths, which would otherwise part
        # them in float32's last bits.
        first: dict[str, int] = {}
        self._inverse = np.array([first.setdefault(text, len(first)) for text in documents])
        self._texts = list(first)
        held = dict(zip(documents, encoded, strict=False))
        self._encoded: list[Encoding] = [held[text] for text in self._texts] if held else []
        vectors = [item.vector for item in self._encoded]
        if not held:
            keep = not encoder.persistent
            stored = None if keep else TokenRows.begin(np, cache_path, encoder.model.tag)
            # A chunk at a time: every document's token vectors at once would be the
            # process's peak (~160 MB at 10,000 tools).
            for start in range(0, len(self._texts), _BUILD_ROWS):
                texts = self._texts[start : start + _BUILD_ROWS]
                chunk = encoder.documents(texts)
                vectors += [item.vector for item in chunk]
                self._encoded += chunk if keep else []
                if stored is not None and not stored.add(texts, chunk):
                    stored = None
            self._stored = stored.finished() if stored is not None else None
        self._vectors = np.stack(vectors)
        del vectors
        if not held:
            # The chunks' encodings are freed between the sentence vectors kept: without
            # this, ~30 MB that nothing uses stay resident at 10,000 tools (measured).
            give_back_freed_memory()

    @classmethod
    def build(cls, documents: Sequence[str]) -> SemanticIndex | None:
        """An index over ``documents``, or None when semantic search is unavailable."""
        if not documents or not enabled:
            return None
        _background.start()
        encoder = _encoder(wait=_SEARCH_WAIT_SECONDS)
        if encoder is None:
            return None
        return cls(encoder, documents)

    def _documents(self, rows: Sequence[int]) -> list[Encoding]:
        """The encodings of distinct documents ``rows`` (indexes into ``_texts``)."""
        if self._encoded:
            return [self._encoded[row] for row in rows]
        return self._encoder.documents([self._texts[row] for row in rows])

    def _token_rows(self, rows: Any) -> tuple[Any, Any, Any]:
        """Distinct documents ``rows``' token vectors one after another (as kept: int8 for
        a tool text), each vector's scale, and each document's number of vectors. From the
        token store where the index has its rows there; else, or when a read of it fails, from the
        encodings (memory, then the disk cache)."""
        np = self.np
        # Read once: another thread's failed read may drop it meanwhile.
        stored = self._stored
        if stored is not None:
            try:
                return stored.read(rows)
            except (OSError, ValueError):
                logger.exception("token file read failed; reading the encoding cache instead")
                self._stored = None
        chunk = self._documents(rows)
        return (
            np.concatenate([item.tokens for item in chunk]),
            np.concatenate([_scales(np, item) for item in chunk]),
            np.array([len(item.tokens) for item in chunk]),
        )

    def encode(self, query: str) -> Encoding:
        return self._encoder.query(query)

    def sentence(self, query: Encoding) -> Any:
        """Cosine of the query's sentence vector to each document's (a numpy vector)."""
        return (self._vectors @ query.vector)[self._inverse]

    def token(self, query: Encoding, rows: Sequence[int]) -> Any:
        """For each of ``rows``: the mean over the query's tokens of each one's best cosine
        among that document's tokens."""
        return self.interaction(query, rows, [0] * len(rows))[0]

    def interaction(self, query: Encoding, rows: Sequence[int], heads: Sequence[int]) -> Any:
        """Three late-interaction scores for each of ``rows``, from one similarity matrix
        of the query's tokens against the document's (rows of the result):

        0. forward: each query token's best cosine among the document's, averaged (does
           the tool speak to every word of the query?);
        1. reverse: each document token's best cosine among the query's, averaged (how
           much of the tool's text is the query about? a tool that also does something
           the query never mentions scores less);
        2. head: the reverse score over the document's first ``heads[i]`` tokens only
           (its name, when the text starts with it); the reverse score where that is 0.
        """
        np = self.np
        distinct, back = np.unique(
            self._inverse[np.asarray(rows, dtype=np.intp)], return_inverse=True
        )
        first_head = dict(zip(back.tolist(), heads, strict=True))
        return self._interaction(query, distinct, [first_head[at] for at in range(len(distinct))])[
            :, back
        ]

    def _interaction(self, query: Encoding, rows: Any, heads: Sequence[int]) -> Any:
        """``interaction`` over distinct documents (indexes into ``_texts``)."""
        np = self.np
        scores = []
        # Some documents at a time: the widened vectors of every candidate at once would
        # be the largest allocation of a search (~10 MB at 1,000 tools).
        for start in range(0, len(rows), _SCORE_ROWS):
            tokens, scales, sizes = self._token_rows(rows[start : start + _SCORE_ROWS])
            starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            # One widening for the chunk: per document it would cost more in calls than
            # in arithmetic.
            widened = tokens.astype(np.float32)
            # Scaled after the product: the query has fewer tokens than a vector has
            # dimensions, so that is fewer multiplications.
            similarity = query.tokens @ widened.T
            similarity *= scales
            forward = np.maximum.reduceat(similarity, starts, axis=1).mean(axis=0)
            best = np.concatenate(([0.0], np.cumsum(similarity.max(axis=0))))
            reverse = (best[starts + sizes] - best[starts]) / sizes
            count = np.minimum(np.array(heads[start : start + _SCORE_ROWS]), sizes)
            head = (best[starts + count] - best[starts]) / np.maximum(count, 1)
            scores.append(np.stack([forward, reverse, np.where(count > 0, head, reverse)]))
        return np.concatenate(scores, axis=1)

    def centroids(self, groups: Any, count: int) -> Any:
        """Per group (``groups[row]`` is each row's, ``count`` of them), the mean of its
        rows' sentence vectors. A query's product with it is the query's mean cosine to the
        group's documents: how much the group as a whole is about the query. (Not its
        direction alone: normalizing the mean of a kitchen-sink group's varied documents
        magnifies what all tool texts share, so every vague query came close to it.)"""
        np = self.np
        sums = np.zeros((count, self._vectors.shape[1]), np.float32)
        # Rows a chunk at a time: every row's vector at once would be ~15 MB at 10,000.
        for start in range(0, len(groups), 1_024):
            chunk = self._inverse[start : start + 1_024]
            np.add.at(sums, groups[start : start + 1_024], self._vectors[chunk])
        sizes = np.bincount(groups, minlength=count).astype(np.float32)
        return sums / np.maximum(sizes, 1.0)[:, None]

    def pieces(self, text: str) -> int:
        """How many of the model's tokens ``text`` is, without the special ones."""
        return _pieces(self._encoder.model, text)


def _scales(np: Any, item: Encoding) -> Any:
    """Each token vector's scale (1 for float ones: a query's, or a test's)."""
    return item.scales if item.scales is not None else np.ones(len(item.tokens), np.float32)


@functools.lru_cache(maxsize=65_536)
def _pieces(model: Any, text: str) -> int:
    # token_count counts [CLS] and [SEP].
    return max(int(model.token_count(text)) - 2, 0)
