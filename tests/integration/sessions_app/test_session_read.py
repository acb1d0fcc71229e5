"""A person's chat as every session endpoint, page and socket reads it first
(``session_get_for_user``): one statement written once per process, giving the models the
ORM would."""

from __future__ import annotations

import uuid

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app.models import ChatSession
from sessions_app.services import session_create, session_get_for_user, session_trash
from toolhub.lib.errors import NotFound

pytestmark = pytest.mark.django_db


def _fields(instance) -> dict:
    return {
        field.attname: getattr(instance, field.attname)
        for field in type(instance)._meta.concrete_fields
    }


def test_a_chat_and_its_agent_are_read_in_one_statement_with_every_field_as_the_orm_reads_them(
    owner,
):
    made = session_create(user=owner, title="odd ✓ \x01", intent={"disabled": ["grep"]})
    ChatSession.objects.filter(pk=made.pk).update(
        tier_plan={"key": "k", "tiers": {"read": "core"}}, loaded_tools=["read"]
    )
    orm = ChatSession.objects.select_related("agent").get(pk=made.pk)

    with CaptureQueriesContext(connection) as captured:
        read = session_get_for_user(user=owner, session_id=str(made.pk))
        agent = read.agent

    assert len(captured) == 1
    assert _fields(read) == _fields(orm)
    assert _fields(agent) == _fields(orm.agent)
    assert read.tool_intent == orm.tool_intent
    assert read._state.adding is False
    assert read._state.db == orm._state.db


def test_another_persons_chat_a_binned_chat_and_no_chat_are_not_found(owner, other_user):
    theirs = session_create(user=other_user)
    binned = session_create(user=owner)
    session_trash(user=owner, session=binned)

    for user, session_id in ((owner, theirs.pk), (owner, binned.pk), (owner, uuid.uuid4())):
        with pytest.raises(NotFound):
            session_get_for_user(user=user, session_id=session_id)


def test_an_id_that_is_no_uuid_is_refused_as_the_orm_refused_it(owner):
    with pytest.raises(ValidationError):
        session_get_for_user(user=owner, session_id="not-a-uuid")


def test_a_change_to_the_chat_or_its_agent_is_read_on_the_next_read(owner):
    made = session_create(user=owner)
    session_get_for_user(user=owner, session_id=made.pk)
    ChatSession.objects.filter(pk=made.pk).update(title="renamed")
    type(made.agent).objects.filter(pk=made.agent_id).update(context_window=12_345)

    read = session_get_for_user(user=owner, session_id=made.pk)

    assert (read.title, read.agent.context_window) == ("renamed", 12_345)
