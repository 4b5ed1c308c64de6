"""HTML to text a chunker can use: paragraphs kept whole, headings as Markdown headings (the markdown chunker's heading
path), code blocks verbatim in fences, table rows with their cells apart, list items on lines; scripts, styles and page
furniture (nav, header, footer, aside) dropped.

Parsed by selectolax's Lexbor engine (an HTML5 parser, so real-world markup parses as a browser would). Line wraps
inside a paragraph are only wrapping: they become spaces, never paragraph breaks. The result is the document's
text, so every chunk is an exact span of it.
"""

from __future__ import annotations

SKIP = {"script", "style", "noscript", "nav", "header", "footer", "aside", "template", "svg", "iframe", "form", "head"}
BLOCK = {
    "p", "div", "section", "article", "main", "blockquote", "figure", "figcaption", "address", "dd", "dt", "dl",
    "details", "summary", "body", "html", "center", "fieldset", "hr",
}  # fmt: skip
HEADINGS = {f"h{level}": level for level in range(1, 7)}
LINE_BREAK = "\x00"


def _collapse(text: str) -> str:
    return " ".join(text.split())


class _Blocks:
    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.inline: list[str] = []

    def flush(self) -> None:
        lines = (_collapse(line) for line in "".join(self.inline).split(LINE_BREAK))
        text = "\n".join(line for line in lines if line)
        if text:
            self.blocks.append(text)
        self.inline = []

    def add(self, block: str) -> None:
        self.flush()
        if block.strip():
            self.blocks.append(block)

    def walk(self, node) -> None:
        for child in node.iter(include_text=True):
            tag = child.tag
            if tag == "-text":
                self.inline.append(child.text_content or "")
            elif tag in SKIP or tag.startswith("_") or tag == "-comment":
                continue
            elif tag == "br":
                self.inline.append(LINE_BREAK)
            elif tag in HEADINGS:
                heading = _collapse(child.text(deep=True))
                self.add(f"{'#' * HEADINGS[tag]} {heading}" if heading else "")
            elif tag == "pre":
                self.add("```\n" + child.text(deep=True).strip("\n") + "\n```")
            elif tag == "table":
                self.add(_table(child))
            elif tag in ("ul", "ol"):
                self.add(_list(child, ordered=tag == "ol"))
            elif tag in BLOCK:
                self.flush()
                self.walk(child)
                self.flush()
            else:  # inline markup (a, b, em, code, span ...): its text joins the paragraph
                self.walk(child)


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


def html_text(markup: str) -> tuple[str, str]:
    """(title, text) of an HTML page: blocks separated by blank lines."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(markup)
    title_node = tree.css_first("title")
    title = _collapse(title_node.text()) if title_node is not None else ""
    blocks = _Blocks()
    if tree.body is not None:
        blocks.walk(tree.body)
    blocks.flush()
    return title, "\n\n".join(blocks.blocks)
