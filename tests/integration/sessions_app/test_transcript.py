"""The chat page's items folded from the event log: what a person sees of an approval, a
question, a result and a turn's end is decided by the stored events alone, and a socket
that starts its fold mid-chat renders every item exactly as the whole fold does."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_app.delivery import LiveTranscript
from sessions_app.eventlog import events_append
from sessions_app.services import session_create
from sessions_app.transcript import (
    fold,
    item_html,
    session_transcript,
    transcript_html,
    transcript_seed,
)
from sessions_app.transcript_items import RESULT_SHOWN_CHARS

pytestmark = pytest.mark.django_db


def _approved_bash(allow: bool | None) -> list[tuple[str, dict]]:
    log = [
        ("user_message", {"text": "list files"}),
        ("turn_started", {"model": "claude-sonnet-4-6", "context_window": 200_000}),
        ("text_delta", {"text": "Calling "}),
        ("text_delta", {"text": "bash."}),
        ("assistant_message", {"text": "Calling bash.", "html": "<p>Calling bash.</p>"}),
        ("tool_call", {"call_id": "c1", "name": "bash", "arguments": {"command": "ls"}}),
        ("usage", {"input_tokens": 1200, "output_tokens": 30, "cache_read_input_tokens": 800}),
        ("approval_request", {"call_id": "c1", "name": "bash", "arguments": {"command": "ls"}}),
    ]
    if allow is not None:
        log.append(
            (
                "approval_answered",
                {"call_id": "c1", "outcome": "allowed" if allow else "denied", "allow": allow},
            )
        )
    return log


def _stored(owner, items: list[tuple[str, dict]]):
    session = session_create(user=owner)
    events_append(session_id=session.pk, turn="turn-1", items=items)
    return session


def _html(session, transcript) -> dict[str, str]:
    return {key: item_html(item, session_id=session.pk) for key, item in transcript.items.items()}


def test_an_approval_waiting_in_the_log_offers_allow_and_deny(owner):
    session = _stored(owner, _approved_bash(allow=None))

    card = next(
        html
        for html in _html(session, session_transcript(session_id=session.pk)).values()
        if "tool-card" in html
    )

    assert 'data-approve="allow"' in card
    assert 'data-approve="deny"' in card
    assert "bash needs your approval to run." in card
    assert 'data-approval="waiting"' in card


def test_an_approval_answered_in_the_log_is_shown_answered_with_no_buttons(owner):
    session = _stored(owner, _approved_bash(allow=True))

    transcript = session_transcript(session_id=session.pk)
    card = next(html for html in _html(session, transcript).values() if "tool-card" in html)

    assert "data-approve" not in card
    assert "Allowed by you." in card
    assert 'data-status="running"' in card
    assert transcript.running == "turn-1"


def test_a_turn_that_ends_while_an_approval_waits_leaves_no_buttons(owner):
    session = _stored(
        owner,
        [
            *_approved_bash(allow=None),
            ("tool_result", {"call_id": "c1", "status": "cancelled", "content": "Cancelled."}),
            ("turn_finished", {"reason": "cancelled"}),
        ],
    )

    html = "".join(_html(session, session_transcript(session_id=session.pk)).values())

    assert "data-approve" not in html
    assert "The turn stopped before an answer." in html
    assert "Stopped." in html


def test_the_models_question_shows_its_text_options_and_an_answer_box_then_the_answer(owner):
    asked = [
        ("user_message", {"text": "help me pick"}),
        ("turn_started", {}),
        (
            "tool_call",
            {
                "call_id": "q1",
                "name": "ask_user_question",
                "arguments": {"question": "Which colour?", "options": ["red", "blue"]},
            },
        ),
    ]
    session = _stored(owner, asked)
    waiting = session_transcript(session_id=session.pk)
    card = item_html(waiting.waiting_question, session_id=session.pk)

    assert "Which colour?" in card
    assert 'data-answer="red"' in card
    assert 'data-answer="blue"' in card
    assert "data-answer-form" in card

    events_append(
        session_id=session.pk,
        turn="turn-1",
        items=[
            ("question_answered", {"call_id": "q1", "outcome": "answered", "text": "blue"}),
            ("tool_result", {"call_id": "q1", "status": "ok", "content": "blue"}),
        ],
    )
    answered = session_transcript(session_id=session.pk)
    card = item_html(answered.items[waiting.waiting_question.id], session_id=session.pk)

    assert answered.waiting_question is None
    assert "You answered: <strong>blue</strong>" in card
    assert "data-answer-form" not in card


def test_a_json_result_is_pretty_printed_and_a_long_one_is_cut_with_show_all(owner):
    long_text = "x" * (RESULT_SHOWN_CHARS + 500)
    session = _stored(
        owner,
        [
            ("user_message", {"text": "go"}),
            ("turn_started", {}),
            ("tool_call", {"call_id": "a", "name": "lookup", "arguments": {}}),
            ("tool_call", {"call_id": "b", "name": "cat", "arguments": {}}),
            ("tool_result", {"call_id": "a", "status": "ok", "content": '{"k": [1, 2]}'}),
            ("tool_result", {"call_id": "b", "status": "ok", "content": long_text}),
            ("turn_finished", {"reason": "end_turn"}),
        ],
    )
    cards = list(_html(session, session_transcript(session_id=session.pk)).values())
    pretty, cut = cards[1], cards[2]

    assert json.dumps({"k": [1, 2]}, indent=2).replace('"', "&quot;") in pretty
    assert "Show all" not in pretty
    assert f"Showing {RESULT_SHOWN_CHARS:,} of {len(long_text):,} characters." in cut
    # The card's own tool_call (seq 4) names it: call ids repeat across steps.
    assert f"/chat/{session.pk}/calls/4/result/" in cut
    assert long_text not in cut


def test_a_turns_end_says_its_tokens_its_cost_and_how_full_the_context_is(owner):
    session = _stored(owner, [*_approved_bash(allow=False), ("turn_finished", {"reason": "x"})])

    html = "".join(_html(session, session_transcript(session_id=session.pk)).values())

    # ((1,200 + 800 * 0.1) * $3 + 30 * $15) per million.
    assert "1,200 tokens in (+800 from cache) · 30 out · ~$0.0043" in html
    used = session_transcript(session_id=session.pk).context
    assert (used.context_tokens, used.context_window, used.context_share) == (2_000, 200_000, 1)


LOG = [
    *_approved_bash(allow=True),
    ("tool_result", {"call_id": "c1", "status": "ok", "content": "a\nb"}),
    ("text_delta", {"text": "Done"}),
    ("assistant_message", {"text": "Done", "html": "<p>Done</p>"}),
    ("turn_finished", {"reason": "end_turn"}),
    ("user_message", {"text": "again"}),
    ("turn_started", {}),
    ("tool_call", {"call_id": "q", "name": "ask_user_question", "arguments": {"question": "?"}}),
    ("question_answered", {"call_id": "q", "outcome": "answered", "text": "yes"}),
    ("tool_result", {"call_id": "q", "status": "ok", "content": "yes"}),
    ("turn_failed", {"code": "lost", "message": "the server stopped"}),
    # "again" edited: back to before it (seq 14), asked anew.
    ("rewind", {"to": 13}),
    ("user_message", {"text": "again, edited"}),
    ("turn_started", {}),
    ("assistant_message", {"text": "Sure", "html": "<p>Sure</p>"}),
    ("turn_finished", {"reason": "end_turn"}),
]


@given(split=st.integers(min_value=0, max_value=len(LOG)))
def test_a_page_rendered_mid_chat_and_then_updated_live_ends_as_the_whole_fold(split):
    rows = _rows(LOG)
    session_id = "00000000-0000-0000-0000-000000000000"
    whole = fold(rows)
    # The page as rendered at ``split``, then its socket: seeded at the turn holding
    # ``split``, sending the items each later event changed, which replace or append.
    page = {
        key: item_html(item, session_id=session_id)
        for key, item in fold(rows[:split]).items.items()
    }
    seed = fold(rows[_turn_start(rows, split) - 1 : split])
    seed.last_seq = split
    live = LiveTranscript(seed, session_id=session_id)
    for seq, kind, data, turn, _ in rows[split:]:
        frame = live.frame({"type": "event", "seq": seq, "kind": kind, "data": data, "turn": turn})
        # As chat.js does: a rewind drops every item after it; an empty item is removed.
        if kind == "rewind":
            page = {key: html for key, html in page.items() if int(key[1:]) <= data["to"]}
        for key, html in frame.get("items", []):
            if html:
                page[key] = html
            else:
                page.pop(key, None)

    assert list(page) == list(whole.items)
    assert page == {
        key: item_html(item, session_id=session_id) for key, item in whole.items.items()
    }


def _rows(log) -> list[tuple]:
    """The log with seqs and turn ids: a turn begins with its user message, or with the
    rewind an edit stores before it."""
    rows, turn, previous = [], 0, ""
    for seq, (kind, data) in enumerate(log, start=1):
        if kind == "rewind" or (kind == "user_message" and previous != "rewind"):
            turn += 1
        rows.append((seq, kind, data, f"turn-{turn}", None))
        previous = kind
    return rows


def _turn_start(rows, upto: int) -> int:
    """As transcript_seed: the first seq of the last turn started by ``upto``."""
    started = [turn for _, kind, _, turn, _ in rows[:upto] if kind == "turn_started"]
    if not started:
        return upto + 1
    return next(seq for seq, _, _, turn, _ in rows if turn == started[-1])


def test_transcript_seed_starts_at_the_last_turn_started_by_the_seq(owner):
    session = session_create(user=owner)
    for _, kind, data, turn, _ in _rows(LOG[:15]):
        events_append(session_id=session.pk, turn=turn, items=[(kind, data)])
    # Another chat's message (send_message) lands while the second turn runs.
    events_append(
        session_id=session.pk, turn="", items=[("user_message", {"text": "from elsewhere"})]
    )

    seed = transcript_seed(session_id=session.pk, upto=16)
    whole_first_turn = transcript_seed(session_id=session.pk, upto=13)

    # The second turn so far, and the message that came in during it.
    assert list(seed.items) == ["m14", "m16"]
    assert seed.running == "turn-2"
    assert seed.last_seq == 16
    assert list(whole_first_turn.items) == ["m1", "m3", "c6", "m11", "t13"]


def test_a_result_nested_thousands_deep_is_shown_as_it_came(owner):
    deep = "[" * 3_000
    session = _stored(
        owner,
        [
            ("tool_call", {"call_id": "a", "name": "bash", "arguments": {}}),
            ("tool_result", {"call_id": "a", "status": "ok", "content": deep}),
        ],
    )

    (card,) = _html(session, session_transcript(session_id=session.pk)).values()

    assert deep in card


def test_a_calls_whole_result_is_the_owners_alone_and_the_calls_own(owner, other_user, client):
    session = _stored(
        owner,
        [
            ("user_message", {"text": "go"}),
            ("tool_call", {"call_id": "b", "name": "cat/x", "arguments": {}}),
            ("tool_result", {"call_id": "b", "name": "cat/x", "status": "ok", "content": "é" * 9}),
            # The provider used the same call id again in a later step.
            ("tool_call", {"call_id": "b", "name": "cat/x", "arguments": {}}),
            ("tool_result", {"call_id": "b", "name": "cat/x", "status": "ok", "content": "later"}),
        ],
    )
    url = f"/chat/{session.pk}/calls/2/result/"

    client.force_login(other_user)
    assert client.get(url).status_code == 404
    client.force_login(owner)
    shown = client.get(url)
    downloaded = client.get(url + "?download=1")

    assert shown.content.decode() == "é" * 9
    assert client.get(f"/chat/{session.pk}/calls/4/result/").content.decode() == "later"
    assert shown["Content-Type"] == "text/plain; charset=utf-8"
    assert downloaded["Content-Disposition"] == 'attachment; filename="cat_x.txt"'
    assert client.get(f"/chat/{session.pk}/calls/3/result/").status_code == 404
    assert client.get(f"/chat/{session.pk}/calls/nope/result/").status_code == 404


def test_the_page_renders_a_running_turn_fresh_and_an_ended_one_as_it_ended(owner):
    session = _stored(owner, _approved_bash(allow=None))

    def page() -> list[str]:
        transcript = session_transcript(session_id=session.pk)
        return transcript_html(transcript, session_id=session.pk)

    waiting = page()
    events_append(
        session_id=session.pk,
        turn="turn-1",
        items=[("approval_answered", {"call_id": "c1", "outcome": "denied", "allow": False})],
    )
    answered = page()
    events_append(
        session_id=session.pk,
        turn="turn-1",
        items=[
            ("tool_result", {"call_id": "c1", "status": "denied", "content": "did not run"}),
            ("turn_finished", {"reason": "end_turn"}),
        ],
    )
    ended, again = page(), page()

    assert any("data-approve" in html for html in waiting)
    assert not any("data-approve" in html for html in answered)
    assert any("Denied by you." in html for html in answered)
    fresh = _html(session, session_transcript(session_id=session.pk))
    assert ended == again == list(fresh.values())


@pytest.mark.parametrize(
    ("elapsed_ms", "shown"),
    [(350, "ran 350 ms"), (16_234, "ran 16.2 s"), (125_000, "ran 2 min 5 s")],
)
def test_a_calls_card_says_how_long_it_ran_in_words(owner, elapsed_ms, shown):
    session = _stored(
        owner,
        [
            ("user_message", {"text": "count"}),
            ("turn_started", {"model": "claude-sonnet-4-6", "context_window": 200_000}),
            ("tool_call", {"call_id": "c1", "name": "bash", "arguments": {"command": "ls"}}),
            (
                "tool_result",
                {"call_id": "c1", "status": "ok", "content": "a", "elapsed_ms": elapsed_ms},
            ),
        ],
    )
    html = "".join(
        transcript_html(session_transcript(session_id=session.pk), session_id=session.pk)
    )

    assert f"ok · {shown}</span>" in html


def test_a_call_still_running_is_drawn_open_after_a_reload_and_a_finished_one_folded(owner):
    running = _stored(
        owner,
        [
            ("user_message", {"text": "count"}),
            ("turn_started", {"model": "claude-sonnet-4-6", "context_window": 200_000}),
            ("tool_call", {"call_id": "c1", "name": "bash", "arguments": {"command": "ls"}}),
        ],
    )
    finished = _stored(
        owner,
        [
            ("user_message", {"text": "count"}),
            ("turn_started", {"model": "claude-sonnet-4-6", "context_window": 200_000}),
            ("tool_call", {"call_id": "c1", "name": "bash", "arguments": {"command": "ls"}}),
            ("tool_result", {"call_id": "c1", "status": "ok", "content": "a\nb"}),
        ],
    )

    def card(session) -> str:
        html = "".join(
            transcript_html(session_transcript(session_id=session.pk), session_id=session.pk)
        )
        return html[html.index('<details class="tool-card"') :].split(">", 1)[0]

    assert card(running).endswith(" open")
    assert not card(finished).endswith(" open")
