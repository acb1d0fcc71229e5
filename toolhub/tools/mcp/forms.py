"""A server's elicitation as a form a person can answer: the requested schema read into
fields (``form_fields``), a page to open checked (``elicit_form``), and an answer checked
against the form (``form_answer``). The types they share with the apps are in ``asks``.

Invariants:
- **Bounded and cleaned.** A form has at most ``MAX_FIELDS`` fields of the spec's flat,
  primitive kinds (text, number, integer, yes/no, one or several of listed choices);
  anything else (nesting, ``$ref``, an unknown type) is refused with the reason before a
  person sees it. Every title, description, message and choice label is untrusted text:
  control and bidi characters removed, cut to a fixed length.
- **An answer is checked against the form** (``form_answer``) before it goes back: the
  types the schema says, required fields present, lengths, bounds, formats and choices
  kept, unknown fields refused. What a browser posts as text is read as the field's type.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from toolhub.tools.mcp.asks import AskRefused, ElicitForm, FormField
from toolhub.tools.mcp.config import untrusted_text, visible

MAX_FIELDS = 30
MAX_CHOICES = 100
MAX_MESSAGE_CHARS = 2_000
MAX_TITLE_CHARS = 120
MAX_FIELD_DESCRIPTION_CHARS = 500
MAX_TEXT_ANSWER_CHARS = 10_000
FIELD_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
FORMATS = ("email", "uri", "date", "date-time")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class FormError(ValueError):
    """An answer that does not fit its form: field name → what is wrong."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(f"{name}: {why}" for name, why in self.errors.items()))


def elicit_form(server: str, params: Any) -> ElicitForm:
    """The form a server's ``elicitation/create`` asks for; ``AskRefused`` says why not."""
    message = untrusted_text(getattr(params, "message", ""), MAX_MESSAGE_CHARS)
    if getattr(params, "mode", "form") == "url":
        return ElicitForm(server=server, message=message, url=_safe_url(params.url))
    schema = getattr(params, "requested_schema", None)
    return ElicitForm(server=server, message=message, fields=form_fields(schema))


def _safe_url(url: Any) -> str:
    """The page as the browser will visit it: http(s), no user name or password before
    the host (``https://bank.example@evil.example/`` goes to evil.example), and a host
    in other scripts shown as the browser resolves it (punycode), so a look-alike of a
    known name cannot pass for it."""
    text = url if isinstance(url, str) else ""
    parts = urlsplit(text)
    if parts.scheme not in ("https", "http") or not parts.hostname or len(text) > 2_000:
        raise AskRefused("the page it asks the person to open is not an http(s) address")
    if visible(text) != text or any(ch.isspace() for ch in text):
        raise AskRefused("the page it asks the person to open has odd characters in it")
    if parts.username is not None or parts.password is not None:
        raise AskRefused("the page it asks the person to open hides its host behind a name")
    try:
        host = parts.hostname.encode("idna").decode("ascii")
        port = f":{parts.port}" if parts.port is not None else ""
    except (UnicodeError, ValueError):
        raise AskRefused(
            "the page it asks the person to open has a host no browser can visit"
        ) from None
    return parts._replace(netloc=host + port).geturl()


def form_fields(schema: Any) -> tuple[FormField, ...]:
    """The fields of a requested schema, in the order the server gave them."""
    if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
        raise AskRefused("its form is not a JSON object schema")
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise AskRefused("its form's properties or required list are malformed")
    if len(properties) > MAX_FIELDS:
        raise AskRefused(f"its form has {len(properties)} fields (at most {MAX_FIELDS})")
    return tuple(_field(name, spec, name in required) for name, spec in properties.items())


def _field(name: Any, spec: Any, required: bool) -> FormField:
    if not isinstance(name, str) or not FIELD_NAME.fullmatch(name):
        raise AskRefused(f"its form has a field named {str(name)[:40]!r}")
    if not isinstance(spec, Mapping):
        raise AskRefused(f"its form's field {name} is not a schema")
    title = untrusted_text(_text(spec.get("title")) or name, MAX_TITLE_CHARS)
    base: dict[str, Any] = {
        "name": name,
        "title": title,
        "description": untrusted_text(_text(spec.get("description")), MAX_FIELD_DESCRIPTION_CHARS),
        "required": required,
    }
    kind = spec.get("type")
    default = spec.get("default")
    if kind == "array":
        return _picks_field(base, spec)
    if kind == "string":
        return _text_field(base, spec)
    if kind in ("number", "integer"):
        field = FormField(
            **base,
            kind=kind,
            minimum=_number(spec.get("minimum"), name),
            maximum=_number(spec.get("maximum"), name),
        )
        return _with_default(field, default if _is_number(default) else None)
    if kind == "boolean":
        return FormField(
            **base, kind="boolean", default=default if isinstance(default, bool) else None
        )
    raise AskRefused(f"its form's field {name} is of a kind a form cannot ask for")


def _picks_field(base: dict[str, Any], spec: Mapping[str, Any]) -> FormField:
    """A field of several listed choices (an array of them)."""
    name = base["name"]
    items = spec.get("items")
    choices = _choices(items if isinstance(items, Mapping) else {}, name)
    if not choices:
        raise AskRefused(f"its form's field {name} is a list of something other than choices")
    default = spec.get("default")
    values = {value for value, _ in choices}
    return FormField(
        **base,
        kind="choices",
        choices=choices,
        minimum=_number(spec.get("minItems"), name),
        maximum=_number(spec.get("maxItems"), name),
        default=default
        if isinstance(default, list) and all(item in values for item in default)
        else None,
    )


def _text_field(base: dict[str, Any], spec: Mapping[str, Any]) -> FormField:
    """A string field: one of listed choices when it lists them, else text."""
    name = base["name"]
    choices = _choices(spec, name)
    default = spec.get("default")
    if choices:
        values = {value for value, _ in choices}
        return FormField(
            **base,
            kind="choice",
            choices=choices,
            default=default if default in values else None,
        )
    format_ = spec.get("format") or ""
    if format_ not in ("", *FORMATS):
        raise AskRefused(f"its form's field {name} has a format toolhub does not know")
    field = FormField(
        **base,
        kind="text",
        format=format_,
        min_length=_whole(spec.get("minLength"), name),
        max_length=_whole(spec.get("maxLength"), name),
    )
    return _with_default(field, visible(default) if isinstance(default, str) else None)


def _with_default(field: FormField, default: Any) -> FormField:
    """``field`` prefilled with ``default`` only where the default fits the field: a form
    the person sends untouched must not be refused for what the server put in it."""
    if default is None:
        return field
    try:
        _read(field, default)
    except ValueError:
        return field
    return replace(field, default=default)


def _choices(spec: Mapping[str, Any], name: str) -> tuple[tuple[str, str], ...]:
    """The spec's three ways to list choices: ``enum`` (with ``enumNames``), ``oneOf`` or
    ``anyOf`` of ``{const, title}``."""
    listed: list[tuple[Any, Any]] = []
    if isinstance(spec.get("enum"), list):
        names = spec.get("enumNames")
        labels = (
            names if isinstance(names, list) and len(names) == len(spec["enum"]) else spec["enum"]
        )
        listed = list(zip(spec["enum"], labels, strict=True))
    for key in ("oneOf", "anyOf"):
        if isinstance(spec.get(key), list):
            listed = [
                (item.get("const"), item.get("title", item.get("const")))
                for item in spec[key]
                if isinstance(item, Mapping)
            ]
    if len(listed) > MAX_CHOICES:
        raise AskRefused(f"its form's field {name} lists more than {MAX_CHOICES} choices")
    choices = []
    for value, label in listed:
        if not isinstance(value, str) or len(value) > 200:
            raise AskRefused(f"its form's field {name} has a choice that is not a short text")
        choices.append((value, untrusted_text(_text(label) or value, MAX_TITLE_CHARS)))
    return tuple(choices)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if not _is_number(value):
        raise AskRefused(f"its form's field {name} has a bound that is not a number")
    return float(value) if isinstance(value, float) else value


def _whole(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise AskRefused(f"its form's field {name} has a length that is not a whole number")
    return value


def form_answer(fields: tuple[FormField, ...], content: Any) -> dict[str, Any]:
    """``content`` checked against ``fields`` and read as their types; ``FormError`` names
    each field that does not fit. An empty text for an optional field leaves it out."""
    if not isinstance(content, Mapping):
        raise FormError({"": "the answer must be an object of field values"})
    known = {item.name: item for item in fields}
    errors = {
        str(name)[:64]: "this form has no such field" for name in content if name not in known
    }
    answer: dict[str, Any] = {}
    for item in fields:
        value = content.get(item.name)
        if value is None or value == "" or value == []:
            if item.required and item.kind != "boolean":
                errors[item.name] = "required"
            elif item.required:
                answer[item.name] = False
            continue
        try:
            answer[item.name] = _read(item, value)
        except ValueError as exc:
            errors[item.name] = str(exc)
    if errors:
        raise FormError(errors)
    return answer


def _read(item: FormField, value: Any) -> Any:
    if item.kind == "boolean":
        if isinstance(value, bool):
            return value
        if value in ("true", "on", "1"):
            return True
        if value in ("false", "off", "0"):
            return False
        raise ValueError("must be yes or no")
    if item.kind in ("number", "integer"):
        number = _as_number(value, whole=item.kind == "integer")
        if item.minimum is not None and number < item.minimum:
            raise ValueError(f"must be at least {item.minimum:g}")
        if item.maximum is not None and number > item.maximum:
            raise ValueError(f"must be at most {item.maximum:g}")
        return number
    if item.kind == "choice":
        if not isinstance(value, str) or value not in {choice for choice, _ in item.choices}:
            raise ValueError("is not one of the choices")
        return value
    if item.kind == "choices":
        values = {choice for choice, _ in item.choices}
        if not isinstance(value, list) or not all(
            isinstance(v, str) and v in values for v in value
        ):
            raise ValueError("must be some of the choices")
        picked = list(dict.fromkeys(value))
        if item.minimum is not None and len(picked) < item.minimum:
            raise ValueError(f"pick at least {item.minimum:g}")
        if item.maximum is not None and len(picked) > item.maximum:
            raise ValueError(f"pick at most {item.maximum:g}")
        return picked
    if not isinstance(value, str):
        raise ValueError("must be text")
    return _checked_text(item, value)


def _as_number(value: Any, *, whole: bool) -> int | float:
    number: int | float
    if isinstance(value, str):
        try:
            number = int(value) if re.fullmatch(r"\s*[-+]?\d+\s*", value) else float(value)
        except ValueError:
            raise ValueError("must be a number") from None
    elif _is_number(value):
        number = value
    else:
        raise ValueError("must be a number")
    if not math.isfinite(number):
        raise ValueError("must be a number")
    if whole:
        if isinstance(number, float) and not number.is_integer():
            raise ValueError("must be a whole number")
        return int(number)
    return number


def _checked_text(item: FormField, value: str) -> str:
    if len(value) > MAX_TEXT_ANSWER_CHARS:
        raise ValueError(f"is longer than {MAX_TEXT_ANSWER_CHARS:,} characters")
    if item.min_length is not None and len(value) < item.min_length:
        raise ValueError(f"must be at least {item.min_length} characters")
    if item.max_length is not None and len(value) > item.max_length:
        raise ValueError(f"must be at most {item.max_length} characters")
    if item.format == "email" and not _EMAIL.fullmatch(value):
        raise ValueError("must be an email address")
    if item.format == "uri":
        parts = urlsplit(value)
        if not parts.scheme or not (parts.netloc or parts.path):
            raise ValueError("must be an address such as https://example.org/")
    if item.format == "date":
        try:
            datetime.date.fromisoformat(value)
        except ValueError:
            raise ValueError("must be a date such as 2026-12-31") from None
    if item.format == "date-time":
        try:
            datetime.datetime.fromisoformat(value)
        except ValueError:
            raise ValueError("must be a date and time such as 2026-12-31T09:30") from None
    return value
