"""Schemathesis drives every operation of the OpenAPI schema with generated requests, as
staff with a token: no 5xx, and every response matches what the schema documents."""

from __future__ import annotations

import json

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.specs.openapi.checks import positive_data_acceptance

# The same document /api/schema/ serves (a test checks that endpoint separately).
_document = json.loads(
    OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True))
)
schema = schemathesis.openapi.from_dict(_document)
schema.app = get_wsgi_application()


@pytest.fixture
def staff_token(db, staff) -> str:
    return Token.objects.get_or_create(user=staff)[0].key


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


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_answers_as_documented_and_never_with_a_server_error(case, staff_token):
    # Positive-data acceptance is left out: a schema cannot say that a name is taken or that
    # a profile exists, so a well-formed request may rightly get 404 or 409. Every other
    # check (no 5xx, documented status, content type and body, negative data rejected) runs.
    case.call_and_validate(
        headers={"Authorization": f"Token {staff_token}"},
        excluded_checks=[positive_data_acceptance],
    )
