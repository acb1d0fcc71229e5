"""What a request gets while a service behind it is down: 503 with ``Retry-After``, not 500.

Redis (cache, channel layer, broker) or PostgreSQL being out of reach is a passing state,
not a bug in the request, so the answer says "try again later" in the shape the client
reads: ``{code: "unavailable", message}`` JSON under ``/api/`` (the API's error shape,
toolhub.api), a plain page elsewhere. Any other exception stays a 500. docs/outages.md
lists what keeps working during each outage.
"""

from __future__ import annotations

import kombu.exceptions
import redis.exceptions
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin
from django.utils.html import escape

# Seconds a client is told to wait: about how long the product takes to find Redis or the
# database again once it is back (a connection is retried per request).
RETRY_AFTER_SECONDS = 5

REDIS_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    # What Celery raises once a publish ran out of retries.
    kombu.exceptions.OperationalError,
)
DATABASE_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
OUTAGE_ERRORS = REDIS_ERRORS + DATABASE_ERRORS


def outage_part(exc: BaseException) -> str | None:
    """Which service ``exc`` says is out of reach ("Redis", "the database"), if any."""
    if isinstance(exc, REDIS_ERRORS):
        return "Redis"
    if isinstance(exc, DATABASE_ERRORS):
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
    a 503 (DRF views hand such exceptions on: toolhub.api's handler knows none of them)."""

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        part = outage_part(exc)
        if part is None:
            return None
        return unavailable_response(request, part)
