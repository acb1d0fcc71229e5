"""Storable text and bounded JSON: what every writer and parser of outside input relies on."""

from __future__ import annotations

import pytest

from toolhub.lib.storable import (
    MAX_JSON_DEPTH,
    NUL_MARK,
    SURROGATE_MARK,
    TooDeep,
    json_loads_bounded,
    storable,
)


def test_nul_and_lone_surrogates_become_visible_markers_everywhere_in_a_value():
    value = {"a\x00": ["x\ud800", ("y", "\udfffz")], "n": 1, "ok": "fine"}

    assert storable(value) == {
        f"a{NUL_MARK}": [f"x{SURROGATE_MARK}", ("y", f"{SURROGATE_MARK}z")],
        "n": 1,
        "ok": "fine",
    }


def test_a_value_that_needs_no_change_is_returned_as_it_is():
    value = {"a": ["b", {"c": "d"}], "e": None}

    assert storable(value) is value


def test_a_paired_surrogate_stays_an_emoji():
    assert storable("family 👨‍👩‍👧") == "family 👨‍👩‍👧"


@pytest.mark.parametrize("raw", ["[" * 100_000, "[" * (MAX_JSON_DEPTH + 1) + "]" * 65])
def test_json_nested_too_deep_is_a_value_error_not_a_recursion_error(raw):
    with pytest.raises(TooDeep):
        json_loads_bounded(raw)


def test_json_at_the_depth_limit_and_plain_values_parse():
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH

    assert json_loads_bounded(nested) is not None
    assert json_loads_bounded('{"a": [1, "b"]}') == {"a": [1, "b"]}
    with pytest.raises(ValueError, match="NaN is not JSON"):
        json_loads_bounded("[NaN]")
