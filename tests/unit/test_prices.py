"""Estimated costs as people read them: never "$0.0000", and a model whose name only
begins like the demo's is not taken for it."""

from __future__ import annotations

import pytest

from toolhub.lib.prices import cost_usd, price_of, usd_text


@pytest.mark.parametrize(
    ("cost", "shown"),
    [
        (None, "unknown"),
        (0.0, "free"),
        (0.00001, "under $0.0001"),
        (0.0123, "$0.0123"),
        (1234.5, "$1,234.50"),
    ],
)
def test_a_cost_reads_as_a_person_expects(cost, shown):
    assert usd_text(cost) == shown


def test_only_the_offline_demo_model_itself_is_free():
    assert cost_usd(model="demo", input_tokens=1_000, output_tokens=10) == 0.0
    assert price_of("demo-reader") is None
    assert cost_usd(model="demo-reader", input_tokens=1_000, output_tokens=10) is None
