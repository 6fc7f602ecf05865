"""The query language of ``webfs search`` and ``.webfs/search/``, and running it.

This module owns turning a query into SQL over the index (webfs.index) and
ranking the answers. A query is terms separated by spaces, all of which must
hold:

    word  "a phrase"          in a document's title or text (FTS5, diacritics folded)
    title:word  title:"a b"   in its title
    url:PREFIX                its URL starts so (a URL without scheme: http or https)
    host:example.org          its host, or a subdomain of it
    links-to:URL              it links to URL
    inlinks>N (>=, <, <=, =)  that many documents link to its URL
    mime:text/html  mime:image  its MIME type, or its major type
    date:2014..2015  date:20140301  date:..2015  its capture date, inclusive
    collection:NAME           it is in that collection

With words, answers whose title holds one of them come first, then newest
capture first (the index keeps no word counts, which BM25 would need). The index keeps which column a
word is in, not where (webfs.index): a phrase, or a term the tokenizer cuts
in several words (``foo-bar``), matches the documents that hold all of its
words, and then is checked in order against each one's text (``phrase_holds``).
"""
from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field

from .errors import WebfsError

FIELDS = ("title", "url", "host", "links-to", "mime", "date", "collection")
_TERM = re.compile(r'(?:(?P<field>[a-z-]+):)?(?:"(?P<phrase>[^"]*)"?|(?P<word>\S*))')
_INLINKS = re.compile(r"inlinks(>=|<=|>|<|=)(\d+)")
_DATE = re.compile(r"(\d{4,14})?(\.\.)?(\d{4,14})?")
_TOKEN = re.compile(r"[^\W_]+")        # FTS5's unicode61: letters and digits, the rest separates
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


class BadQuery(WebfsError):
    """A query that does not parse; the message says which term."""


@dataclass
class Compiled:
    match: list[str] = field(default_factory=list)      # FTS5 terms, ANDed
    where: list[str] = field(default_factory=list)
    params: list = field(default_factory=list)
    phrases: list[str] = field(default_factory=list)    # checked against the document (phrase_in)
    words: list[str] = field(default_factory=list)      # every word looked for, for the ranking
    terms: list[tuple] = field(default_factory=list)    # (column or None, words) of each word term, ANDed

    def in_title(self) -> str:
        """An FTS5 match of the documents whose title holds one of the words."""
        return "title : (" + " OR ".join(_quoted(w) for w in self.words) + ")"

    def fts(self) -> str:
        return " AND ".join(self.match)


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


# The SQL of the terms that ask about links, on the SQLite index's tables
# (webfs.index: URLs numbered in ``urls``, a file's URL hashed as asked);
# webfs.pgindex has its own.
SQLITE_TERMS = {
    "inlinks": "(SELECT count(*) FROM links l JOIN urls u ON u.id = l.url WHERE "
               "u.hash = url_hash(coalesce(f.key, f.url, '')))",   # no URL: no link
    "links-to": "f.doc IN (SELECT l.doc FROM links l JOIN urls u ON u.id = l.url WHERE u.hash = ?)",
}


def compile_query(text: str, checking: bool = False, terms: dict = SQLITE_TERMS) -> Compiled:
    """A query's FTS5 match and SQL conditions on ``files f`` (its phrases apart:
    ``Compiled.phrases``); BadQuery if it has none. ``checking``: only to see
    that it parses (its parameters are not all ready to run); ``terms``: the
    SQL of the link terms, by engine."""
    out = Compiled()
    text = text.replace("\0", " ")           # FTS5 reads a NUL as the end of its query
    for m in _TERM.finditer(text):
        if not m.group(0):
            continue
        name, value = m.group("field"), m.group("phrase") if m.group("phrase") is not None else m.group("word")
        if name and name not in FIELDS:
            value, name = m.group(0), None          # "foo:bar" is words
        inlinks = _INLINKS.fullmatch(m.group(0))
        if inlinks:
            out.where.append(f"{terms['inlinks']} {inlinks.group(1)} ?")
            out.params.append(int(inlinks.group(2)))
        elif name is None or name == "title":
            _words(out, name, value)
        else:
            _field(out, name, value, m.group(0), checking, terms)
    if not out.match and not out.where:
        raise BadQuery(f"query {text!r} has no term to look for (see QUERIES in webfs(1))")
    return out


def tokens(text: str) -> list[str]:
    """Words as the index's tokenizer makes them: diacritics folded, lowercase."""
    return _TOKEN.findall(_NON_ASCII.sub(_folded, text).lower())


def _folded(run: re.Match) -> str:
    """A run of non-ASCII characters decomposed, without its combining marks (the
    same as folding the whole text: NFKD decomposes each character alone, and
    the marks, the one thing it reorders, go; ASCII is left as it is)."""
    return "".join(c for c in unicodedata.normalize("NFKD", run.group()) if not unicodedata.combining(c))


def _words(out: Compiled, name, value: str) -> None:
    """Words or a phrase, in the title (``title:``) or anywhere."""
    words = tokens(value)
    if not words:
        return
    out.words += words
    out.terms.append((name, words))
    column = "title : " if name else ""
    if len(words) == 1:
        out.match.append(column + _quoted(value))
        return
    out.match.append(column + "(" + " AND ".join(_quoted(w) for w in words) + ")")
    out.phrases.append(json.dumps([name, words]))


def phrase_check(texts):
    """A phrase check for webfs.index from ``texts``: a document's id -> its
    (title, text), None if it cannot be read (then its phrases do not match)."""
    def holds(doc: int, spec: str) -> bool:
        got = texts(doc)
        return got is not None and phrase_in(json.loads(spec), *got)
    return holds


def phrase_in(spec: list, title: str, body: str) -> bool:
    """Whether a phrase (``[column or None, words]``, from _words) is in a document's text."""
    column, words = spec
    return any(_in_order(words, tokens(text)) for text in ([title] if column else [title, body]))


def _in_order(words: list[str], found: list[str]) -> bool:
    n = len(words)
    return any(found[i:i + n] == words for i, w in enumerate(found) if w == words[0])


def _link_hash(url: str) -> int:
    # Imported here: the URL code and sqlite3 load when a query is run, not when
    # the command line checks one (webfs-internals(7), COMMAND START-UP).
    from .extract import link_key
    from .index import url_hash
    return url_hash(link_key(url if "://" in url else "http://" + url))


def _field(out: Compiled, name: str, value: str, term: str, checking: bool, terms: dict) -> None:
    if not value:
        raise BadQuery(f"{term}: says nothing to look for")
    if name == "url":
        prefixes = [value] if "://" in value else ["http://" + value, "https://" + value]
        out.where.append("(" + " OR ".join("substr(f.url, 1, ?) = ?" for _ in prefixes) + ")")
        for p in prefixes:
            out.params += [len(p), p]
    elif name == "host":
        host = value.lower().rstrip(".")
        out.where.append("(f.host = ? OR f.host LIKE ? ESCAPE '\\')")
        out.params += [host, "%." + host.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")]
    elif name == "links-to":
        out.where.append(terms["links-to"])
        out.params.append(value if checking else _link_hash(value))
    elif name == "mime":
        mime = value.lower().rstrip("/*")
        out.where.append("(f.mime = ? OR substr(f.mime, 1, ?) = ?)")
        out.params += [mime, len(mime) + 1, mime + "/"]
    elif name == "date":
        out.where.append("f.date BETWEEN ? AND ?")
        out.params += list(date_range(value))
    elif name == "collection":
        out.where.append("f.collection = ?")
        out.params.append(value)


def date_range(value: str) -> tuple[str, str]:
    """date:2014..2015 -> ('20140000000000', '20159999999999'), inclusive;
    one date stands for its whole year, month, day..."""
    m = _DATE.fullmatch(value)
    if not m or not (m.group(1) or m.group(3)) or (m.group(1) and m.group(3) and not m.group(2)):
        raise BadQuery(f"date:{value}: not a date or range (2014, 201403, 2014..2015, ..2015, 2014..)")
    lo, hi = m.group(1), m.group(3) if m.group(2) else m.group(1)
    return (lo or "").ljust(14, "0"), (hi or "9").ljust(14, "9")


def _sqlite_where(q: Compiled) -> tuple[str, list]:
    """The conditions on ``files f`` and their parameters, the phrases last
    (each reads a document: webfs.index's ``phrase_holds``)."""
    where = ["f.collection != ''"] + q.where + ["phrase_holds(f.doc, ?)"] * len(q.phrases)
    return " AND ".join(where), q.params + q.phrases


def run(index, text: str, limit: int, offset: int = 0) -> list[tuple]:
    """(inode, url, date, mime, size) of the answers, best first, from an
    index of either engine (webfs.index's, webfs.pgindex's)."""
    if index.engine != "sqlite":
        return index.run(text, limit, offset)
    q = compile_query(text)
    where, params = _sqlite_where(q)
    cols = "f.ino, f.url, f.date, f.mime, f.size"
    if q.match:
        sql = (f"SELECT {cols} FROM docs_text JOIN files f ON f.doc = docs_text.rowid "
               f"WHERE docs_text MATCH ? AND {where} "
               "ORDER BY docs_text.rowid IN (SELECT rowid FROM docs_text WHERE docs_text MATCH ?) DESC, "
               "f.date DESC, f.ino LIMIT ? OFFSET ?")
        params = [q.fts()] + params + [q.in_title()]
    else:
        sql = f"SELECT {cols} FROM files f WHERE {where} ORDER BY f.date DESC, f.ino LIMIT ? OFFSET ?"
    return index.db.execute(sql, params + [limit, offset]).fetchall()


def count(index, text: str) -> int:
    if index.engine != "sqlite":
        return index.count(text)
    q = compile_query(text)
    where, params = _sqlite_where(q)
    if q.match:
        sql = f"SELECT count(*) FROM docs_text JOIN files f ON f.doc = docs_text.rowid WHERE docs_text MATCH ? AND {where}"
        return index.db.execute(sql, [q.fts()] + params).fetchone()[0]
    return index.db.execute(f"SELECT count(*) FROM files f WHERE {where}", params).fetchone()[0]


def matching(index, text: str) -> set[int]:
    """The inodes of every file that answers a query, unranked."""
    if index.engine != "sqlite":
        return index.matching(text)
    q = compile_query(text)
    where, params = _sqlite_where(q)
    if q.match:
        sql = f"SELECT f.ino FROM docs_text JOIN files f ON f.doc = docs_text.rowid WHERE docs_text MATCH ? AND {where}"
        return {r[0] for r in index.db.execute(sql, [q.fts()] + params)}
    return {r[0] for r in index.db.execute(f"SELECT f.ino FROM files f WHERE {where}", params)}
