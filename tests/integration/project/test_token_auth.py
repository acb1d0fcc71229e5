"""API tokens (toolhub.lib.token_auth): a token is its owner, for as long as they are an
active user; anything else is a 401 with DRF's words, over HTTP and on a socket's
handshake alike."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from profiles_app import services as profile_services
from sessions_app.services import session_create
from tests.integration.chat import CONNECT_SECONDS, token_socket

pytestmark = pytest.mark.django_db(transaction=True)


def _get(key: str, path: str = "/api/profiles/"):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get(path)


def test_a_token_reads_its_owners_profiles_and_not_anothers(owner, other_user):
    profile_services.profile_create(user=owner, name="Mine", tools=["bash"])
    profile_services.profile_create(user=other_user, name="Theirs", tools=["bash"])
    key = Token.objects.create(user=owner).key

    response = _get(key)

    assert response.status_code == 200
    names = {profile["name"] for profile in json.loads(response.content)}
    assert "Mine" in names
    assert "Theirs" not in names


@pytest.mark.parametrize(
    "key",
    [
        "0" * 40,
        "x'OR'1'='1';--",
        # UTF-8 bytes, as a server hands a header over (Latin-1).
        "ключ".encode().decode("latin-1"),
        "a" * 300,
        "abc\x00def",
    ],
    ids=["unknown", "sql-quote", "utf-8-bytes", "long", "nul"],
)
def test_a_key_nobody_holds_is_a_401_invalid_token(owner, key):
    Token.objects.create(user=owner)

    response = _get(key)

    assert response.status_code == 401
    assert json.loads(response.content)["message"].startswith("Invalid token")


def test_the_token_of_a_deactivated_person_is_a_401_from_the_next_request_on(owner):
    key = Token.objects.create(user=owner).key
    assert _get(key).status_code == 200

    owner.is_active = False
    owner.save(update_fields=["is_active"])
    response = _get(key)

    assert response.status_code == 401
    assert json.loads(response.content)["message"] == "User inactive or deleted."


def test_a_deleted_token_stops_working_at_once(owner):
    token = Token.objects.create(user=owner)
    assert _get(token.key).status_code == 200

    token.delete()

    assert _get(token.key).status_code == 401


def test_the_request_carries_the_token_itself(owner):
    from toolhub.lib.token_auth import TokenAuthentication

    token = Token.objects.create(user=owner)

    user, auth = TokenAuthentication().authenticate_credentials(token.key)

    assert user == owner
    assert (auth.key, auth.user_id) == (token.key, owner.pk)
    assert auth.created == token.created


def test_a_deactivated_persons_token_opens_no_socket(owner):
    session = session_create(user=owner)
    key = Token.objects.create(user=owner).key
    owner.is_active = False
    owner.save(update_fields=["is_active"])

    async def close_code() -> int | None:
        socket = token_socket(session.pk, key)
        connected, code = await socket.connect(timeout=CONNECT_SECONDS)
        if connected:
            code = (await socket.receive_output(timeout=5))["code"]
        await socket.disconnect()
        return code

    assert async_to_sync(close_code)() == 4401


def test_a_tokens_user_has_every_field_as_the_orm_reads_it(owner, django_user_model):
    from django.utils import timezone

    from toolhub.lib.token_auth import user_for_token

    django_user_model.objects.filter(pk=owner.pk).update(
        last_login=timezone.now(), first_name="Zoë", email="zoe@example.com"
    )
    key = Token.objects.create(user=owner).key
    orm = django_user_model.objects.get(pk=owner.pk)

    read = user_for_token(key)

    fields = [field.attname for field in django_user_model._meta.concrete_fields]
    assert [getattr(read, name) for name in fields] == [getattr(orm, name) for name in fields]
    assert (read._state.adding, read._state.db) == (False, orm._state.db)
    assert user_for_token("0" * 40) is None
