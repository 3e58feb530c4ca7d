"""Web and publishing formats: HTML pages, XML (RSS / Atom feeds), EPUB books."""

from __future__ import annotations

import io
import posixpath
import zipfile
from typing import Any
from xml.etree import ElementTree

from ragspine.ingest.formats import blocks_text, require, table_text

# Elements that are page furniture, not content.
_FURNITURE = ("script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "svg")
_BLOCKS = ("h1", "h2", "h3", "h4", "h5", "h6", "p", "li", "pre", "blockquote", "dt", "dd", "figcaption")


def html_blocks(html: str | bytes) -> tuple[list[str], str]:
    """The content blocks of an HTML page (headings, paragraphs, list items, table rows, in order) and its
    title. ``<main>`` (or a lone ``<article>``) is the content when there is one; navigation, headers,
    footers, asides, forms and scripts never are."""
    bs4 = require("bs4")
    soup = bs4.BeautifulSoup(html, "html.parser")
    title_tag = soup.find("title")
    title = " ".join(title_tag.get_text(" ").split()) if title_tag else ""
    for tag in soup.find_all(_FURNITURE):
        tag.decompose()
    for tag in soup.find_all(attrs={"role": ["navigation", "banner", "contentinfo", "search"]}):
        tag.decompose()
    articles = soup.find_all("article")
    root: Any = soup.find("main") or (articles[0] if len(articles) == 1 else None) or soup.body or soup
    blocks: list[str] = []
    for node in root.find_all([*_BLOCKS, "table"]):
        if node.name == "table":
            rows = [
                [" ".join(c.get_text(" ").split()) for c in tr.find_all(["th", "td"])]
                for tr in node.find_all("tr")
            ]
            blocks.append(table_text(rows))
            continue
        if node.find_parent("table") is not None or node.find_parent(list(_BLOCKS)) is not None:
            continue  # inside a table (read with it) or inside another block (read with that)
        blocks.append(node.get_text(" "))
    if not any(b.strip() for b in blocks):  # a page of bare text without block elements
        blocks = [root.get_text("\n")]
    heading = root.find(["h1", "h2"])
    return blocks, title or (" ".join(heading.get_text(" ").split()) if heading else "")


def html_text(data: bytes, *, source: str) -> tuple[str, str]:
    """Text and title of an HTML page (see ``html_blocks``); the encoding is the page's own."""
    blocks, title = html_blocks(data)
    return blocks_text(blocks), title


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child_text(element: ElementTree.Element, *names: str) -> str:
    for child in element:
        if _local(child.tag) in names:
            return "".join(child.itertext()).strip()
    return ""


def xml_text(data: bytes, *, source: str) -> tuple[str, str]:
    """Text of an XML file: an RSS or Atom feed as one section per item (title, date, summary; HTML in
    the summary read as text), any other XML as its elements' text, one line per element."""
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        raise ValueError(f"{source} is not well-formed XML ({exc})") from None
    items = [e for e in root.iter() if _local(e.tag) in ("item", "entry")]
    if items:
        channel = next((e for e in root.iter() if _local(e.tag) in ("channel", "feed")), root)
        sections = []
        for item in items:
            summary = _child_text(item, "description", "summary", "content", "encoded")
            if "<" in summary:
                summary = blocks_text(html_blocks(summary)[0])
            date = _child_text(item, "pubDate", "published", "updated", "date")
            sections.append("\n".join(p for p in (_child_text(item, "title"), date, summary) if p))
        return blocks_text(sections), _child_text(channel, "title")
    lines = [(element.text or "").strip() for element in root.iter()]
    return blocks_text(["\n".join(line for line in lines if line)]), ""


def epub_text(data: bytes, *, source: str) -> tuple[str, str]:
    """Text and title of an EPUB: the pages its package lists in the spine, in reading order."""
    try:
        book = zipfile.ZipFile(io.BytesIO(data))
        container = ElementTree.fromstring(book.read("META-INF/container.xml"))
        rootfile = next(e.get("full-path") for e in container.iter() if _local(e.tag) == "rootfile")
        package = ElementTree.fromstring(book.read(rootfile or ""))
    except (zipfile.BadZipFile, KeyError, StopIteration, ElementTree.ParseError) as exc:
        raise ValueError(f"{source} is not a readable EPUB ({type(exc).__name__}: {exc})") from None
    base = posixpath.dirname(rootfile or "")
    manifest = {e.get("id"): e.get("href", "") for e in package.iter() if _local(e.tag) == "item"}
    spine = [e.get("idref") for e in package.iter() if _local(e.tag) == "itemref"]
    title = next(("".join(e.itertext()).strip() for e in package.iter() if _local(e.tag) == "title"), "")
    blocks: list[str] = []
    for idref in spine:
        href = manifest.get(idref)
        if not href:
            continue
        try:
            page = book.read(posixpath.normpath(posixpath.join(base, href)))
        except KeyError:
            raise ValueError(f"{source}: its spine names {href!r}, which the archive does not hold") from None
        blocks += html_blocks(page)[0]
    return blocks_text(blocks), title
