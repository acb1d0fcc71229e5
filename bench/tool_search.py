"""Ranking quality and latency of tool_search over a catalog and a query set.

Takes ``--corpus`` (a JSON list of {name, description, parameters}) and ``--queries`` (a
JSON list of {query, relevant: [names]}); defaults are the shared dev files. Prints
recall@1, recall@5, MRR and the p50 latency per query, one figure a line, for each ranker
available (lexical always; semantic and fused when the embedding model is installed).
The index is built once, outside the timed loop, as in the product.

To check that a weight is not fitted to the query set, choose it on one half
(``--half even``: queries 0, 2, 4, ...) and read the figures on the other
(``--half odd``); ``--semantic-weight`` and ``--token-weight`` override the two weights.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toolhub.tools import embeddings, function
from toolhub.tools.search import ToolIndex

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "bench"


def load_tools(path: Path):
    tools = []
    for item in json.loads(path.read_text()):

        def body(**kwargs):
            return kwargs

        tools.append(
            function(
                body,
                name=item["name"],
                description=item["description"],
                parameters=item["parameters"],
                register_globally=False,
            )
        )
    return tools


def measure(index: ToolIndex, queries, mode: str) -> dict[str, float]:
    hits1 = hits5 = 0
    reciprocal = 0.0
    timings = []
    for item in queries:
        started = time.perf_counter()
        ranked = [hit.tool.name for hit in index.search(item["query"], 20, mode=mode)]
        timings.append((time.perf_counter() - started) * 1000)
        relevant = set(item["relevant"])
        rank = next((i for i, name in enumerate(ranked, 1) if name in relevant), None)
        hits1 += rank == 1
        hits5 += rank is not None and rank <= 5
        reciprocal += 1 / rank if rank else 0
    n = len(queries)
    return {
        "recall@1": hits1 / n,
        "recall@5": hits5 / n,
        "mrr": reciprocal / n,
        "p50_ms": statistics.median(timings),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=SHARED / "tool_corpus.json")
    parser.add_argument("--queries", type=Path, default=SHARED / "tool_search_dev.json")
    parser.add_argument("--half", choices=("even", "odd"), help="only every other query")
    parser.add_argument("--semantic-weight", type=float, default=embeddings.SEMANTIC_WEIGHT)
    parser.add_argument("--token-weight", type=float, default=embeddings.TOKEN_WEIGHT)
    args = parser.parse_args()
    embeddings.SEMANTIC_WEIGHT = args.semantic_weight
    embeddings.TOKEN_WEIGHT = args.token_weight
    tools = load_tools(args.corpus)
    queries = json.loads(args.queries.read_text())
    if args.half:
        queries = queries[args.half == "odd" :: 2]
    started = time.perf_counter()
    index = ToolIndex(tools)
    build_ms = (time.perf_counter() - started) * 1000
    print(f"tool_search index tools={len(tools)} queries={len(queries)} build_ms={build_ms:.1f}")
    for mode in index.modes:
        figures = measure(index, queries, mode)
        for name, value in figures.items():
            print(f"tool_search {mode} {name} {value:.3f}")


if __name__ == "__main__":
    main()
