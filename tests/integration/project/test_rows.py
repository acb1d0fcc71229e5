"""A queryset compiled once and run again with other values (``toolhub.lib.rows``): the
ORM's own SQL, its values converted as the ORM converts them."""

from __future__ import annotations

import pytest
from django.db.models import Count

from sessions_app.models import ChatSession, SessionEvent
from sessions_app.services import session_create
from toolhub.lib.rows import compiled_once

pytestmark = pytest.mark.django_db

ANY = -4_242


def _calls(session: ChatSession, *names: object) -> None:
    for seq, name in enumerate(names, start=1):
        SessionEvent.objects.create(
            session=session, seq=seq, turn="t", kind="tool_call", data={"name": name}
        )


def _usage(owner_id):
    return (
        SessionEvent.objects.filter(session__owner_id=owner_id, kind="tool_call")
        .values_list("data__name")
        .annotate(calls=Count("id"))
    )


def test_each_run_gives_the_rows_the_queryset_gives_for_its_values(owner, other_user):
    _calls(session_create(user=owner), "read", "read", "bash", 7, None)
    _calls(session_create(user=other_user), "web_fetch")
    compiled = compiled_once(_usage(ANY), ANY)

    for user in (owner, other_user):
        # JSON decoded as the ORM decodes it: a number stays a number, null is None.
        assert sorted(map(tuple, compiled.rows(user.pk)), key=repr) == sorted(
            _usage(user.pk), key=repr
        )
    assert compiled.rows(-1) == []


def test_a_placeholder_that_is_not_exactly_one_of_the_parameters_is_refused():
    both = SessionEvent.objects.filter(turn="same", kind="same")

    with pytest.raises(ValueError, match="is 2 of the parameters"):
        compiled_once(both, "same")
    with pytest.raises(ValueError, match="is 0 of the parameters"):
        compiled_once(SessionEvent.objects.filter(seq=1), "same")
