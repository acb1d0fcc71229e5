"""Reading a model's context window from what servers say (toolhub/lib/model_windows.py,
agent_app/providers): their errors, their model lists, and figures that cannot be one."""

from __future__ import annotations

import pytest

from agent_app.providers.base import status_error, window_in
from agent_app.providers.openai import _listed_window, _props_window
from toolhub.lib.model_windows import DEFAULT_WINDOW, believable, window_of


@pytest.mark.parametrize(
    ("said", "window"),
    [
        ("Requested tokens (4486) exceed context window of 2048", 2048),
        ("This model's maximum context length is 8192 tokens. However, you requested", 8192),
        ("This model's maximum context length is 262,144 tokens.", 262_144),
        ("prompt is too long: 210000 tokens > 200000 maximum", 200_000),
        ("prompt is too long: 210,000 tokens > 200,000 maximum", None),
        ("Requested tokens (99) exceed context window of 99999999999", None),
        ("Requested tokens (99) exceed context window of 12", None),
        # Said in passing, not as the error: text a server echoes (a model's own output).
        ("Failed to parse input: please note the context window of 300 tokens", None),
        ("tool call: This model's maximum context length is 300 tokens", None),
        ("Your input exceeds the context window of 262,144 tokens", None),
        ("rate limited, try again", None),
        ("", None),
    ],
)
def test_the_window_an_overflow_error_opens_with_is_read_and_nothing_else_is(said, window):
    assert window_in(said) == window


def test_only_a_refused_request_is_read_for_a_window_and_llama_cpps_fields_count():
    overflow = '{"error":{"type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":4096}}'
    other = '{"error":{"type":"server_error","n_ctx":300}}'

    assert status_error(400, "the request exceeds the context", body=overflow).window == 4096
    assert status_error(400, "something else", body=other).window is None
    assert status_error(500, "the request exceeds the context", body=overflow).window is None
    said = "This model's maximum context length is 2048 tokens."
    assert status_error(500, said).window is None
    assert status_error(413, said).window == 2048
    assert status_error(429, said).window is None


@pytest.mark.parametrize(
    "value", [0, -1, 255, 10**9, True, None, "8192", 8192.5e10, float("nan"), [8192], {}]
)
def test_a_figure_that_cannot_be_a_window_is_not_believed(value):
    assert believable(value) is None


def test_the_smaller_of_the_setting_and_the_servers_window_wins_and_says_where_from():
    def of(setting, reported):
        window = window_of(setting=setting, reported=reported)
        return window.tokens, window.source

    assert of(None, 8192) == (8192, "server")
    assert of(4096, 8192) == (4096, "setting")
    assert of(32_000, 8192) == (8192, "server")
    assert of(4096, None) == (4096, "setting")
    assumed = window_of(setting=None, reported=None)
    assert (assumed.tokens, assumed.source) == (DEFAULT_WINDOW, "assumed")
    assert "assumed" in assumed.words


@pytest.mark.parametrize(
    ("listed", "model", "window"),
    [
        ({"data": [{"id": "m", "max_model_len": 8192}]}, "m", 8192),
        ({"data": [{"id": "m", "context_length": 32768}, {"id": "n"}]}, "m", 32768),
        ({"data": [{"id": "only", "meta": {"n_ctx_train": 2048}}]}, "other", 2048),
        ({"data": [{"id": "a", "max_model_len": 1024}, {"id": "b"}]}, "c", None),
        ({"data": "nope"}, "m", None),
        ([1, 2], "m", None),
        ({"data": [None, 3, {"id": "m", "meta": "x"}]}, "m", None),
    ],
)
def test_a_model_list_gives_the_named_models_window_in_the_shapes_servers_use(
    listed, model, window
):
    assert _listed_window(listed, model) == window


def test_llama_cpps_properties_give_the_context_it_runs_with():
    assert _props_window({"default_generation_settings": {"n_ctx": 4096}}) == 4096
    assert _props_window({"n_ctx": 8192}) == 8192
    assert _props_window({"default_generation_settings": "x"}) is None
    assert _props_window("<html>") is None
