"""What a request gets while a service behind it is down: 503 with ``Retry-After``, not 500.

Redis (cache, channel layer, broker) or PostgreSQL being out of reach is a passing state,
not a bug in the request, so the answer says "try again later" in the shape the client
reads: ``{code: "unavailable", message}`` JSON under ``/api/`` (the API's error shape,
toolhub.lib.api), a plain page elsewhere. Any other exception stays a 500. docs/outages.md
lists what keeps working during each outage.
"""

from __future__ import annotations

import logging

import kombu.exceptions
import redis.exceptions
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin
from django.utils.html import escape

logger = logging.getLogger(__name__)

# Seconds a client is told to wait: about how long the product takes to find Redis or the
# database again once it is back (a connection is retried per request).
RETRY_AFTER_SECONDS = 5

REDIS_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    # What Celery raises once a publish ran out of retries.
    kombu.exceptions.OperationalError,
)
# Connection errors that are configuration or a leak, not an outage: they stay a 500.
_REDIS_NOT_OUTAGES = (
    redis.exceptions.AuthenticationError,
    redis.exceptions.AuthorizationError,
    redis.exceptions.MaxConnectionsError,
)
DATABASE_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
OUTAGE_ERRORS = REDIS_ERRORS + DATABASE_ERRORS
# SQLSTATE classes of a server that is away: connection exceptions (08) and operator
# intervention (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now).
_AWAY_SQLSTATES = ("08", "57P01", "57P02", "57P03")
# SQLite's words for a database it cannot reach now (not a missing table or bad SQL).
_SQLITE_AWAY = ("unable to open database", "database is locked", "disk I/O error")


def outage_part(exc: BaseException) -> str | None:
    """Which service ``exc`` says is out of reach ("Redis", "the database"), if any. Only a
    lost or refused connection counts: a missing table, a deadlock, a wrong password or a
    pool run dry is a bug or a setting, and stays a 500 with its traceback."""
    if isinstance(exc, REDIS_ERRORS):
        return None if isinstance(exc, _REDIS_NOT_OUTAGES) else "Redis"
    if isinstance(exc, InterfaceError):
        return "the database"
    if isinstance(exc, OperationalError):
        cause = exc.__cause__
        sqlstate = getattr(cause, "sqlstate", None)
        if sqlstate is not None:
            return "the database" if sqlstate.startswith(_AWAY_SQLSTATES) else None
        if type(cause).__module__.startswith("sqlite3"):
            return "the database" if any(w in str(exc) for w in _SQLITE_AWAY) else None
        # psycopg gives no SQLSTATE when it could not connect at all.
        return "the database"
    return None


def unavailable_response(request: HttpRequest, part: str) -> HttpResponse:
    message = f"{part} is out of reach for a moment; try again in {RETRY_AFTER_SECONDS} s"
    if request.path.startswith("/api/") or request.path == "/healthz":
        response: HttpResponse = JsonResponse(
            {"code": "unavailable", "message": message}, status=503
        )
    else:
        response = HttpResponse(_PAGE.format(message=escape(message)), status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


# Standalone: rendering a template could need the very service that is down (the session,
# the context processors' user).
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>toolhub is unavailable</title></head>
<body><h1>toolhub is unavailable for a moment</h1><p>{message}.</p></body></html>
"""


class ServiceUnavailableMiddleware(MiddlewareMixin):
    """Turns an exception a view raised because Redis or the database is out of reach into
    a 503 (DRF views hand such exceptions on: toolhub.lib.api's handler knows none of them)."""

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        part = outage_part(exc)
        if part is None:
            return None
        # Logged whole: an outage the operator should see, even though the client is told
        # only to retry.
        logger.error("%s %s: %s is out of reach", request.method, request.path, part, exc_info=exc)
        return unavailable_response(request, part)
