"""How captured text and numbers look in the pages: Markdown with highlighted code, local times.

Captured text is untrusted (an agent may have echoed anything): Markdown is
rendered with raw HTML off, so a ``<script>`` in an answer is shown as text.
Only ``http:``, ``https:`` and ``mailto:`` links (and images) are made: any other
scheme (``javascript:``, ``file:``, ``smb:``, ``vscode:``, an app's own handler)
or a relative link is shown as the text it was, since the system hands a link
to whatever program claims its scheme (review2-sec link_schemes). Every link
opens outside the settings window (``target=_blank``: pywebview hands it to the
system browser) with no opener and no referrer, so a link to another port of
127.0.0.1 never loads in the window that holds rltray's session cookie. Code blocks are
highlighted by Pygments into CSS classes (the stylesheet is ``highlight_css``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

#: The schemes a link in captured text may have; others are shown as text.
LINK_SCHEMES = re.compile(r"(?:https?|mailto):", re.IGNORECASE)


def _highlight(code: str, lang: str, _attrs: Any) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(lang or "text")
    except ClassNotFound:
        lexer = get_lexer_by_name("text")
    # markdown-it uses highlight output that starts with "<pre" as is (else wraps it in a <pre>)
    body = highlight(code, lexer, HtmlFormatter(nowrap=True))
    return f'<pre class="hl"><code>{body}</code></pre>\n'


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": False, "highlight": _highlight}).enable("table")
    default = parser.validateLink
    # links, autolinks, images and reference definitions all ask this (the URL normalized)
    parser.validateLink = lambda url: default(url) and bool(LINK_SCHEMES.match(url))  # type: ignore[method-assign]
    parser.add_render_rule("link_open", _link_open)
    return parser


def _link_open(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("target", "_blank")
    tokens[idx].attrSet("rel", "noopener noreferrer")
    return str(self.renderToken(tokens, idx, options, env))


def commands(text: str | None) -> Markup:
    """A sentence of rltray's own with each `command` in it shown as code, the rest escaped.

    The sentences are written for the terminal and the tray too, where the backticks read
    as quoting; a page shows code as code instead of bare backticks.
    """
    import re

    from markupsafe import escape

    return Markup(re.sub(r"`([^`\n]+)`", r"<code>\1</code>", str(escape(text or ""))))


def markdown(text: str | None) -> Markup:
    """Captured Markdown as safe HTML (raw HTML escaped, code highlighted)."""
    return Markup(_parser().render(text or ""))


@lru_cache(maxsize=1)
def highlight_css() -> str:
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style="friendly").get_style_defs(".hl")


def local_time(iso: str | None) -> str:
    from rltray.app.words import local_time as to_local

    return to_local(iso)


def version(v: int | None) -> str:
    return "base model" if v is None else f"v{v}"


def number(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)
