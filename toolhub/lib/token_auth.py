"""DRF token authentication, with a token's user read in one plain statement.

DRF's ``TokenAuthentication`` reads ``Token.objects.select_related("user").get(key=…)``: the
ORM builds and compiles that query on every API request, about three times the statement
itself (docs/architecture.md, "Request path"). Here the statement is written once per
process from the models' own metadata, and its row made into the user with every column
converted as the ORM does (``toolhub.lib.rows.row_model``: a ``raw()`` queryset cost as
much again as the statement).

Invariants, as DRF's: an unknown key answers 401 "Invalid token.", an inactive user's
key 401 "User inactive or deleted."; ``request.auth`` is the ``Token`` (its ``created``
loads if read). The key is a parameter, never part of the SQL. WebSocket handshakes with a
token (toolhub.ws_auth) read their user here too.
"""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

from toolhub.lib.rows import row_model


@functools.cache
def _statement(vendor: str) -> str:
    del vendor  # the cache key: quoting differs between databases
    user_model = get_user_model()
    quote = connection.ops.quote_name
    users, tokens = quote(user_model._meta.db_table), quote(Token._meta.db_table)
    columns = row_model(user_model).columns("u")
    # Only the models' own table and column names are interpolated; the key is a parameter.
    return (
        f"SELECT {columns} FROM {tokens} t JOIN {users} u "  # noqa: S608
        f"ON u.{quote(str(user_model._meta.pk.column))} = t.{quote(Token.user.field.column)} "
        f"WHERE t.{quote(str(Token._meta.pk.column))} = %s"
    )


def user_for_token(key: str) -> Any | None:
    """The user ``key`` belongs to, active or not; ``None`` for an unknown key."""
    # No stored key is longer or holds a NUL (which PostgreSQL refuses in a parameter
    # with an error): such a key is unknown, and costs no statement.
    if len(key) > Token._meta.get_field("key").max_length or "\x00" in key:
        return None
    with connection.cursor() as cursor:
        cursor.execute(_statement(connection.vendor), [key])
        row = cursor.fetchone()
    if row is None:
        return None
    return row_model(get_user_model()).make(row)


class TokenAuthentication(authentication.TokenAuthentication):  # type: ignore[misc]
    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        user = user_for_token(key)
        if user is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        token = Token.from_db(connection.alias, ["key", "user_id"], [key, user.pk])
        token.user = user
        return user, token
