"""Model output to safe HTML: markdown-it-py renders, nh3 sanitizes.

Raw HTML in the source is escaped, not rendered (``html=False``), and the result still
passes through nh3's allow-list, so nothing a model writes can run in a page. Links get
``rel="noopener noreferrer"``; only http, https and mailto links survive.

Fenced code is highlighted here, on the server, by Pygments: spans with short class names
(styled by ``static/toolhub/code.css``, light and dark), never inline styles, which the
strict CSP would refuse. A fence without a language, or with one Pygments does not know,
is plain escaped text; an oversized block is not highlighted at all (bounded work).
"""

from __future__ import annotations

import functools

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

TAGS = {
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "li", "ol", "p", "pre", "span", "strong", "table", "tbody", "td", "th", "thead", "tr",
    "ul",
}  # fmt: skip
# No style attributes: the strict CSP would refuse them (table alignment is dropped).
ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "pre": {"class"}, "span": {"class"}}
# Larger code blocks are shown as plain text: highlighting is linear, but not free.
HIGHLIGHT_MAX_CHARS = 100_000
_FORMATTER = HtmlFormatter(nowrap=True)


def _highlight(code: str, lang: str, attrs: str) -> str:
    name = lang.strip().split(maxsplit=1)[0].lower() if lang.strip() else ""
    if not name or len(code) > HIGHLIGHT_MAX_CHARS:
        return ""
    try:
        lexer = get_lexer_by_name(name)
    except ClassNotFound:
        return ""
    body = highlight(code, lexer, _FORMATTER)
    label = escapeHtml(name)
    return f'<pre class="highlight"><code class="language-{label}">{body}</code></pre>\n'


@functools.cache
def _parser() -> MarkdownIt:
    return MarkdownIt(
        "commonmark", {"html": False, "linkify": False, "highlight": _highlight}
    ).enable(["table", "strikethrough"])


def render_markdown(text: str) -> str:
    html = _parser().render(text)
    return nh3.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer",
    )
