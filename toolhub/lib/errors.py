"""Service errors with a stable ``code``: services raise them, the API renders them as
``{code, message, fields?}`` with the matching status (toolhub.lib.api)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import Http404


class ServiceError(Exception):
    code = "invalid"
    status = 400

    def __init__(self, message: str, *, fields: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields


class Invalid(ServiceError):
    pass


class MetaToolRefused(Invalid):
    """A request to disable or remove ``tool_search`` or ``call_tool``, which cannot be."""

    code = "meta_tool"


class NotFound(ServiceError):
    code = "not_found"
    status = 404


class Forbidden(ServiceError):
    code = "permission_denied"
    status = 403


class Conflict(ServiceError):
    """A stale version, or a name already taken: nothing was changed."""

    code = "conflict"
    status = 409


class Stale(Conflict):
    """The object changed since the caller read the version it names."""

    def __init__(self, thing: str) -> None:
        super().__init__(f"the {thing} changed since you read it; reload and retry")


def found_or_404[T](get: Callable[..., T], /, **kwargs: Any) -> T:
    """What a page's ``<thing>_get_for_user`` service returns, its ``NotFound`` as the
    page's 404: another person's object and a missing one answer the same."""
    try:
        return get(**kwargs)
    except NotFound as exc:
        raise Http404(exc.message) from None
