"""Model output to safe HTML: markdown-it-py renders, nh3 sanitizes.

Raw HTML in the source is escaped, not rendered (``html=False``), and the result still
passes through nh3's allow-list, so nothing a model writes can run in a page. Links get
``rel="noopener noreferrer"``; only http, https and mailto links survive.
"""

from __future__ import annotations

import functools

import nh3
from markdown_it import MarkdownIt

TAGS = {
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "li", "ol", "p", "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
# No style attributes: the strict CSP would refuse them (table alignment is dropped).
ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}}


@functools.cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
        ["table", "strikethrough"]
    )


def render_markdown(text: str) -> str:
    html = _parser().render(text)
    return nh3.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer",
    )
