"""Redis databases of each test process's own, so the suite can run on several
pytest-xdist workers (``make test`` runs two) without one worker's tests reading,
flushing or consuming another's data.

Every test process gets a block of ``DBS_PER_WORKER`` Redis databases, starting at the
database ``REDIS_URL`` names (0 by default): worker ``gwN`` the N-th block, a run without
xdist the first. The block's first database is the process's ``REDIS_URL`` (the
settings' cache, channel layer and Celery broker, and the ``redis_url`` fixture); tests
that start products of their own take the others (``redis_db``). PostgreSQL needs no such
care: pytest-django gives each worker its own test database, and the products' databases
are named per process (tests/products.py).

Imported by tests/settings.py, so it runs before anything reads the settings: the test
process sets its ``REDIS_URL`` in the environment, which the processes it starts inherit.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

DBS_PER_WORKER = 4
# Redis's default `databases 16` leaves room for four workers.
_DEFAULT_URL = "redis://127.0.0.1:6379/0"
# The block, chosen once by each test process (the xdist controller, or a worker) and
# inherited by the processes it starts, which import this module again (through
# tests/settings.py): "<worker>:<first database>". A worker inherits its controller's
# value with another name, and chooses its own.
_BLOCK = "TOOLHUB_TEST_REDIS_BLOCK"
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _with_db(url: str, db: int) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


def redis_db(url: str, offset: int) -> str:
    """``url`` (a Redis server) with this process's ``offset``-th database of its block:
    0 is its ``REDIS_URL``, 1 to ``DBS_PER_WORKER - 1`` are free for products it starts."""
    if not 0 <= offset < DBS_PER_WORKER:
        raise ValueError(f"a test process's Redis databases are 0 to {DBS_PER_WORKER - 1}")
    return _with_db(url, int(os.environ[_BLOCK].rsplit(":", 1)[1]) + offset)


_chosen = os.environ.get(_BLOCK)
if _chosen is None or _chosen.rsplit(":", 1)[0] != _WORKER:
    # The controller's own block is the first, so what it passed on is the base database.
    _given = os.environ.get("REDIS_URL", "")
    _index = int(_WORKER.removeprefix("gw") or 0)
    _base = int(urlsplit(_given or _DEFAULT_URL).path.strip("/") or 0)
    os.environ[_BLOCK] = f"{_WORKER}:{_base + _index * DBS_PER_WORKER}"
    if _given:
        os.environ["REDIS_URL"] = redis_db(_given, 0)
