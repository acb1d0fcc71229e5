"""An MCP server's form and sampling request, made safe to show and to answer
(``toolhub.tools.mcp.asks`` and ``forms``): what is refused before a person sees it, and
how an answer is checked and read."""

from __future__ import annotations

import pytest
from mcp_types import (
    CreateMessageRequestParams,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ImageContent,
    SamplingMessage,
    TextContent,
)

from toolhub.tools.mcp.asks import (
    MAX_SAMPLING_TOKENS,
    AskRefused,
    fields_from_json,
    sampling_ask,
)
from toolhub.tools.mcp.forms import (
    MAX_FIELDS,
    FormError,
    elicit_form,
    form_answer,
    form_fields,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 2, "maxLength": 5},
        "email": {"type": "string", "format": "email"},
        "born": {"type": "string", "format": "date"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number"},
        "agree": {"type": "boolean", "default": False},
        "pet": {"type": "string", "enum": ["cat", "dog"], "enumNames": ["Cats", "Dogs"]},
        "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Super\u202e"}]},
        "fish": {
            "type": "array",
            "items": {"anyOf": [{"const": "f1", "title": "Tuna"}, {"const": "f2"}]},
            "maxItems": 1,
        },
    },
    "required": ["name", "agree"],
}


def test_every_field_kind_of_the_spec_is_read_with_its_rules_and_its_labels_cleaned():
    fields = {field.name: field for field in form_fields(SCHEMA)}

    assert [f.kind for f in fields.values()] == [
        "text", "text", "text", "integer", "number", "boolean", "choice", "choice", "choices",
    ]  # fmt: skip
    assert (fields["name"].min_length, fields["name"].max_length) == (2, 5)
    assert fields["pet"].choices == (("cat", "Cats"), ("dog", "Dogs"))
    assert fields["hero"].choices == (("h1", "Super"),)  # the bidi override is gone
    assert fields["fish"].choices == (("f1", "Tuna"), ("f2", "f2"))
    assert fields["name"].required
    assert not fields["age"].required


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"type": "array"}, "not a JSON object schema"),
        ({"type": "object", "properties": {"a": {"type": "object"}}}, "kind a form cannot"),
        ({"type": "object", "properties": {"a": {"$ref": "#/x"}}}, "kind a form cannot"),
        ({"type": "object", "properties": {"bad name": {"type": "string"}}}, "a field named"),
        ({"type": "object", "properties": {"a": {"type": "string", "format": "x"}}}, "format"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {}}}}, "list of"),
        ({"type": "object", "properties": {"a": {"type": "number", "minimum": "1"}}}, "bound"),
        (
            {
                "type": "object",
                "properties": {f"f{n}": {"type": "string"} for n in range(MAX_FIELDS + 1)},
            },
            r"fields \(at most",
        ),
    ],
)
def test_a_form_toolhub_cannot_draw_is_refused_with_the_reason(schema, why):
    with pytest.raises(AskRefused, match=why):
        form_fields(schema)


def test_an_answer_is_read_as_the_fields_types_whatever_way_it_was_posted():
    fields = form_fields(SCHEMA)

    answer = form_answer(
        fields,
        {
            "name": "Ada",
            "email": "ada@example.org",
            "born": "1815-12-10",
            "age": "36",
            "score": "2.5",
            "agree": "true",
            "pet": "dog",
            "fish": ["f1", "f1"],
            "hero": "",
        },
    )

    assert answer == {
        "name": "Ada",
        "email": "ada@example.org",
        "born": "1815-12-10",
        "age": 36,
        "score": 2.5,
        "agree": True,
        "pet": "dog",
        "fish": ["f1"],
    }


def test_an_answer_that_does_not_fit_names_every_field_that_is_wrong():
    with pytest.raises(FormError) as refused:
        form_answer(
            form_fields(SCHEMA),
            {
                "name": "A",
                "email": "not mail",
                "born": "yesterday",
                "age": 36.5,
                "score": "NaN",
                "pet": "cow",
                "fish": ["f1", "f2"],
                "extra": 1,
            },
        )

    assert refused.value.errors == {
        "extra": "this form has no such field",
        "name": "must be at least 2 characters",
        "email": "must be an email address",
        "born": "must be a date such as 2026-12-31",
        "age": "must be a whole number",
        "score": "must be a number",
        "pet": "is not one of the choices",
        "fish": "pick at most 1",
    }


def test_a_required_yes_no_left_unticked_is_a_no_and_a_missing_text_is_required():
    fields = form_fields(SCHEMA)

    with pytest.raises(FormError) as refused:
        form_answer(fields, {"agree": None})
    assert refused.value.errors == {"name": "required"}
    assert form_answer(fields, {"name": "Ada"}) == {"name": "Ada", "agree": False}


def test_the_stored_form_checks_answers_as_the_one_the_server_sent():
    form = elicit_form("srv", ElicitRequestFormParams(message="Hi", requested_schema=SCHEMA))

    again = fields_from_json(form.to_json()["fields"])

    assert again == form.fields


def test_a_page_to_open_must_be_a_plain_web_address():
    ok = elicit_form("srv", ElicitRequestURLParams(message="Pay", url="https://example.org/p"))

    assert ok.url == "https://example.org/p"
    for url in ("javascript:alert(1)", "file:///etc/passwd", "https://exa mple.org", "https://"):
        with pytest.raises(AskRefused):
            elicit_form("srv", ElicitRequestURLParams(message="x", url=url))


def message(role: str, *blocks) -> SamplingMessage:
    return SamplingMessage(role=role, content=list(blocks))


def text(value: str) -> TextContent:
    return TextContent(type="text", text=value)


def test_a_sampling_request_becomes_text_messages_with_the_token_limit_capped():
    ask = sampling_ask(
        "srv",
        CreateMessageRequestParams(
            messages=[message("user", text("a"), text("b")), message("assistant", text("c")),
                      message("user", text("d"))],
            system_prompt="Be brief.",
            max_tokens=10**6,
        ),
    )  # fmt: skip

    assert ask.messages == (("user", "a\nb"), ("assistant", "c"), ("user", "d"))
    assert ask.system == "Be brief."
    assert ask.max_tokens == MAX_SAMPLING_TOKENS


@pytest.mark.parametrize(
    ("messages", "why"),
    [
        ([message("user", ImageContent(type="image", data="AA==", mime_type="image/png"))], "text"),
        ([message("user", text("x" * 100_001))], "characters"),
        ([message("assistant", text("x"))], "last message"),
        ([], "no message"),
    ],
)
def test_a_sampling_request_toolhub_will_not_send_is_refused_with_the_reason(messages, why):
    with pytest.raises(AskRefused, match=why):
        sampling_ask("srv", CreateMessageRequestParams(messages=messages, max_tokens=10))


def test_a_server_cannot_both_sign_in_with_oauth_and_take_personal_credentials():
    """The grant's bearer token would go with every person's call, over theirs."""
    from toolhub.tools.mcp import McpServerConfig

    with pytest.raises(ValueError, match="cannot also take each person's own credential"):
        McpServerConfig(
            name="both",
            transport="streamable_http",
            url="https://mcp.example/mcp",
            auth="oauth",
            user_credential="Authorization",
        )
