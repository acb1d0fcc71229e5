"""Resolution + canonical JSON + fingerprint, cold and memoized, and its token cost.

For registries of 50, 500 and 5,000 corpus tools (one in five deferred, as MCP tools
would be), prints p50 figures per size:
- ``register_count``: what registration adds (``wire.count_ahead``: each piece a
  resolution may send of each tool is counted), as a server's listing or a starting
  server pays it, off any turn's path;
- ``first``: the first resolution after that registration;
- ``first_uncounted``: the first resolution when registration counted nothing (what a
  turn pays if it resolves before the counting is done);
- ``cold``: a memo miss (new inputs) with tools' own caches warm, as on a new turn;
- ``memo``: the same inputs again, as on an unchanged turn: the ``resolve`` call alone
  (its inputs parsed, the key built, the memo looked up), twenty times a round, nothing
  read from the result;
- ``token_cost``: counting the resolved toolset, per-piece token counts cached.
Targets at 500 tools: cold <= 1 ms, memo <= 50 us, token_cost <= 1 ms.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpus import corpus_registry

from toolhub.tools import ToolContext
from toolhub.tools.resolve import _Memo, resolve, token_cost
from toolhub.tools.tokens import count_cached, encoding
from toolhub.tools.wire import count_ahead

ROUNDS = {50: 400, 500: 100, 5000: 15}
# Fresh registries per size for ``register_count`` and ``first`` (medians: one sample of a
# sub-millisecond first call is mostly the machine's noise).
FRESH = {50: 9, 500: 5, 5000: 3}


def _p50_us(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e6:.1f}us"


def main() -> None:
    encoding()
    ctx = ToolContext(env={})
    for size, rounds in ROUNDS.items():
        # Nothing counted yet: new Tool objects, and no text in the piece counts.
        count_cached._counts.clear()
        uncounted = corpus_registry(size, defer_every=5)
        names = uncounted.names()
        started = time.perf_counter()
        token_cost(resolve(uncounted, intent={"disabled": [names[0]]}, ctx=ctx))
        first_uncounted = time.perf_counter() - started
        # Only one registry alive from here, as in a server (the collector's work grows
        # with the objects alive).
        del uncounted
        gc.collect()

        registers, firsts = [], []
        for _ in range(FRESH[size]):
            count_cached._counts.clear()
            registry = corpus_registry(size, defer_every=5)
            started = time.perf_counter()
            count_ahead(registry.all_tools())
            registers.append(time.perf_counter() - started)
            sys.modules["toolhub.tools.resolve"]._memo = _Memo(512)
            started = time.perf_counter()
            resolved = resolve(registry, intent={"disabled": [names[0]]}, ctx=ctx)
            token_cost(resolved)
            firsts.append(time.perf_counter() - started)
        registered, first = statistics.median(registers), statistics.median(firsts)

        cold, memo, counted = [], [], []
        for round_index in range(rounds):
            # A different disabled name each round: a memo miss, like a changed intent.
            intent = {"disabled": [names[(round_index % (size - 1)) + 1]]}
            # A fresh memo: every round's first resolution is a miss.
            sys.modules["toolhub.tools.resolve"]._memo = _Memo(512)
            t0 = time.perf_counter()
            resolved = resolve(registry, intent=intent, ctx=ctx)
            _ = resolved.fingerprint, resolved.tools_json
            cold.append(time.perf_counter() - t0)
            # Twenty lookups, each timed: a collection the cold round's garbage sets off
            # lands in one of them, not in the median.
            for _ in range(20):
                t0 = time.perf_counter()
                again = resolve(registry, intent=intent, ctx=ctx)
                memo.append(time.perf_counter() - t0)
            assert again is resolved, "the same inputs must hit the memo"
            t0 = time.perf_counter()
            figures = token_cost(again)
            counted.append(time.perf_counter() - t0)
        print(
            f"resolve-bench tools={size} register_count={registered * 1e3:.1f}ms "
            f"first={first * 1e3:.2f}ms first_uncounted={first_uncounted * 1e3:.1f}ms "
            f"cold={_p50_us(cold)} "
            f"memo={_p50_us(memo)} token_cost={_p50_us(counted)} resident={len(resolved.resident)} "
            f"deferred={len(resolved.deferred)} resident_tokens={figures.resident} "
            f"catalog_tokens={figures.catalog}"
        )


if __name__ == "__main__":
    main()
