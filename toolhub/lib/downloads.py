"""Files served for download: bytes that came from a tool (an MCP server's PDF, a page it
says is a PDF), served so they can never act in the site's origin.

What every download keeps true, whatever its bytes, name or declared type:

- it is an attachment (``Content-Disposition: attachment``), with its name quoted as RFC
  6266 and 5987 say, so the browser saves it and never shows it inline;
- its ``Content-Type`` is the declared type only when that is a well-formed
  ``type/subtype``, else ``application/octet-stream``; with ``nosniff`` the browser never
  guesses another (an "image" that is HTML stays not-HTML);
- ``Content-Security-Policy: sandbox`` (and nothing loads) in case a browser renders it
  anyway: an HTML or SVG file then runs in an opaque origin, without the person's
  cookies or the site's pages in reach;
- it is private: no shared cache keeps it, and no other site may embed it.
"""

from __future__ import annotations

from django.http import HttpResponse
from django.utils.http import content_disposition_header
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request

from toolhub.tools.files import clean_name, media_type

SANDBOX = "sandbox; default-src 'none'"


def attachment(*, data: bytes | memoryview, name: str, declared_type: str) -> HttpResponse:
    """``data`` as a download named ``name``, of ``declared_type`` if it is well formed."""
    response = HttpResponse(bytes(data), content_type=media_type(declared_type))
    # Cleaned again: a stored name reaches a header, where a line break would be an error.
    disposition = content_disposition_header(as_attachment=True, filename=clean_name(name))
    response["Content-Disposition"] = disposition
    response["Content-Length"] = str(len(data))
    response["X-Content-Type-Options"] = "nosniff"
    # Set here, so the site's own policy (which lets its pages run) is not added.
    response["Content-Security-Policy"] = SANDBOX
    response["Cross-Origin-Resource-Policy"] = "same-origin"
    response["Cache-Control"] = "private, no-store"
    return response


class AnyAccept(BaseContentNegotiation):  # type: ignore[misc]
    """A download's API view answers any ``Accept``: the file's own bytes when it is
    found, its JSON error otherwise (DRF would refuse ``Accept: application/pdf`` with
    406 before the view could look)."""

    def select_parser(self, request: Request, parsers: list[object]) -> object | None:
        return parsers[0] if parsers else None

    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type
