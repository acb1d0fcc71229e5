"""The garbage collector as a server process runs it: fewer and smaller collections.

What a server holds from its start (modules, the registry, settings) lives as long as the
process, so it is frozen out of every collection; and a turn makes tens of thousands of
short-lived objects, nearly all freed by their reference counts, so collecting after every
700 allocations (CPython's default) walked the young ones again and again. Under
bench/ws_load.py the collector took about a sixth of the server's CPU before; with these
settings it runs a few times a minute (docs/architecture.md, "Where a turn's CPU goes").
Cyclic garbage still goes: at most ``THRESHOLDS[0]`` allocations later.
"""

from __future__ import annotations

import gc

# CPython's are 700, 10, 10.
THRESHOLDS = (50_000, 20, 10)


def collect_less() -> None:
    """Called once a server serves (toolhub/serve.py): what exists now is kept for good."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
