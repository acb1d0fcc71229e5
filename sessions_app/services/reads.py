"""The read every session endpoint, chat page and socket starts with: a person's chat and
its agent, in one statement written once per process.

Invariants: another person's chat, one in the bin or none is ``NotFound``, as
``sessions_of`` would have it; each row is made into its model with the ORM's own
conversions, as ``select_related`` would; only the models' own table and column names are
interpolated into the statement, every value is a parameter.
"""

from __future__ import annotations

import functools
from typing import Any, cast

from django.db import connection
from django.db.models import Field, Model

from profiles_app.models import Agent
from sessions_app.models import ChatSession
from toolhub.lib.errors import NotFound
from toolhub.lib.rows import row_model


def session_get_for_user(*, user: Any, session_id: Any) -> ChatSession:
    """The person's chat ``session_id`` (not in the bin) with its agent; another person's,
    a binned one or none is ``NotFound``.

    Every session endpoint, chat page and socket reads here first, so the statement is
    written once per process: the chat's row and its agent's in one row, each made into
    its model with the ORM's own conversions, as ``select_related`` would. The ORM built
    the query anew per call at about twice the statement's cost (docs/architecture.md,
    "Request path")."""
    pk = ChatSession._meta.pk
    assert pk is not None
    # An id that is no UUID raises ValidationError here, as the ORM's filter did.
    params = [pk.get_db_prep_value(session_id, connection), user.pk]
    with connection.cursor() as cursor:
        cursor.execute(_session_query(connection.vendor), params)
        row = cursor.fetchone()
    if row is None:
        raise NotFound("no such session")
    chat = row_model(ChatSession)
    session: ChatSession = chat.make(row)
    session.agent = row_model(Agent).make(row[len(chat.attnames) :])
    return session


@functools.cache
def _session_query(vendor: str) -> str:
    del vendor  # part of the cache's key: the quoting is the database's
    quote = connection.ops.quote_name
    sessions, agents = quote(ChatSession._meta.db_table), quote(Agent._meta.db_table)
    columns = f"{row_model(ChatSession).columns('s')}, {row_model(Agent).columns('a')}"
    pk, owner, agent, deleted = (
        _column(ChatSession, name) for name in ("id", "owner", "agent", "deleted")
    )
    # Only the models' own table and column names are interpolated; values are parameters.
    return (
        f"SELECT {columns} FROM {sessions} s JOIN {agents} a "  # noqa: S608
        f"ON a.{_column(Agent, 'id')} = s.{agent} "
        f"WHERE s.{pk} = %s AND s.{owner} = %s AND s.{deleted} IS NULL"
    )


def _column(model: type[Model], name: str) -> str:
    field = cast("Field[Any, Any]", model._meta.get_field(name))
    return connection.ops.quote_name(str(field.column))
