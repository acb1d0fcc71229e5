"""Branches: an edit or a regenerate keeps the earlier version, the page and the provider
get the branch shown, and switching versions stores a ``branch`` event and nothing else
(sessions_app.branches, sessions_app.services.branches)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from sessions_app.eventlog import events_append, session_history
from sessions_app.models import ChatSession, SessionEvent
from sessions_app.services import session_branch_switch, session_create, session_trash
from sessions_app.transcript import session_transcript
from sessions_app.transcript_items import Card, Message, TurnEnd
from toolhub.lib.errors import Invalid

pytestmark = pytest.mark.django_db

END = ("turn_finished", {"reason": "end_turn"})
STARTED = ("turn_started", {"model": "demo"})


def _turn(chat, turn, *items):
    """Store a turn's events; the seq of each, in order."""
    events = events_append(session_id=chat.pk, turn=turn, items=list(items))
    return [event.seq for event in events]


def _asked(text):
    return ("user_message", {"text": text})


def _answer(text):
    return ("assistant_message", {"text": text})


def _exchange(chat, turn, question, answer):
    """A whole turn: the seqs of its question and its answer."""
    seqs = _turn(chat, turn, _asked(question), STARTED, _answer(answer), END)
    return seqs[0], seqs[2]


def _page(chat):
    """What the page shows: each message's text, a card as its tool's name."""
    items = session_transcript(session_id=chat.pk).items.values()
    return [
        item.text if isinstance(item, Message) else f"[{item.name}]"
        for item in items
        if isinstance(item, Message | Card)
    ]


def _switchers(chat):
    """The page's "n/m" next to each message and answer that has versions, in order."""
    items = session_transcript(session_id=chat.pk).items.values()
    return [
        f"{item.versions.number}/{item.versions.count}"
        for item in items
        if isinstance(item, Message | TurnEnd) and item.versions is not None
    ]


def _provider(chat):
    """What the provider would get on the next turn: messages' texts, calls' kinds."""
    history = session_history(session_id=chat.pk)
    return [data["text"] if kind.endswith("message") else kind for kind, data in history]


@pytest.fixture
def chat(owner):
    return session_create(user=owner, title="Branches")


@pytest.fixture
def three_then_edit(chat):
    """Three turns, then the second message edited: the seqs of both versions of it."""
    _exchange(chat, "t1", "one", "A1")
    second, _ = _exchange(chat, "t2", "two", "A2")
    _exchange(chat, "t3", "three", "A3")
    edited = _turn(chat, "t4", ("rewind", {"to": second - 1}), _asked("two, changed"))[1]
    _turn(chat, "t4", STARTED, _answer("A2 again"), END)
    return second, edited


def test_an_edit_of_the_second_of_three_messages_keeps_the_first_version(chat, three_then_edit):
    assert _page(chat) == ["one", "A1", "two, changed", "A2 again"]
    assert _switchers(chat) == ["2/2"]
    assert _provider(chat) == ["one", "A1", "two, changed", "A2 again"]


def test_switching_back_shows_the_earlier_version_and_the_turns_after_it(chat, three_then_edit):
    first_version, edited = three_then_edit

    session_branch_switch(session=chat, message=edited, version=first_version)

    assert _page(chat) == ["one", "A1", "two", "A2", "three", "A3"]
    assert _switchers(chat) == ["1/2"]
    assert _provider(chat) == ["one", "A1", "two", "A2", "three", "A3"]

    session_branch_switch(session=chat, message=first_version, version=edited)
    assert _page(chat) == ["one", "A1", "two, changed", "A2 again"]
    # Nothing was rewritten: two switches are two events more.
    assert SessionEvent.objects.filter(session=chat, kind="branch").count() == 2


def test_a_message_after_a_switch_goes_on_from_the_branch_shown(chat, three_then_edit):
    first_version, edited = three_then_edit
    session_branch_switch(session=chat, message=edited, version=first_version)

    _exchange(chat, "t5", "four", "A4")

    assert _page(chat) == ["one", "A1", "two", "A2", "three", "A3", "four", "A4"]
    assert _provider(chat)[-2:] == ["four", "A4"]


def test_a_regenerated_answer_keeps_the_earlier_one_as_a_version(chat):
    question, first_answer = _exchange(chat, "t1", "why?", "because")
    again = _turn(chat, "t2", ("rewind", {"to": question}), STARTED, _answer("since"), END)[2]

    assert _page(chat) == ["why?", "since"]
    assert _switchers(chat) == ["2/2"]
    assert _provider(chat) == ["why?", "since"]

    session_branch_switch(session=chat, message=again, version=first_answer)
    assert _page(chat) == ["why?", "because"]
    assert _switchers(chat) == ["1/2"]
    # The earlier turn's end is the one shown, with its answer.
    ends = [
        i for i in session_transcript(session_id=chat.pk).items.values() if isinstance(i, TurnEnd)
    ]
    assert [end.turn for end in ends] == ["t1"]


def test_a_regenerate_then_an_edit_keeps_both_and_switching_finds_the_latest_answer(chat):
    question, _ = _exchange(chat, "t1", "why?", "because")
    _turn(chat, "t2", ("rewind", {"to": question}), STARTED, _answer("since"), END)
    edited = _turn(chat, "t3", ("rewind", {"to": question - 1}), _asked("how?"))[1]
    _turn(chat, "t3", STARTED, _answer("like so"), END)
    assert _page(chat) == ["how?", "like so"]

    session_branch_switch(session=chat, message=edited, version=question)

    # The most recent leaf under the first version: its regenerated answer.
    assert _page(chat) == ["why?", "since"]
    assert _switchers(chat) == ["1/2", "2/2"]


def test_a_tool_using_answer_and_its_regeneration_show_one_at_a_time(chat):
    call = {"call_id": "c1", "name": "bash", "arguments": {"command": "ls"}}
    question = _turn(chat, "t1", _asked("list files"), STARTED)[0]
    _turn(chat, "t1", ("text_delta", {"text": "Looking"}), ("tool_call", call))
    head = question + 3
    _turn(
        chat,
        "t1",
        ("tool_result", {"call_id": "c1", "status": "ok", "content": "a.txt"}),
        ("text_delta", {"text": "a.txt"}),
        _answer("a.txt"),
        END,
    )
    again = _turn(
        chat,
        "t2",
        ("rewind", {"to": question}),
        STARTED,
        ("text_delta", {"text": "No"}),
        _answer("No"),
    )[3]
    _turn(chat, "t2", END)
    assert _page(chat) == ["list files", "No"]
    assert _provider(chat) == ["list files", "No"]

    session_branch_switch(session=chat, message=again, version=head)

    assert _page(chat) == ["list files", "Looking", "[bash]", "a.txt"]
    assert _provider(chat) == ["list files", "tool_call", "tool_result", "a.txt"]


def test_a_log_without_branches_reads_as_before(chat):
    question, _ = _exchange(chat, "t1", "one", "A1")
    _exchange(chat, "t2", "two", "A2")
    _turn(chat, "t3", ("rewind", {"to": question}))

    assert _page(chat) == ["one"]
    assert _provider(chat) == ["one"]


def test_a_switch_to_something_that_is_not_a_version_stores_nothing(chat, three_then_edit):
    first_version, edited = three_then_edit
    before = ChatSession.objects.get(pk=chat.pk).last_seq
    for message, version in ((edited, 1), (edited, edited + 1), (999, first_version), (-1, 0)):
        with pytest.raises(Invalid):
            session_branch_switch(session=chat, message=message, version=version)
    assert ChatSession.objects.get(pk=chat.pk).last_seq == before


def test_the_api_lists_the_versions_and_picks_one(api, owner, chat, three_then_edit):
    first_version, edited = three_then_edit
    url = f"/api/sessions/{chat.pk}/branches/"

    listed = api(owner).get(url).json()
    assert listed == {
        "branches": [
            {
                "message": edited,
                "kind": "message",
                "versions": [first_version, edited],
                "shown": edited,
            }
        ]
    }
    picked = api(owner).post(url, {"message": edited, "version": first_version}, format="json")
    assert picked.status_code == 200
    assert picked.json()["branches"][0]["shown"] == first_version
    assert _page(chat)[-1] == "A3"


def test_another_persons_chat_has_no_branches_to_list_or_pick(
    api, other_user, chat, three_then_edit
):
    first_version, edited = three_then_edit
    url = f"/api/sessions/{chat.pk}/branches/"
    assert api(other_user).get(url).status_code == 404
    body = {"message": edited, "version": first_version}
    assert api(other_user).post(url, body, format="json").status_code == 404
    assert not SessionEvent.objects.filter(session=chat, kind="branch").exists()


def test_a_switch_is_refused_while_a_turn_runs_and_stores_nothing(
    api, owner, chat, three_then_edit
):
    first_version, edited = three_then_edit
    lease = timezone.now() + timezone.timedelta(minutes=5)
    ChatSession.objects.filter(pk=chat.pk).update(turn_id="t9", turn_lease=lease)

    refused = api(owner).post(
        f"/api/sessions/{chat.pk}/branches/",
        {"message": edited, "version": first_version},
        format="json",
    )

    assert refused.status_code == 409
    assert "still answering" in refused.json()["message"]
    assert _page(chat)[-1] == "A2 again"


@pytest.mark.parametrize(
    "body", [{"message": "x", "version": 1}, {"message": 5}, {"message": 1, "version": 999}]
)
def test_a_bad_seq_is_a_clear_400_and_stores_nothing(api, owner, chat, three_then_edit, body):
    refused = api(owner).post(f"/api/sessions/{chat.pk}/branches/", body, format="json")

    assert refused.status_code == 400
    assert not SessionEvent.objects.filter(session=chat, kind="branch").exists()


def test_a_binned_chat_cannot_be_switched(api, owner, chat, three_then_edit):
    first_version, edited = three_then_edit
    session_trash(user=owner, session=chat)

    refused = api(owner).post(
        f"/api/sessions/{chat.pk}/branches/",
        {"message": edited, "version": first_version},
        format="json",
    )

    assert refused.status_code == 404


def test_the_page_switches_versions_and_draws_the_switcher(
    client, owner, other_user, chat, three_then_edit
):
    first_version, edited = three_then_edit
    url = reverse("chat_branch", args=[chat.pk])
    client.force_login(other_user)
    assert client.post(url, {"message": edited, "version": first_version}).status_code == 404
    client.force_login(owner)

    page = client.get(reverse("chat_session", args=[chat.pk])).content.decode()
    assert 'aria-label="Previous version"' in page
    assert ">2/2<" in page
    assert client.post(url, {"message": "two", "version": "x"}).status_code == 400
    assert client.post(url, {"message": edited, "version": first_version}).status_code == 204

    page = client.get(reverse("chat_session", args=[chat.pk])).content.decode()
    assert ">1/2<" in page
    assert "A3" in page


def test_markdown_shows_the_branch_shown_and_says_other_versions_exist(
    client, owner, chat, three_then_edit
):
    client.force_login(owner)

    text = client.get(reverse("chat_export", args=[chat.pk, "markdown"])).content.decode()

    assert "two, changed" in text
    assert "A3" not in text
    assert "Version 2 of 2 of this message" in text


def test_an_import_with_branches_pointing_nowhere_reads_harmlessly(
    client, api, owner, chat, three_then_edit
):
    exported = api(owner).get(f"/api/sessions/{chat.pk}/export/?format=json").json()
    exported["events"] += [
        {"seq": 1000, "turn": "", "kind": "branch", "data": {"to": 99999}},
        {"seq": 1001, "turn": "", "kind": "branch", "data": {"to": "first"}},
        {"seq": 1002, "turn": "", "kind": "rewind", "data": {"to": -5}},
        {"seq": 1003, "turn": "", "kind": "branch", "data": {}},
    ]

    imported = api(owner).post("/api/sessions/import/", exported, format="json")

    assert imported.status_code == 201
    copy = ChatSession.objects.get(pk=imported.json()["id"])
    # The rewind to before the first message leaves an empty conversation; nothing breaks.
    assert _page(copy) == []
    client.force_login(owner)
    assert client.get(reverse("chat_session", args=[copy.pk])).status_code == 200
