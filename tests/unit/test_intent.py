"""ToolIntent: the stored shape, legacy forms, validation, merging, and no expansion."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolhub.tools import registry
from toolhub.tools.intent import MAX_NAMES, IntentError, ToolIntent

FULL = {
    "enabled": True,
    "toolset": "research",
    "disabled": ["bash"],
    "allowed": ["read", "grep"],
    "web_search": False,
    "picked": None,
}


def test_the_stored_shape_round_trips():
    assert ToolIntent.parse(FULL).to_json() == FULL
    assert ToolIntent.parse(ToolIntent.parse(FULL).to_json()) == ToolIntent.parse(FULL)


@pytest.mark.parametrize(
    ("legacy", "expected"),
    [
        (True, {"enabled": True}),
        (False, {"enabled": False}),
        (None, {}),
        (["read", "grep", "read"], {"picked": ["read", "grep"]}),
        ({"enabled": False, "web_search": True}, {"enabled": False, "web_search": True}),
    ],
)
def test_legacy_forms_normalize_into_the_shape(legacy, expected):
    shape = {
        "enabled": None,
        "toolset": None,
        "disabled": [],
        "allowed": None,
        "web_search": None,
        "picked": None,
    }

    assert ToolIntent.parse(legacy).to_json() == {**shape, **expected}


def test_an_old_row_without_web_search_reads_it_as_null():
    old_row = {"enabled": True, "toolset": None, "disabled": ["bash"]}

    intent = ToolIntent.parse(old_row)

    assert intent.web_search is None
    assert intent.picked is None
    assert intent.disabled == ("bash",)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"enabld": True}, "unknown intent field"),
        ({"disabled": "bash"}, "'disabled' must be a list"),
        ({"disabled": [1]}, "tool names"),
        ({"picked": ["has space"]}, "not a valid tool name"),
        ({"picked": [f"t{i}" for i in range(MAX_NAMES + 1)]}, "at most 256"),
        ({"enabled": "yes"}, "'enabled' must be true, false or null"),
        ({"toolset": ""}, "'toolset'"),
        ({"toolset": 5}, "'toolset'"),
        # No profile can be named with a control character or a lone surrogate, and the
        # database refuses NUL: refused here, not as a server error.
        ({"toolset": "re\x00search"}, "'toolset'"),
        ({"toolset": "\ud800"}, "'toolset'"),
        ({"toolset": "a\x1bb"}, "'toolset'"),
        (42, "an intent is an object"),
    ],
)
def test_invalid_intents_are_refused_with_a_clear_message(bad, message):
    with pytest.raises(IntentError, match=message):
        ToolIntent.parse(bad)


def test_a_chat_frame_intent_replaces_only_the_fields_it_gives():
    stored = ToolIntent.parse(FULL)

    merged = stored.merge({"web_search": True, "disabled": []})

    assert merged.web_search is True
    assert merged.disabled == ()
    assert merged.toolset == "research"
    assert merged.allowed == ("read", "grep")


def test_merging_an_invalid_patch_raises_and_changes_nothing():
    stored = ToolIntent.parse(FULL)

    with pytest.raises(IntentError):
        stored.merge({"enabled": "sometimes"})
    assert stored.to_json() == FULL


_names = st.lists(st.sampled_from(registry.names()), max_size=5)


@given(
    enabled=st.none() | st.booleans(),
    web=st.none() | st.booleans(),
    disabled=_names,
    picked=st.none() | _names,
    allowed=st.none() | _names,
)
def test_serialized_intent_never_lists_every_registered_tool_unless_picked(
    enabled, web, disabled, picked, allowed
):
    intent = ToolIntent(
        enabled=enabled,
        web_search=web,
        disabled=tuple(disabled),
        picked=None if picked is None else tuple(picked),
        allowed=None if allowed is None else tuple(allowed),
    )

    stored = ToolIntent.parse(intent.to_json()).to_json()

    every = set(registry.names())
    for field in ("disabled", "allowed", "picked"):
        written = set(stored[field] or [])
        assert written == set(getattr(intent, field) or ())
        assert written != every
