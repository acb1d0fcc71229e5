"""What every JSON endpoint shares: the error shape, versions, and the body size limit.

Errors are ``{code, message, fields?}`` with a stable ``code``. Writes to versioned
objects must say which version they read (``If-Match: "3"`` or ``"version": 3`` in the
body); a missing version is 428, a stale or malformed ``If-Match`` 412, a stale body
version 409.

The schema documents, per operation, only the statuses it can answer: every operation
the generic ones (400, 401, 403, 405, and 503 for an outage), one with a path parameter
404, one with a body 413 and 415, and each view the rest it can give (409, 412, 428)
through ``error_responses``.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from toolhub.lib.asgi_handler import upload_path
from toolhub.lib.errors import ServiceError, Stale

_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "not_authenticated",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.ParseError: "bad_json",
    exceptions.Throttled: "throttled",
    exceptions.ValidationError: "invalid",
}


class PreconditionRequired(exceptions.APIException):
    status_code = 428
    default_detail = 'say which version you read: If-Match: "<version>" or "version" in the body'
    default_code = "precondition_required"


class PreconditionFailed(exceptions.APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = "the object changed since you read it; reload and retry"
    default_code = "conflict"


def error(code: str, message: str, status_code: int, fields: Any = None) -> Response:
    body: dict[str, Any] = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    return Response(body, status=status_code)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    if isinstance(exc, Stale) and request is not None and request.headers.get("If-Match"):
        # The version came from If-Match: HTTP's own answer is 412 Precondition Failed.
        return error(exc.code, exc.message, 412)
    if isinstance(exc, ServiceError):
        return error(exc.code, exc.message, exc.status, exc.fields)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        return error("too_large", "the request body is too large", 413)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = next((code for kind, code in _CODES.items() if isinstance(exc, kind)), None)
    if isinstance(exc, PreconditionRequired | PreconditionFailed):
        code = exc.default_code
    fields = None
    if isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field": exc.detail}
        message = "the request is not valid"
    else:
        message = str(getattr(exc, "detail", exc))
    response.data = {"code": code or "error", "message": message}
    if fields:
        response.data["fields"] = fields
    return response


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    return JsonResponse({"code": "not_found", "message": "no such endpoint"}, status=404)


# An ETag this API gives out (``etag``), weak or not.
IF_MATCH_PATTERN = r'^(?:W/)?"([0-9]+)"$'
IF_MATCH = OpenApiParameter(
    "If-Match",
    {"type": "string", "pattern": IF_MATCH_PATTERN},
    OpenApiParameter.HEADER,
    required=True,
    description='The version you read, as its ETag: "3". A form may send "version": 3 in '
    "the body instead. Missing: 428; stale or not an ETag this API gave out: 412.",
)


def etag(version: int) -> str:
    return f'"{version}"'


def read_version(request: Request) -> int:
    """The version a write is based on, from If-Match or the body."""
    header = request.headers.get("If-Match", "").strip()
    if header:
        match = re.fullmatch(IF_MATCH_PATTERN, header)
        if match is None:
            raise PreconditionFailed("If-Match must be a version this API gave out")
        return int(match[1])
    data = request.data if isinstance(request.data, dict) else {}
    version = data.get("version")
    if isinstance(version, int) and not isinstance(version, bool):
        return version
    raise PreconditionRequired()


def json_object(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise exceptions.ParseError("the body must be a JSON object")
    return request.data


def validated_body(
    request: Request, serializer_class: type[serializers.Serializer], *, partial: bool = False
) -> dict[str, Any]:
    """Check the body against the documented shape (types, lengths, patterns) and return
    it as sent: services then apply their own strict rules to the raw values, so nothing
    is silently coerced (a number where a name belongs stays an error)."""
    data = json_object(request)
    serializer = serializer_class(data=data, partial=partial)
    for field in serializer.fields.values():
        _check_as_sent(field)
    serializer.is_valid(raise_exception=True)
    wrong = {
        name: [f"must be {kind}"]
        for name, field in serializer.fields.items()
        if name in data and data[name] is not None
        for kind in [_strict_kind(field)]
        if kind and not _is_kind(data[name], kind)
    }
    if wrong:
        raise exceptions.ValidationError(wrong)
    return dict(data)


def _check_as_sent(field: serializers.Field) -> None:
    # DRF would check lengths and patterns on text it trimmed, while the services get the
    # text as sent: a space and a command of 500 characters passed, then overflowed its
    # column (a 500). Checked untrimmed, text passes exactly when the schema says it does.
    if isinstance(field, serializers.CharField):
        field.trim_whitespace = False
    child = getattr(field, "child", None)
    if isinstance(child, serializers.Field):
        _check_as_sent(child)


def _strict_kind(field: serializers.Field) -> str | None:
    # DRF coerces "true"/1 to booleans and 5 to "5"; the API accepts only JSON's own types.
    if isinstance(field, serializers.BooleanField):
        return "true or false"
    if isinstance(field, serializers.IntegerField):
        return "a whole number"
    if isinstance(field, serializers.CharField):
        return "text"
    return None


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "true or false":
        return isinstance(value, bool)
    if kind == "a whole number":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, str)


class BodyLimitMiddleware:
    """Refuse an API request body over DATA_UPLOAD_MAX_MEMORY_SIZE with 413, before any
    view reads it (DRF's parsers would otherwise read it whole)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # An upload's files stream to disk as its view parses them (toolhub.lib.asgi_handler
        # bounds its body first).
        uploading = upload_path(request.path)
        if (
            request.path.startswith("/api/")
            and request.method in {"POST", "PUT", "PATCH"}
            and not uploading
        ):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            try:
                declared = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                declared = 0
            try:
                if declared > limit:
                    raise RequestDataTooBig
                _ = request.body
            except RequestDataTooBig:
                return JsonResponse(
                    {"code": "too_large", "message": f"the body is over {limit:,} bytes"},
                    status=413,
                )
        response: HttpResponse = self.get_response(request)
        return response


_ERROR_RESPONSES = {
    400: "Invalid request: the body or a parameter is wrong",
    401: "Not authenticated",
    403: "Authenticated, but not allowed (staff only, or a shared object)",
    404: "No such object, or not yours",
    405: "Method not allowed",
    409: "Conflict: a stale version or a name already taken; nothing changed",
    412: "Stale If-Match, or not an ETag this API gave out; nothing changed",
    413: "Request body too large",
    415: "Unsupported media type",
    428: "Writes must say which version they read",
    503: "The database or Redis is out of reach for a moment: retry after Retry-After seconds",
}
_EVERY_OPERATION = (400, 401, 403, 405, 503)
_WITH_PATH_PARAMETER = (404,)
# toolhub.lib.outage answers an outage with 503 and this header (docs/outages.md).
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again",
        "schema": {"type": "integer", "minimum": 1},
    }
}
_WITH_BODY = (413, 415)


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """For ``extend_schema(responses=...)``: the errors an operation answers beyond the
    ones ``add_error_responses`` gives it from its shape."""
    return {code: OpenApiResponse(description=_ERROR_RESPONSES[code]) for code in codes}


def add_error_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular post-processing hook: every operation documents the errors its shape
    can lead to, and every error has the error shape.

    It also marks a body of several shapes told apart by a discriminator as required:
    drf-spectacular cannot see into a ``PolymorphicProxySerializer``, and the discriminator
    is a required property of every shape."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string"},
            "message": {"type": "string"},
            "fields": {"type": "object", "additionalProperties": True},
        },
    }
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, path_item in result.get("paths", {}).items():
        for operation in path_item.values():
            codes = list(_EVERY_OPERATION)
            if "{" in path:
                codes += _WITH_PATH_PARAMETER
            if "requestBody" in operation:
                codes += _WITH_BODY
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            reference = (body or {}).get("schema", {}).get("$ref", "")
            if "discriminator" in components.get(reference.rpartition("/")[2], {}):
                operation["requestBody"]["required"] = True
            responses = operation.setdefault("responses", {})
            for code in codes:
                responses.setdefault(str(code), {"description": _ERROR_RESPONSES[code]})
            for code, response in responses.items():
                if code.startswith(("4", "503")):
                    response.setdefault("content", content)
            responses["503"].setdefault("headers", _RETRY_AFTER)
    return result
