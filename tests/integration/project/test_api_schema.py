"""Schemathesis drives every operation of the OpenAPI schema with generated requests, as
staff with a token, with every check on: no 5xx, every response as documented, every
schema-valid request accepted and every schema-invalid one refused."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.config import SchemathesisConfig

from profiles_app.services import default_agent
from toolhub.tools.presets import DEFAULT_PRESET

# The same document /api/schema/ serves (a test checks that endpoint separately).
_document = json.loads(
    OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True))
)

# A schema-valid request may still get an answer that depends on data, not on its shape:
# 404 (the object in the path does not exist), 409 (a name is taken, or a body version is
# stale) or 412 (the If-Match is stale). Each operation documents which of these it can
# give; positive data acceptance takes those and its success statuses, nothing else: never
# 400 or 428, since a request the schema allows carries everything validation asks for.
_DATA_STATUSES = {"404", "409", "412"}
# Schemathesis's defaults less 429 (nothing throttles here) and 5xx (not_a_server_error's to
# report), and two more refusals: a malformed If-Match is 412 (no version has that ETag),
# an oversized body 413.
_REFUSALS = ["400", "401", "403", "404", "405", "406", "409", "412", "413", "415", "422", "428"]
# Without the required If-Match the answer is HTTP's own for that, 428 Precondition Required.
_MISSING_HEADER = ["400", "401", "403", "406", "415", "422", "428"]


def _accepted(operation: dict[str, Any]) -> list[str]:
    return [code for code in operation["responses"] if code[0] == "2" or code in _DATA_STATUSES]


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    reference = node.get("$ref")
    return _document["components"]["schemas"][reference.rpartition("/")[2]] if reference else node


def _keep_documented_keys(value: Any, node: dict[str, Any]) -> None:
    """Drop the keys of ``value`` that an ``x-propertyNames`` in ``node`` refuses."""
    node = _resolve(node)
    for branch in node.get("oneOf", []):
        _keep_documented_keys(value, branch)
    if isinstance(value, dict):
        names = node.get("x-propertyNames")
        if names is not None:
            for key in [key for key in value if not re.search(names["pattern"], key)]:
                del value[key]
        properties = node.get("properties", {})
        for key, item in value.items():
            if key in properties:
                _keep_documented_keys(item, properties[key])
            elif isinstance(node.get("additionalProperties"), dict):
                _keep_documented_keys(item, node["additionalProperties"])
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            _keep_documented_keys(item, node["items"])


_config = SchemathesisConfig.from_dict(
    {
        "checks": {
            "negative_data_rejection": {"expected-statuses": _REFUSALS},
            "missing_required_header": {"expected-statuses": _MISSING_HEADER},
        },
        "operations": [
            {
                "include-operation-id": operation["operationId"],
                "checks": {"positive_data_acceptance": {"expected-statuses": _accepted(operation)}},
            }
            for path_item in _document["paths"].values()
            for operation in path_item.values()
        ],
    }
)
schema = schemathesis.openapi.from_dict(_document, config=_config)
schema.app = get_wsgi_application()


@pytest.fixture
def staff_token(db, staff) -> str:
    return Token.objects.get_or_create(user=staff)[0].key


@pytest.fixture
def agent_id(db) -> int:
    return default_agent().pk


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    # The WSGI handler closes the database connection after each request; inside a test's
    # transaction that would end the test's own connection (Django's test client does the
    # same disconnect while it runs a request).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def _as_documented(case: schemathesis.Case, *, agent_id: int) -> None:
    """Bring a schema-valid case in line with what its schema says but schemathesis cannot
    act on, and with data no schema can know, so that a refusal can only mean the schema is
    looser than validation."""
    body = case.body
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    if not isinstance(body, dict):
        return
    # Schemathesis reads OpenAPI 3.0 as JSON Schema draft 4, which has no propertyNames: it
    # draws any key for a map whose keys x-propertyNames limits. Dropping a key of such a
    # map (none has a required key) leaves the case schema-valid.
    operation = _document["paths"][case.operation.path][case.method.lower()]
    content = operation["requestBody"]["content"]
    if "application/json" not in content:
        return  # an upload's form: its parts are files, no map to align
    _keep_documented_keys(body, content["application/json"]["schema"])
    # A schema can say that an agent is an id and a toolset a name, not which ones exist;
    # the server refuses a dangling one with 400 (test_api pins it for a toolset). Name the
    # default agent and a preset instead.
    if isinstance(body.get("agent"), int):
        body["agent"] = agent_id
    if isinstance(body.get("new_chat_agent"), int):
        body["new_chat_agent"] = agent_id
    if isinstance(body.get("new_chat_toolset"), str):
        body["new_chat_toolset"] = DEFAULT_PRESET
    # Nor that an export's events have seqs none repeats.
    for number, event in enumerate(body.get("events") or []):
        if isinstance(event, dict) and "seq" in event:
            event["seq"] = number + 1
    # Nor which providers and models are offered here: name the offline demo's.
    if isinstance(body.get("provider"), str):
        body["provider"] = "demo"
    if isinstance(body.get("model"), str) and "provider" not in body:
        body["model"] = "demo:demo"
    for key in ("intent", "tool_intent"):
        intent = body.get(key)
        if isinstance(intent, dict) and isinstance(intent.get("toolset"), str):
            intent["toolset"] = DEFAULT_PRESET


def test_the_served_schema_is_valid_openapi_3_0():
    validate_schema(_document)


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_answers_as_documented_and_never_with_a_server_error(
    case, staff_token, agent_id
):
    _as_documented(case, agent_id=agent_id)
    # Every example starts from the same data: one example's leftovers (a name it took)
    # cannot decide another's answer, and a replayed failure sees what it first saw.
    with transaction.atomic():
        try:
            case.call_and_validate(headers={"Authorization": f"Token {staff_token}"})
        finally:
            transaction.set_rollback(True)
