"""Optimistic concurrency for every versioned row (profiles, agents, sessions): a write names
the ``version`` it read and is applied with ``WHERE version = read``, bumping it, so of two
writers that read the same version exactly one wins and the other gets ``Stale`` with
nothing changed. A refused write is never retried here: the caller read something that is
no longer true.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F, Manager, QuerySet
from django.http import HttpRequest

from toolhub.lib.errors import Stale


def versioned_update(
    rows: QuerySet[Any] | Manager[Any], *, pk: Any, version: int, what: str, **changes: Any
) -> None:
    """Write ``changes`` to row ``pk`` of ``rows`` if it is still at ``version``; else
    ``Stale(what)``. ``rows`` may be narrowed (say, to a person's own rows)."""
    if not rows.filter(pk=pk, version=version).update(**changes, version=F("version") + 1):
        raise Stale(what)


def versioned_delete(
    rows: QuerySet[Any] | Manager[Any], *, pk: Any, version: int, what: str
) -> None:
    """Delete row ``pk`` of ``rows`` if it is still at ``version``; else ``Stale(what)``."""
    deleted, _ = rows.filter(pk=pk, version=version).delete()
    if not deleted:
        raise Stale(what)


def posted_version(request: HttpRequest) -> int:
    """The version a page's form says it was read at; one that is not a number is no
    version there is, so the write it comes with is refused as stale."""
    sent = request.POST.get("version", "")
    return int(sent) if sent.isascii() and sent.isdigit() else -1
