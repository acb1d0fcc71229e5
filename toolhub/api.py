"""What every JSON endpoint shares: the error shape, versions, and the body size limit.

Errors are ``{code, message, fields?}`` with a stable ``code``. Writes to versioned
objects must say which version they read (``If-Match: "3"`` or ``"version": 3`` in the
body); a missing version is 428, a stale ``If-Match`` 412, a stale body version 409.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from toolhub.errors import ServiceError, Stale

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


def etag(version: int) -> str:
    return f'"{version}"'


def read_version(request: Request) -> int:
    """The version a write is based on, from If-Match or the body."""
    header = request.headers.get("If-Match", "").strip()
    if header:
        try:
            return int(header.removeprefix("W/").strip('"'))
        except ValueError:
            raise PreconditionFailed("If-Match must be a version this API gave out") from None
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
        if request.path.startswith("/api/") and request.method in {"POST", "PUT", "PATCH"}:
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
        return self.get_response(request)


_ERROR_RESPONSES = {
    "400": "Invalid request: the body or a parameter is wrong",
    "401": "Not authenticated",
    "403": "Authenticated, but not allowed (staff only, or a shared object)",
    "404": "No such object, or not yours",
    "405": "Method not allowed",
    "409": "Conflict: a stale version or a name already taken; nothing changed",
    "412": "Stale If-Match; nothing changed",
    "413": "Request body too large",
    "415": "Unsupported media type",
    "428": "Writes must say which version they read",
}


def add_error_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular post-processing hook: every operation documents the error shape."""
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
    reference = {"$ref": "#/components/schemas/Error"}
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.setdefault("responses", {})
            for status_code, description in _ERROR_RESPONSES.items():
                content = {"application/json": {"schema": reference}}
                responses.setdefault(status_code, {"description": description, "content": content})
    return result
