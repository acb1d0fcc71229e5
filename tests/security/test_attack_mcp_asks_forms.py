"""Attacks on what a server's form and sampling request carry: text a person is shown
and a model is sent (``toolhub/tools/mcp/asks.py``), and the card that draws a hostile
form (templates/sessions_app/_transcript.html) in a real turn with the hand-written
hostile server."""

from __future__ import annotations

import sys
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest
from mcp_types import SamplingMessage, TextContent

from tests.integration.agent_app.test_mcp_servers import connected, load_then_call
from tests.mcp import wait_for
from toolhub.tools.mcp.asks import AskRefused, sampling_ask
from toolhub.tools.mcp.forms import elicit_form, form_answer, form_fields

HOSTILE = Path(__file__).resolve().parent / "hostile_mcp_server.py"

# Characters a browser draws as nothing (or draws the text around them reordered) while a
# model reads every one: bidi controls, zero-width characters, the word joiner, the BOM,
# and the Unicode "tag" block that spells ASCII invisibly.
HIDDEN = "\u202e\u2066\u200b\u2060\ufeff" + "".join(chr(0xE0000 + ord(c)) for c in "rm -rf")


def invisible(text: str) -> list[str]:
    return [f"U+{ord(ch):04X}" for ch in text if unicodedata.category(ch) == "Cf"]


def test_a_sampling_request_cannot_smuggle_text_the_person_does_not_see_to_the_model():
    """A sampling request is shown whole for the person's Allow: bidi controls,
    zero-width and Unicode tag characters (invisible in the card, read by a model) are
    removed from its system prompt and messages, so a server cannot show "Summarise the
    weather" and have the model read instructions the person never saw."""
    params = SimpleNamespace(
        messages=[
            SamplingMessage(
                role="user",
                content=TextContent(type="text", text=f"Summarise the weather{HIDDEN}"),
            )
        ],
        system_prompt=f"Be brief.{HIDDEN}",
        max_tokens=50,
        tools=None,
        tool_choice=None,
    )

    try:
        ask = sampling_ask("hostile", params)
    except AskRefused:
        return
    sent = ask.system + "".join(text for _, text in ask.messages)

    assert invisible(sent) == [], f"sent to the model unseen: {invisible(sent)}"


def test_form_labels_keep_no_invisible_characters():
    """A form's message, titles and choice labels keep no invisible character: not the
    word joiner (U+2060), the BOM (U+FEFF), U+2061 to U+2064 or the tag block (U+E0000
    to U+E007F), so a choice whose label reads "Yes" carries nothing between its
    letters."""
    form = elicit_form(
        "hostile",
        SimpleNamespace(
            message=f"Approve?{HIDDEN}",
            mode="form",
            requested_schema={
                "type": "object",
                "properties": {"ok": {"type": "string", "title": f"Yes{HIDDEN}"}},
            },
        ),
    )

    assert invisible(form.message + form.fields[0].title) == []


@pytest.mark.parametrize(
    "url",
    [
        # A Cyrillic a (U+0430) in a host that reads "apple.com".
        "https://\u0430pple.com/sign-in",
        # Reads as toolhub.example, goes to evil.example.
        "https://toolhub.example@evil.example/sign-in",
    ],
)
def test_a_page_to_open_whose_address_misleads_is_refused(url):
    """A URL-mode form sends a person to a sign-in page, the phishing case itself: a
    host in look-alike letters of another script is shown as the browser resolves it
    (punycode), and an address with user info before "@" (the part a reader takes for
    the host) is refused."""
    params = SimpleNamespace(message="Sign in", mode="url", url=url)

    try:
        form = elicit_form("hostile", params)
    except AskRefused:
        return

    assert form.url.isascii(), f"shown to the person: {form.url}"
    assert "@" not in form.url, f"shown to the person: {form.url}"


def test_a_forms_default_must_fit_its_own_field():
    """A text field's default is cleaned and kept only where it fits the field's own
    ``maxLength`` and format: no 1 MB or bidi prefill, and a form the person sends
    untouched is never refused for what the server put in it."""
    fields = form_fields(
        {
            "type": "object",
            "properties": {
                "code": {"type": "string", "maxLength": 5, "default": "\u202e" + "x" * 1_000_000},
            },
        }
    )
    default = fields[0].default

    assert default is None or (len(default) <= 5 and invisible(default) == [])
    if default is not None:
        form_answer(fields, {"code": default})


@pytest.mark.parametrize("value", [["red"], {"red": True}])
def test_an_answer_of_the_wrong_shape_for_a_one_choice_field_is_a_form_error(value):
    """A list or an object given to a one-choice field is a ``FormError`` naming it,
    never a ``TypeError`` (test_attack_mcp_asks_chat.py shows the socket and REST)."""
    fields = form_fields(
        {"type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "blue"]}}}
    )

    with pytest.raises(ValueError, match="colour"):
        form_answer(fields, {"colour": value})


# --- the card, in a real turn -------------------------------------------------------

pytestmark_db = pytest.mark.django_db(transaction=True)

MARKUP = '"><img src=x onerror=alert(1)><script>alert(1)</script>'
HOSTILE_FORM = {
    "message": f"Hello {MARKUP}",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "text": {
                "type": "string",
                "title": f"</label>{MARKUP}",
                "description": MARKUP,
                "default": f"x{MARKUP}",
            },
            "pick": {
                "type": "string",
                "title": MARKUP,
                "oneOf": [{"const": 'a" onfocus="alert(1)', "title": MARKUP}, {"const": "b"}],
                "default": 'a" onfocus="alert(1)',
            },
            "many": {
                "type": "array",
                "title": MARKUP,
                "items": {"enum": ['v" autofocus onfocus="alert(1)', "w"]},
                "default": ['v" autofocus onfocus="alert(1)'],
            },
            "yes": {"type": "boolean", "title": MARKUP, "default": True},
            "count": {"type": "integer", "title": MARKUP, "minimum": 0, "default": 3},
        },
    },
}
HOSTILE_PAGE = {
    "mode": "url",
    "message": MARKUP,
    "url": 'https://example.org/"onmouseover="alert(1)"x=\'<script>',
    "elicitationId": "e1",
}


class _Attributes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.handlers: list[tuple[str, str]] = []
        self.hrefs: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name.startswith("on") or name == "autofocus":
                self.handlers.append((tag, name))
            if name == "href" and value:
                self.hrefs.append(value)


@pytestmark_db
@pytest.mark.parametrize("params", [HOSTILE_FORM, HOSTILE_PAGE], ids=["form", "page"])
@pytest.mark.processes
def test_a_hostile_form_on_the_card_is_text_never_markup(
    owner, staff, model, registry_state, settings, tmp_path, client, params
):
    """Resisted: every text of a hostile form (message, titles, descriptions, choice
    values and labels, defaults, a page's address) is escaped on the card; no element or
    event handler of the server's reaches the page, and the link is the address as sent."""
    from agent_app import mcp
    from agent_app.models import McpServer
    from agent_app.turns import on_turn_loop, turn_start
    from sessions_app.services import session_create

    settings.TOOLHUB_WORKSPACE_ROOT = tmp_path / "workspaces"
    McpServer.objects.create(
        name="hostile",
        transport="stdio",
        command=sys.executable,
        args=[str(HOSTILE), "--log", str(tmp_path / "log")],
        created_by=staff,
    )
    mcp.mcp_sync(wait=10)
    try:
        wait_for(lambda: connected("hostile"), what="the hostile server to connect")
        load_then_call(model, "hostile__ask", {"params": params})
        session = session_create(user=owner)
        on_turn_loop(turn_start, session=session, text="ask", attended=True)

        def waiting():
            session.refresh_from_db()
            return (session.turn_waiting or {}).get("kind") == "elicitation"

        wait_for(waiting, what="the form to wait")
        client.force_login(owner)
        page = client.get(f"/chat/{session.pk}/").content.decode()
        parsed = _Attributes()
        parsed.feed(page)
    finally:
        McpServer.objects.all().delete()
        mcp.mcp_sync(wait=10)

    assert "data-elicit" in page  # the form is drawn
    assert "<img src=x" not in page
    assert "<script>alert(1)</script>" not in page
    assert parsed.handlers == []
    assert "img" not in parsed.tags
    if params is HOSTILE_PAGE:
        assert params["url"] in parsed.hrefs
