"""Pieces of query access without an archive: what a document gives the index
(webfs.extract) and what a query means (webfs.query), on an index in memory."""
from __future__ import annotations

import pytest

from webfs import query
from webfs.extract import extract, link_key
from webfs.index import Index

PAGE = (b"<!doctype html><html><head><title>Stanford &amp; the Web</title>"
        b"<script>var hiddenword = 'scriptword';</script><style>.stylerule{}</style>"
        b"<base href='http://example.com/base/'></head><body><p>Caf&eacute; &lt;b&gt; na\xc3\xafve</p>"
        b"<a href='page.html#top'>a</a><a href='HTTP://WWW-DB.Stanford.EDU'>db</a>"
        b"<a href='mailto:x@y'>m</a><a href='javascript:go()'>j</a><a href='/abs'>b</a></body></html>")


def test_html_text_title_and_links():
    got = extract(PAGE, "text/html", "http://example.com/dir/index.html")
    assert got.kind == "html" and got.title == "Stanford & the Web"
    assert "Café <b> naïve" in " ".join(got.text.split())
    assert "scriptword" not in got.text and "stylerule" not in got.text
    assert got.links == ["http://example.com/base/page.html", "http://www-db.stanford.edu/",
                         "http://example.com/abs"]


def test_non_utf8_text_and_html_charsets():
    assert extract(b"caf\xe9 cr\xe8me", "text/plain").text == "café crème"
    assert extract(b"caf\xe9", "text/plain; charset=iso-8859-1").text == "café"
    html = b"<html><head><meta charset='windows-1252'><title>r\xe9sum\xe9</title></head><body>x</body></html>"
    assert extract(html, "text/html").title == "résumé"
    assert extract(b"\x89PNG\r\n\x1a\n\0\0", "image/png").kind == "other"
    assert extract(b"<html><body>sniffed</body></html>", "").kind == "html"


def test_link_keys():
    assert link_key("HTTP://Example.COM") == "http://example.com/"
    assert link_key("http://example.com:80/a?b#c") == "http://example.com/a?b"
    assert link_key("https://example.com:8443/") == "https://example.com:8443/"


def test_links_resolved_by_the_quick_ways_as_by_urljoin():
    """extract resolves absolute, root-relative and plain relative hrefs by
    string work on the page's key; whatever the base and href, it gives what
    urljoin gives (dot segments, parameters, empty queries, tabs, empty
    segments in the base: urljoin's own way), also when remembered across pages."""
    from hypothesis import HealthCheck, given, settings, strategies as st
    from webfs.extract import _Resolver
    part = st.lists(st.sampled_from(list("ab.%?#/:;=&@+ \t~-_") + ["..", "./", "é", "%2e"]),
                    max_size=8).map("".join)
    base = st.builds("{}://{}{}/{}{}".format, st.sampled_from(["http", "HTTP", "https"]),
                     st.sampled_from(["h.example", "H.Example.", "[::1]", "x"]), st.sampled_from(["", ":80", ":8080"]),
                     part, st.sampled_from(["", "?q=1", "?a/b"]))

    @settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
    @given(base, st.one_of(part, part.map("/".__add__), st.builds(str.__add__, base, part)))
    def check(page, href):
        href = href.strip()
        if href and not href.startswith(("#", "javascript:", "mailto:", "data:")):
            resolver = _Resolver(page)
            assert resolver(href) == resolver.by_urljoin(href.split("#", 1)[0].rstrip())
            # As a page's links are resolved: what the quick ways gave another page of this
            # origin and folder is remembered (the examples before this one filled the memo).
            assert resolver.link(href) == resolver(href)
    check()


TEXTS = {}


def filled(ix):
    """An index of either engine with three documents and four files of known answers."""
    ix.phrases = query.phrase_check(TEXTS.get)
    for i, (title, text) in enumerate((("Stanford group", "zebra quagga"), ("Other", "zebra stanford"),
                                       ("", "plain words only")), 1):
        TEXTS[i] = (title, text)
    docs = [ix.add_doc("s1", "html", "Stanford group", "zebra quagga", ["http://www-db.stanford.edu/"]),
            ix.add_doc("s2", "html", "Other", "zebra stanford", ["http://a.example.org/"]),
            ix.add_doc("s3", "text", "", "plain words only", [])]
    rows = [(1, docs[0], "c2014", "http://www.example.org/a", "www.example.org", "20140301000000", "text/html"),
            (2, docs[1], "c2015", "http://a.example.org/", "a.example.org", "20151231235959", "text/html"),
            (3, docs[2], "c2015", "http://b.net/t.txt", "b.net", "20150601000000", "text/plain"),
            (4, docs[0], "c2016", "http://www.example.org/a", "www.example.org", "20160101000000", "text/html")]
    for ino, doc, coll, url, host, date, mime in rows:
        ix.put_file(ino, 1, doc, {"collection": coll, "url": url, "key": link_key(url), "host": host,
                                  "date": date, "mime": mime, "size": 10})
    ix.put_file(5, 1, None, {"collection": "c2016", "url": None, "host": None, "date": "20160101000000",
                             "mime": "", "size": 0})       # a file of no URL (copied in, not a capture)
    ix.commit()
    return ix


@pytest.fixture(params=["held to the commit", "written at once"])
def index(tmp_path, request, monkeypatch):
    """The SQLite index filled; its words and links held until the commit (as
    a pass writes them), or written as each document is added (as when more
    text than PENDING_CHARS waits): the same answers."""
    if request.param == "written at once":
        monkeypatch.setattr("webfs.index.PENDING_CHARS", 0)
    ix = filled(Index(str(tmp_path)))
    yield ix
    ix.close()


def found(ix, text, limit=100, offset=0):
    return [r[0] for r in query.run(ix, text, limit, offset)]


def test_each_kind_of_term(index):
    assert found(index, "quagga") == [4, 1]                 # one document, two crawls: both
    assert sorted(found(index, "zebra")) == [1, 2, 4]
    assert found(index, "stanford")[:2] in ([4, 1], [1, 4])  # a title match ranks first
    assert found(index, "title:stanford") == [4, 1]
    assert found(index, '"zebra quagga"') == [4, 1] and found(index, '"quagga zebra"') == []
    assert found(index, 'title:"stanford group"') == [4, 1] and found(index, 'title:"group stanford"') == []
    assert found(index, '"stanford group zebra"') == []       # a phrase does not run from the title into the text
    assert query.count(index, '"quagga zebra"') == 0 and query.count(index, '"zebra quagga"') == 2
    assert sorted(found(index, "host:example.org")) == [1, 2, 4]
    assert found(index, "host:a.example.org") == [2]
    assert found(index, "url:www.example.org/") == [4, 1]
    assert found(index, "links-to:http://www-db.stanford.edu") == [4, 1]
    assert found(index, "inlinks>0") == [2] and found(index, "inlinks=0 mime:text") == [4, 3, 1]
    assert found(index, "inlinks=0 collection:c2016") == [4, 5]          # a file of no URL has none
    assert found(index, "mime:text/plain") == [3] and found(index, "mime:text") == [4, 2, 3, 1]
    assert found(index, "date:2015") == [2, 3] and found(index, "date:2014..2015") == [2, 3, 1]
    assert found(index, "date:..2014") == [1] and found(index, "date:2016..") == [4, 5]
    assert found(index, "collection:c2015 zebra") == [2]
    assert found(index, "zebra", limit=1, offset=1) != found(index, "zebra", limit=1)
    assert query.count(index, "zebra") == 3


def test_a_dropped_documents_number_is_not_given_again(tmp_path):
    """A contentless FTS5 table keeps a dropped document's words under its
    number: a new document given that number would be found by them."""
    ix = Index(str(tmp_path))
    facts = {"collection": "c", "size": 1}
    ix.put_file(1, 1, ix.add_doc("s1", "html", "", "zebra", []), facts)
    ix.put_file(2, 1, ix.add_doc("s2", "html", "", "secretword", ["http://a/"]), facts)
    ix.commit()
    ix.drop_files([2])
    assert ix.drop_unused_docs() == 1
    ix.commit()
    for n in (3, 4):        # twice: a second drop of nothing must not lower the mark
        ix.put_file(n, 1, ix.add_doc(f"s{n}", "html", "", "quagga", []), facts)
        ix.commit()
        assert found(ix, "secretword") == [] and sorted(found(ix, "quagga")) == list(range(3, n + 1))
        ix.drop_unused_docs()
    assert found(ix, "links-to:http://a/") == []
    ix.close()


def test_bad_queries_say_which_term():
    for bad in ("", "date:x", "date:2014..2015..2016", "host:", "!!!"):
        with pytest.raises(query.BadQuery):
            query.compile_query(bad)
    assert query.date_range("201403") == ("20140300000000", "20140399999999")


def test_any_text_is_a_query_or_a_clear_refusal(index):
    """Whatever a user types, the index answers or BadQuery says why: never an
    FTS5 syntax error or another exception."""
    from hypothesis import given, settings, strategies as st
    alphabet = st.sampled_from(list('ab "*:()-^.<>=/\\%_\'') + ["title:", "url:", "host:", "links-to:", "mime:",
                                                               "date:", "collection:", "inlinks>", "AND", "OR",
                                                               "NOT", "NEAR", "2014", "..", "é", "\0"])

    @settings(max_examples=400, deadline=None)
    @given(st.lists(alphabet, max_size=12).map("".join))
    def check(text):
        try:
            query.run(index, text, 10)
            query.count(index, text)
        except query.BadQuery:
            pass

    check()


def test_words_fold_as_the_whole_text_would():
    """query.tokens folds only the runs of non-ASCII characters (the PostgreSQL
    index cuts every page's words with it): the same words as decomposing
    the whole text and dropping its combining marks."""
    import unicodedata
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=2000)
    @given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
           | st.text(alphabet="aeiou Z-1\u0301\u0308\u00e9\u00df\u0130\ufb01\u2460\u00bd\uac00 ", max_size=40))
    def check(text):
        whole = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
        assert query.tokens(text) == query._TOKEN.findall(whole.lower())

    check()


def test_free_pages_go_back_and_a_compacted_index_answers_as_before(tmp_path):
    """A commit a document makes a segment a commit; FTS5's merges free pages,
    which free_pages_back gives back to the file system (auto_vacuum); compact
    merges the segments into one, and the words are still found."""
    ix = Index(str(tmp_path))
    for i in range(40):
        ix.add_doc(f"s{i}", "text", "", " ".join(f"w{i}x{j} common" for j in range(300)), [])
        ix.commit()
    free = lambda: ix.db.execute("PRAGMA freelist_count").fetchone()[0]       # noqa: E731
    found = lambda word: ix.db.execute("SELECT count(*) FROM docs_text WHERE docs_text MATCH ?",  # noqa: E731
                                       (word,)).fetchone()[0]
    assert free() > 0
    pages = ix.db.execute("PRAGMA page_count").fetchone()[0]
    ix.free_pages_back()
    assert free() == 0 and ix.db.execute("PRAGMA page_count").fetchone()[0] < pages
    ix.compact()
    assert free() == 0
    assert (found("common"), found("w7x299"), found("w39x0"), found("nowhere")) == (40, 1, 1, 0)
    ix.close()
