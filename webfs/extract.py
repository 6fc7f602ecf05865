"""What the index keeps of one document: its words, its title and its out-links.

This module owns turning a document's bytes into text for the full-text
index. HTML is parsed with selectolax (lexbor, a well-kept HTML5 parser), decoded by the
charset of its MIME type or its ``<meta charset>``, else as plain text: scripts,
styles and templates are dropped, entities decoded, and every ``<a href>``
/ ``<area href>`` / ``<frame src>`` is resolved against the capture's URL
(and a ``<base href>``). Plain text is decoded as UTF-8, else cp1252 (its
common other spelling on the web). Other types give nothing but their MIME
type, which the index keeps per file.
"""
from __future__ import annotations

import functools
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Optional

from selectolax.lexbor import LexborHTMLParser as HTMLParser

MAX_TEXT = 256 * 1024           # characters of text indexed per document: a page's words, not a book's
MAX_LINKS = 2000                # out-links kept per document
DROPPED_TAGS = ["script", "style", "noscript", "template", "svg"]
LINK_TAGS = (("a", "href"), ("area", "href"), ("frame", "src"), ("iframe", "src"))
LINK_SELECTOR = ", ".join(f"{tag}[{attr}]" for tag, attr in LINK_TAGS)
LINK_ATTR = dict(LINK_TAGS)
_SPACE = re.compile(r"\s+")
_CHARSET = re.compile(rb"charset\s*=\s*[\"']?([A-Za-z0-9_.:-]+)", re.I)


@dataclass
class Extracted:
    """The indexed parts of one document."""
    kind: str                   # "html", "text" or "other"
    title: str = ""
    text: str = ""
    links: list[str] = field(default_factory=list)


def kind_of(mime: str, data: bytes) -> str:
    """html, text or other: by the MIME type, else by a look at the bytes."""
    mime = mime.split(";")[0].strip().lower()
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime.startswith("text/"):
        return "text"
    if mime:
        return "other"
    head = data[:512].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")) or any(t in head for t in (b"<head", b"<body", b"<title")):
        return "html"
    return "text" if b"\0" not in data[:4096] and _decodes(data[:4096]) else "other"


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError as exc:
        return exc.start >= len(data) - 3          # a character cut at the sample's end


def decode_text(data: bytes, mime: str = "") -> str:
    """Text bytes as str: the charset the MIME type names, else UTF-8, else cp1252."""
    m = _CHARSET.search(mime.encode("latin-1", "replace"))
    for charset in ([m.group(1).decode()] if m else []) + ["utf-8"]:
        try:
            return data.decode(charset)
        except (UnicodeDecodeError, LookupError):
            continue
    return data.decode("cp1252", "replace")


def extract(data: bytes, mime: str = "", url: Optional[str] = None) -> Extracted:
    """The title, text and resolved out-links of a document."""
    kind = kind_of(mime, data)
    if kind == "text":
        return Extracted(kind, text=decode_text(data[:4 * MAX_TEXT], mime)[:MAX_TEXT])
    if kind != "html":
        return Extracted(kind)
    charset = _CHARSET.search(data[:2048])              # <meta charset> or http-equiv, when the MIME type names none
    hint = mime if "charset" in mime.lower() or not charset else "text/html; charset=" + charset.group(1).decode()
    tree = HTMLParser(decode_text(data, hint))
    title_node = tree.css_first("title")
    title = _SPACE.sub(" ", title_node.text()).strip() if title_node is not None else ""
    base = url or ""
    base_node = tree.css_first("base[href]")
    if base_node is not None and base:
        base = urllib.parse.urljoin(base, base_node.attributes.get("href") or "")
    links = _links(tree, base)
    tree.strip_tags(DROPPED_TAGS)
    body = tree.body if tree.body is not None else tree.root
    # Whitespace is left as it is: the tokenizer splits on it (collapsing it cost a fifth of the pass).
    text = body.text(separator=" ")[:MAX_TEXT] if body is not None else ""
    return Extracted(kind, title=title, text=text, links=links)


def _links(tree: HTMLParser, base: str) -> list[str]:
    """Distinct http(s) out-links, resolved against ``base``, fragments cut, in page order."""
    seen: dict[str, None] = {}
    hrefs: set[str] = set()                     # a page names most of its links more than once
    resolve = _Resolver(base)
    for node in tree.css(LINK_SELECTOR):        # one walk of the tree, not one a tag
        href = node.attributes.get(LINK_ATTR.get(node.tag, "href"))
        if not href or href in hrefs:
            continue
        hrefs.add(href)
        full = resolve.link(href)
        if full:
            seen.setdefault(full, None)
            if len(seen) >= MAX_LINKS:
                break
    return list(seen)


QUICK_KEYS_KEPT = 1 << 12       # hrefs remembered across pages (a site's pages share most of theirs; the mount's daemon keeps them too)
_quick_keys: dict[tuple[str, str, str], Optional[str]] = {}     # None: by urljoin


class _Resolver:
    """hrefs of one page to link keys. The common ones (absolute, from the
    root, plain relative names) by string work on the page's own key; the
    rest (dot segments, queries alone, other schemes) by urljoin. Resolving
    every link with urljoin was nine tenths of a document's indexing time."""

    def __init__(self, base: str):
        self.base = base
        key = link_key(base) if base[:8].lower().startswith(("http://", "https://")) else ""
        self.origin = key[:key.find("/", key.find("//") + 2)] if key else ""
        self.folder = key.split("?")[0].rsplit("/", 1)[0] + "/" if key else ""
        if "//" in self.folder[len(self.origin):] or "/." in self.folder[len(self.origin):]:
            self.origin = ""            # urljoin drops empty and dot segments of the base's path: its way only

    def link(self, href: str) -> str:
        """The link key of an href as the page has it ('' for none: a fragment,
        javascript:, mailto:, data:). What the quick ways give depends on the
        href and on the page's origin and folder alone (an href from the root:
        its origin alone), so it is remembered across pages: the pages of a
        site repeat their links."""
        memo = (self.origin, "" if href[:1] == "/" else self.folder, href)
        found = _quick_keys.get(memo, False)
        if found is False:
            plain = href.strip()
            found = "" if not plain or plain.startswith(("#", "javascript:", "mailto:", "data:")) else \
                self.quick(plain)
            if len(_quick_keys) >= QUICK_KEYS_KEPT:
                _quick_keys.clear()
            _quick_keys[memo] = found
        return found if found is not None else self.by_urljoin(href.strip().split("#", 1)[0].rstrip())

    def __call__(self, href: str) -> str:
        found = self.quick(href)
        return found if found is not None else self.by_urljoin(href.split("#", 1)[0].rstrip())

    def quick(self, href: str) -> Optional[str]:
        """The link key of an href by the quick ways, None if only urljoin gives it."""
        href = href.split("#", 1)[0].rstrip()      # link_key strips the whole URL
        absolute = href[:8].lower().startswith(("http://", "https://"))
        if _plain(href):
            if absolute:
                return _absolute_key(href)
            if self.origin and not href.startswith("?") and "//" not in href and ":" not in href.split("/", 1)[0]:
                return self.origin + href if href.startswith("/") else self.folder + href
        return None

    def by_urljoin(self, href: str) -> str:
        """The link key of ``href`` (its fragment cut) by urljoin: what the
        quick ways above must give (t1_query checks them against it)."""
        if not self.base and not href[:8].lower().startswith(("http://", "https://")):
            return ""
        try:
            full = urllib.parse.urljoin(self.base, href)
        except ValueError:
            return ""                   # a malformed href (an IPv6 host missing its bracket)
        return _absolute_key(full) if full[:8].lower().startswith(("http://", "https://")) else ""


def _plain(href: str) -> bool:
    """Whether urljoin leaves ``href`` as it is (after the base's origin or
    folder, or alone): no dot segment, no parameters (;), no empty query, no
    tab or newline (which urlsplit removes)."""
    return ("./" not in href and ";" not in href and href.isprintable() and not href.endswith("?")
            and href.split("?", 1)[0].rsplit("/", 1)[-1] not in (".", ".."))


@functools.lru_cache(maxsize=1 << 16)
def _absolute_key(url: str) -> str:
    return link_key(urllib.parse.urldefrag(url)[0])


def host_of(url: str) -> str:
    """The host of a URL, lowercase, without port or a trailing dot ('' if none)."""
    return key_and_host(url)[1]


def link_key(url: str) -> str:
    """A URL as links are counted: scheme and host in lowercase, no default port,
    no fragment, '/' for an empty path; the rest as written."""
    return key_and_host(url)[0]


def key_and_host(url: str) -> tuple[str, str]:
    """(link_key, host_of) of a URL, from one parse of it (two if blanks pad it:
    host_of parses it as it is)."""
    plain = url.strip()
    try:
        parts = urllib.parse.urlsplit(plain)
        host = (parts.hostname or "").rstrip(".")
        port = parts.port
    except ValueError:
        return url, _host_alone(url)
    as_is = host if plain == url else _host_alone(url)
    if not host:
        return url, as_is
    scheme = parts.scheme.lower()
    netloc = f"{host}:{port}" if port and (scheme, port) not in (("http", 80), ("https", 443)) else host
    return urllib.parse.urlunsplit((scheme, netloc, parts.path or "/", parts.query, "")), as_is


def _host_alone(url: str) -> str:
    """The host of a URL as it is (its port is not parsed)."""
    try:
        return (urllib.parse.urlsplit(url).hostname or "").rstrip(".")
    except ValueError:
        return ""
