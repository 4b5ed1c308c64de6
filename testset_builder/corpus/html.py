"""HTML to text a chunker can use: paragraphs kept whole, headings as Markdown headings (the markdown chunker's heading
path), code blocks verbatim in fences, table rows with their cells apart, list items on lines; scripts, styles and page
furniture (nav, header, footer, aside) dropped.

Parsed by selectolax's Lexbor engine (an HTML5 parser, so real-world markup parses as a browser would). Line wraps
inside a paragraph are only wrapping: they become spaces, never paragraph breaks. The result is the document's
text, so every chunk is an exact span of it.

Furniture that is kept as text (a site's sidebar in a ``div``, a table of contents, "this page" and "edit on GitHub"
blocks, a cookie banner) is marked, not dropped: :func:`html_document` gives the spans of the text that came from it,
so its chunks stay searchable but are never a question's source. A block is furniture when it lies outside the
page's main landmark (``<main>`` or ``role="main"``, when the page has one), inside an element whose ARIA role or
class or id names furniture, or when most of its text is link text: link density, the strongest of the shallow text
features in Kohlschütter, Fankhauser and Nejdl (2010), "Boilerplate detection using shallow text features".
"""

from __future__ import annotations

import re

SKIP = {"script", "style", "noscript", "nav", "header", "footer", "aside", "template", "svg", "iframe", "form", "head"}
BLOCK = {
    "p", "div", "section", "article", "main", "blockquote", "figure", "figcaption", "address", "dd", "dt", "dl",
    "details", "summary", "body", "html", "center", "fieldset", "hr",
}  # fmt: skip
HEADINGS = {f"h{level}": level for level in range(1, 7)}
LINE_BREAK = "\x00"

FURNITURE_TAGS = {"button", "select", "search", "dialog", "menu"}  # controls and landmarks, never the page's text
FURNITURE_ROLES = {
    "navigation", "search", "banner", "contentinfo", "complementary", "dialog", "alertdialog", "menu", "menubar",
    "toolbar", "tablist", "note",
}  # fmt: skip
# class words that name furniture in themes and hand-written sites alike (a word of ``nav-links``; ``sphinxsidebar``
# contains ``sidebar``): never ``header`` (``section-header`` wraps a heading of the text)
FURNITURE_CLASSES = re.compile(
    r"(^|[-_\s])(nav|navbar|navigation|menu|breadcrumbs?|toc|pagination|cookies?|consent|related)($|[-_\s])|"
    r"sidebar|footer|edit-?this-?page|this-?page",
    re.IGNORECASE,
)
# an id names furniture only as a whole (``id="menu"``, ``id="cookie-banner"``): a section's or a heading's id comes
# from its title ("Cookie objects" is ``cookie-objects``), so those are never read
FURNITURE_ID = re.compile(
    r"((site|main|top|page)[-_]?)?(nav|navbar|navigation|menu|sidebar|footer|breadcrumbs?|toc|"
    r"cookies?([-_]?(banner|consent|notice|bar))?|consent)",
    re.IGNORECASE,
)
TITLED = {"section", "article", *HEADINGS}  # elements whose id a heading's title gives
LINK_DENSE = 0.5  # a block whose text is at least half link text is a list of links, not prose


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _visible(text: str) -> int:
    return len(text) - sum(ch.isspace() for ch in text)


def is_furniture(node) -> bool:
    """An element that holds page furniture by what it is: a control or landmark tag, a furniture ARIA role, a class
    naming furniture, or an id that is a furniture name as a whole (not on a section or heading)."""
    if node.tag in FURNITURE_TAGS:
        return True
    attributes = node.attributes
    if (attributes.get("role") or "").strip().lower() in FURNITURE_ROLES:
        return True
    if FURNITURE_CLASSES.search(attributes.get("class") or ""):
        return True
    identifier = (attributes.get("id") or "").strip()
    titled = node.tag in TITLED or "section" in (attributes.get("class") or "").split()
    return bool(identifier) and not titled and bool(FURNITURE_ID.fullmatch(identifier))


def _is_main(node) -> bool:
    return node.tag == "main" or (node.attributes.get("role") or "").strip().lower() == "main"


def link_density(node) -> float:
    """The share of an element's visible characters that are link text."""
    total = _visible(node.text(deep=True))
    if not total:
        return 0.0
    return sum(_visible(a.text(deep=True)) for a in node.css("a")) / total


class _Blocks:
    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.furniture: list[bool] = []
        self.inline: list[str] = []
        self.inline_furniture = 0  # visible characters of the pending inline text inside furniture or links

    def flush(self) -> None:
        lines = (_collapse(line) for line in "".join(self.inline).split(LINE_BREAK))
        text = "\n".join(line for line in lines if line)
        if text:
            self.blocks.append(text)
            self.furniture.append(self.inline_furniture >= LINK_DENSE * _visible(text))
        self.inline, self.inline_furniture = [], 0

    def add(self, block: str, furniture: bool) -> None:
        self.flush()
        if block.strip():
            self.blocks.append(block)
            self.furniture.append(furniture)

    def walk(self, node, furniture: bool = False, link: bool = False) -> None:
        for child in node.iter(include_text=True):
            tag = child.tag
            if tag == "-text":
                text = child.text_content or ""
                self.inline.append(text)
                if furniture or link:
                    self.inline_furniture += _visible(text)
                continue
            if tag in SKIP or tag.startswith("_") or tag == "-comment":
                continue
            marked = False if _is_main(child) else furniture or is_furniture(child)  # the main landmark is the text
            if tag == "br":
                self.inline.append(LINE_BREAK)
            elif tag in HEADINGS:
                heading = _collapse(child.text(deep=True))
                self.add(f"{'#' * HEADINGS[tag]} {heading}" if heading else "", marked)
            elif tag == "pre":
                self.add("```\n" + child.text(deep=True).strip("\n") + "\n```", marked)
            elif tag == "table":
                self.add(_table(child), marked or link_density(child) >= LINK_DENSE)
            elif tag in ("ul", "ol"):
                self.add(_list(child, ordered=tag == "ol"), marked or link_density(child) >= LINK_DENSE)
            elif tag in BLOCK:
                self.flush()
                self.walk(child, marked, link)
                self.flush()
            else:  # inline markup (a, b, em, code, span ...): its text joins the paragraph
                self.walk(child, marked, link or tag == "a")


def _table(table) -> str:
    rows = []
    for row in table.css("tr"):
        cells = [_collapse(cell.text(deep=True)) for cell in row.iter() if cell.tag in ("td", "th")]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _list(node, ordered: bool) -> str:
    items = [child for child in node.iter() if child.tag == "li"]
    lines = [f"{f'{i}.' if ordered else '-'} {_collapse(item.text(deep=True))}" for i, item in enumerate(items, 1)]
    return "\n".join(line for line in lines if line.split(" ", 1)[1:] != [""])


def html_document(markup: str) -> tuple[str, str, list[tuple[int, int]]]:
    """(title, text, furniture spans) of an HTML page: the text's blocks separated by blank lines, and the
    ``(start, end)`` character spans of the text that came from page furniture (see the module docstring), adjacent
    blocks' spans merged across the blank line between them."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(markup)
    title_node = tree.css_first("title")
    title = _collapse(title_node.text()) if title_node is not None else ""
    blocks = _Blocks()
    if tree.body is not None:
        blocks.walk(tree.body, furniture=tree.body.css_first("main, [role=main]") is not None)
    blocks.flush()
    return title, "\n\n".join(blocks.blocks), _spans(blocks.blocks, blocks.furniture)


def _spans(texts: list[str], furniture: list[bool]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    position = 0
    for text, marked in zip(texts, furniture, strict=True):
        if marked:
            if spans and spans[-1][1] + 2 == position:
                spans[-1] = (spans[-1][0], position + len(text))
            else:
                spans.append((position, position + len(text)))
        position += len(text) + 2
    return spans


def html_text(markup: str) -> tuple[str, str]:
    """(title, text) of an HTML page: blocks separated by blank lines."""
    title, text, _ = html_document(markup)
    return title, text
