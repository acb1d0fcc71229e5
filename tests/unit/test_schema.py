"""From signature and docstring to JSON Schema, and arguments checked against it."""

from __future__ import annotations

from typing import Literal

import pytest

from toolhub.tools import ToolContext, function


def _tool(fn, **kwargs):
    return function(register_globally=False, **kwargs)(fn)


def test_each_supported_type_becomes_its_json_schema_type():
    def sample(
        text: str,
        count: int,
        ratio: float,
        flag: bool,
        tags: list[str],
        matrix: list[list[int]],
        options: dict,
        scores: dict[str, float],
        color: Literal["red", "green"],
        maybe: str | None = None,
    ) -> str:
        return ""

    props = _tool(sample).parameters["properties"]

    assert props["text"] == {"type": "string"}
    assert props["count"] == {"type": "integer"}
    assert props["ratio"] == {"type": "number"}
    assert props["flag"] == {"type": "boolean"}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["matrix"] == {
        "type": "array",
        "items": {"type": "array", "items": {"type": "integer"}},
    }
    assert props["options"] == {"type": "object"}
    assert props["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["color"] == {"type": "string", "enum": ["red", "green"]}
    assert props["maybe"] == {"type": ["string", "null"]}


def test_parameters_without_defaults_are_required_and_defaults_are_published():
    def sample(query: str, limit: int = 5, verbose: bool = False, label: str | None = None):
        return ""

    schema = _tool(sample).parameters

    assert schema["required"] == ["query"]
    assert schema["properties"]["limit"]["default"] == 5
    assert schema["properties"]["verbose"]["default"] is False
    assert "default" not in schema["properties"]["label"]
    assert schema["additionalProperties"] is False


def test_docstring_gives_description_and_parameter_descriptions():
    def lookup(city: str, units: str = "metric") -> str:
        """Look up the weather for a city.

        Uses the nearest station.

        Args:
            city: City name, such as "Paris".
            units (str): "metric" or "imperial",
                whichever the person prefers.

        Returns:
            A short report.
        """
        return ""

    tool = _tool(lookup)

    assert tool.description == "Look up the weather for a city."
    assert tool.parameters["properties"]["city"]["description"] == 'City name, such as "Paris".'
    assert (
        tool.parameters["properties"]["units"]["description"]
        == '"metric" or "imperial", whichever the person prefers.'
    )


def test_name_description_parameters_and_label_can_be_overridden():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    def raw(**kwargs):
        return kwargs

    tool = _tool(raw, name="finder", description="Finds.", parameters=schema, label="Finder")

    assert (tool.name, tool.description, tool.label) == ("finder", "Finds.", "Finder")
    assert tool.parameters == schema


def test_the_injected_ctx_parameter_is_not_part_of_the_schema():
    def who(ctx: ToolContext | None = None) -> str:
        return ctx.user_id

    assert _tool(who).parameters["properties"] == {}


def test_an_unsupported_annotation_fails_at_decoration_naming_the_parameter():
    def bad(when: complex) -> str:
        return ""

    with pytest.raises(TypeError, match=r"bad\(when\)"):
        _tool(bad)


async def test_a_bad_argument_is_an_error_result_naming_the_field_and_the_tool_never_runs():
    calls = []

    def count(n: int) -> int:
        calls.append(n)
        return n

    tool = _tool(count)

    wrong_type = await tool.execute({"n": "three"})
    missing = await tool.execute({})
    extra = await tool.execute({"n": 1, "m": 2})

    assert wrong_type.is_error
    assert "'n'" in wrong_type.content
    assert missing.is_error
    assert "missing required argument 'n'" in missing.content
    assert extra.is_error
    assert "'m'" in extra.content
    assert calls == []


async def test_a_free_form_dict_parameter_accepts_any_keys():
    def configure(settings: dict) -> dict:
        return settings

    result = await _tool(configure).execute({"settings": {"anything": 1, "nested": {"x": [1]}}})

    assert not result.is_error
    assert result.content == '{"anything":1,"nested":{"x":[1]}}'


async def test_arguments_that_are_not_an_object_are_refused():
    def echo(text: str) -> str:
        return text

    result = await _tool(echo).execute(["text"])

    assert result.is_error
    assert "JSON object" in result.content
