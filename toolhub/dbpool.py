"""The health check of a pooled PostgreSQL connection (``DATABASES`` pool ``check``).

psycopg's pool checks a connection before handing it out, and when the check fails it
backs off (1 s, then longer) before taking the next one. After PostgreSQL restarts every
idle connection in the pool is dead, so a request would back off through them one by one
and time out. Here the first dead connection sweeps the whole pool (``pool.check()``
tests each idle connection and replaces the broken ones), so the next attempt gets a
live one.

Invariant: a connection handed out has answered a round trip just now.
"""

from __future__ import annotations

import logging
from typing import Any

from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)


def check_pooled(connection: Any) -> None:
    try:
        ConnectionPool.check_connection(connection)
    except Exception:
        pool = getattr(connection, "_pool", None)
        if pool is not None:
            logger.warning("a pooled database connection was dead; checking the others")
            pool.check()
        raise
