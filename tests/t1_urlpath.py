"""The URL <-> path mapping (webfs.urlpath): valid names, no collisions, exact round trips."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import examples
from webfs import urlpath as up

NAME_MAX = 255
SE = "surrogateescape"


# ---------------------------------------------------------------- strategies

# Characters that matter to the mapping, weighted towards trouble.
HOSTILE = st.sampled_from([
    "/", "/", "/", "?", "#", ".", ".", "%", "@", "^", "+", ":", "[", "]", "~", "&", "=",
    "a", "A", "b", "0", "F", "2", " ", "\x00", "\t", "\n", "\x7f", "\x85", "\xa0", "\xad",
    "é", "e\u0301", "ß", "日本", "\u200b", "\u202e", "\ufeff", "\U0001f600", "\\", "*",
    "%2F", "%2f", "%00", "%FF", "%C3%A9", "..", "//", "^+", "^2E", "@2024", "xn--",
])
hostile_text = st.lists(HOSTILE, max_size=30).map("".join)
schemes = st.sampled_from(["http", "https", "HTTP", "ftp", "dns", "urn", "mailto", "data",
                           "file", "x-wpull", "a+b.c-d", ""])
seps = st.sampled_from(["://", ":", ":/", ":///", "//", ""])
long_segment = st.builds(lambda ch, n: ch * n, st.sampled_from(["a", "é", "^", "\u200b", "日", "."]),
                         st.integers(150, 700))


@st.composite
def composed_urls(draw) -> str:
    """scheme sep authority /segments ?query #fragment, each part hostile."""
    parts = [draw(schemes), draw(seps), draw(hostile_text)]
    for _ in range(draw(st.integers(0, 4))):
        parts.append("/")
        parts.append(draw(st.one_of(hostile_text, long_segment, st.sampled_from(["", ".", ".."]))))
    if draw(st.booleans()):
        parts.append("?" + draw(hostile_text))
    if draw(st.booleans()):
        parts.append("#" + draw(hostile_text))
    return "".join(parts)


def from_bytes(b: bytes) -> str:
    return b.decode("utf-8", SE)


urls = st.one_of(
    composed_urls(),
    hostile_text,
    st.text(),                                                   # any Unicode, no surrogates
    st.binary(max_size=80).map(from_bytes),                      # any bytes, as WARC headers hold them
    st.builds(lambda s, b: s + from_bytes(b), schemes.map(lambda s: s + "://"), st.binary(max_size=60)),
    st.binary(max_size=40).map(lambda b: "http://h/" + "".join(f"%{x:02X}" for x in b)),
)


# ---------------------------------------------------------------- helpers

def assert_valid_names(path: str) -> None:
    assert not path.startswith("/") and not path.endswith("/")
    for name in path.split("/"):
        raw = os.fsencode(name)          # must be text a filesystem can hold
        assert raw.decode("utf-8") == name
        assert name not in ("", ".", ".."), path
        assert b"\0" not in raw and b"/" not in raw
        assert len(raw) <= NAME_MAX, (len(raw), name)


def dirs_of(path: str) -> set[str]:
    names = path.split("/")
    return {"/".join(names[:i]) for i in range(1, len(names))}


# ---------------------------------------------------------------- properties

@settings(max_examples=examples(400))
@given(urls, st.integers(1, 99999))
def test_names_are_valid_and_the_round_trip_is_exact(url, n):
    stem = up.url_to_path(url)
    assert_valid_names(stem)
    assert stem.endswith("@") and "@" not in "".join(stem.split("/")[:-1])
    assert up.path_to_url(stem) == url
    cap = up.capture_path(url, "2024-02-29T23:59:59.123456789Z", n)
    assert_valid_names(cap)
    assert up.split_capture_path(cap) == (url, up.stamp("2024-02-29T23:59:59.123456789Z", n))


@settings(max_examples=examples(300))
@given(st.binary(max_size=120))
def test_bytes_come_back_exactly(raw):
    url = "http://example.com/" + from_bytes(raw)
    path = up.url_to_path(url.encode("utf-8", SE))
    assert path == up.url_to_path(url)
    assert up.path_to_url(path).encode("utf-8", SE) == b"http://example.com/" + raw


@settings(max_examples=examples(200))
@given(st.lists(urls, min_size=2, max_size=25, unique=True))
def test_no_two_urls_share_a_path_and_no_file_is_a_directory(batch):
    stems = [up.url_to_path(u) for u in batch]
    assert len(set(stems)) == len(batch)
    captures = {up.capture_path(u, "20240101120000", k) for u in batch for k in (1, 2)}
    files = set(stems) | captures
    assert len(captures) == 2 * len(batch)
    directories = set().union(*(dirs_of(p) for p in files))
    assert not files & directories
    # and a stem is no prefix of another URL's capture (stem + stamp is unambiguous)
    for u, s in zip(batch, stems):
        for c in captures:
            if c.startswith(s):
                assert up.path_to_url(c) == u


# The names paths are built from, weighted towards those that look almost right.
path_names = st.lists(st.sampled_from([
    "http", "dns:", ":", "a", "A", "^", "^+", "a^+", "^2E", "^2E.", ".", "^2e", "^40", "^5E",
    "^61", "^C3^A9", "é", "^FF", "^E2^80^8B", "%2F", "x" * 200 + "^+", "x" * 201, "",
]), min_size=1, max_size=5)
stamps = st.sampled_from(["", "20240101120000", "20240101120000.5", "20240101120000~2",
                          "20240101120000~1", "2024", "x", "@"])


@settings(max_examples=examples(500))
@given(path_names, st.sampled_from(["", "a", "^", "^2E", "^40", "é", "^FF"]), stamps)
def test_every_accepted_path_names_exactly_one_url(names, leaf, stamp):
    path = "/".join(names + [leaf + "@" + stamp])
    try:
        url, got = up.split_capture_path(path)
    except ValueError:
        return
    assert got == stamp
    assert up.url_to_path(url) + stamp == path


# ---------------------------------------------------------------- readable examples

READABLE = [
    ("http://example.com/", "http/example.com/@"),
    ("http://example.com", "http/example.com@"),
    ("http://example.com/index.html", "http/example.com/index.html@"),
    ("http://example.com/a/b.html", "http/example.com/a/b.html@"),
    ("http://example.com/a/", "http/example.com/a/@"),
    ("http://example.com/a", "http/example.com/a@"),
    ("http://example.com/search?q=1", "http/example.com/search?q=1@"),
    ("http://example.com/?q=1&r=2", "http/example.com/?q=1&r=2@"),
    ("http://example.com?q=1", "http/example.com?q=1@"),
    ("https://www.iana.org/domains/reserved", "https/www.iana.org/domains/reserved@"),
    ("http://example.com:8080/x", "http/example.com:8080/x@"),
    ("http://[2001:db8::1]:8080/x", "http/[2001:db8::1]:8080/x@"),
    ("http://bücher.de/straße", "http/bücher.de/straße@"),
    ("http://xn--bcher-kva.de/", "http/xn--bcher-kva.de/@"),
    ("http://example.com/a%20b/%2F", "http/example.com/a%20b/%2F@"),
    ("http://example.com/page#top", "http/example.com/page#top@"),
    ("http://example.com/a?next=/b/c", "http/example.com/a?next=^2Fb^2Fc@"),
    ("http://user:pw@example.com/", "http/user:pw^40example.com/@"),
    ("https://mastodon.social/@user", "https/mastodon.social/^40user@"),
    ("http://example.com/a/../b/./c", "http/example.com/a/^2E./b/^2E/c@"),
    ("http://example.com//a", "http/example.com/^/a@"),
    ("http://example.com/a b", "http/example.com/a^20b@"),
    ("http://example.com/x^y", "http/example.com/x^5Ey@"),
    ("file:///etc/hosts", "file/^/etc/hosts@"),
    ("dns:www.example.com", "dns:/www.example.com@"),
    ("urn:uuid:6f0a7d2e-3b1c-4b5e-9a1d-2c3b4d5e6f70", "urn:/uuid:6f0a7d2e-3b1c-4b5e-9a1d-2c3b4d5e6f70@"),
    ("mailto:info@example.com", "mailto:/info^40example.com@"),
    ("data:text/plain;base64,SGk=", "data:/text/plain;base64,SGk=@"),
    ("ftp://ftp.example.com/pub/README", "ftp/ftp.example.com/pub/README@"),
    ("http:example.com", "http:/example.com@"),
    ("http:/example.com", "http:/^/example.com@"),
    ("example.com/a", ":/example.com/a@"),
    ("", ":/@"),
]


@pytest.mark.parametrize("url,path", READABLE)
def test_readable_examples(url, path):
    assert up.url_to_path(url) == path
    assert up.path_to_url(path) == url


# ---------------------------------------------------------------- each case the issue lists

def distinct(*batch: str) -> list[str]:
    paths = [up.url_to_path(u) for u in batch]
    assert len(set(paths)) == len(batch), paths
    for u, p in zip(batch, paths):
        assert up.path_to_url(p) == u
    return paths


def test_a_file_and_a_directory_of_the_same_name():
    a, ab = distinct("http://h/a", "http://h/a/b")
    assert a == "http/h/a@" and ab == "http/h/a/b@"      # the file a@..., the directory a/


def test_a_directory_url_and_its_index():
    assert distinct("http://h/a/", "http://h/a/index.html", "http://h/a") == \
        ["http/h/a/@", "http/h/a/index.html@", "http/h/a@"]


def test_query_strings():
    distinct("http://h/a", "http://h/a?", "http://h/a?q=1", "http://h/a?q=2", "http://h/a/?q=1",
             "http://h/a?q=1/b", "http://h/a?q=1^2Fb", "http://h?q", "http://h/?q", "http://h/a#?q")


def test_percent_2f_is_not_a_slash():
    p = distinct("http://h/a/b", "http://h/a%2Fb", "http://h/a%2fb", "http://h/a^2Fb")
    assert p[1] == "http/h/a%2Fb@"


def test_case_ports_idn_and_ipv6_stay_as_written():
    distinct("http://example.com/A", "http://example.com/a", "http://EXAMPLE.com/a",
             "HTTP://example.com/a", "http://example.com:80/a", "http://example.com:/a",
             "http://bücher.de/", "http://xn--bcher-kva.de/", "http://BÜCHER.de/",
             "http://[::1]/", "http://[0:0:0:0:0:0:0:1]/", "http://[::1]:80/")


def test_unicode_normal_forms_stay_distinct():
    nfc, nfd = "http://h/caf\u00e9", "http://h/cafe\u0301"
    p = distinct(nfc, nfd)
    assert p == ["http/h/caf\u00e9@", "http/h/cafe\u0301@"]   # look alike, are not alike


def test_names_over_255_bytes_are_split_not_truncated():
    long = "http://h/" + "é" * 3000 + "/x?" + "q" * 5000
    p = up.url_to_path(long)
    assert_valid_names(p)
    names = p.split("/")
    assert all(n.endswith("^+") for n in names[2:16] if len(n) > 150)
    assert up.path_to_url(p) == long
    a, b = "http://h/" + "a" * 300, "http://h/" + "a" * 301
    pa, pb = distinct(a, b)
    assert pa == "http/h/" + "a" * 200 + "^+/" + "a" * 100 + "@"
    assert len(up.capture_path(b, "2024-01-01T00:00:00.123456789Z", 99999).split("/")[-1]) <= 255


def test_escapes_are_never_cut():
    url = "http://h/" + "a" * 199 + "\u200b" + "é" * 50
    p = up.url_to_path(url)
    assert p.split("/")[2] == "a" * 199 + "^+"             # ^E2^80^8B does not fit after 199 bytes
    assert up.path_to_url(p) == url


def test_dot_segments():
    assert distinct("http://h/.", "http://h/..", "http://h/./", "http://h/../a", "http://h/a/..",
                    "http://h/...", "http://h/%2E", "http://h/.a") == \
        ["http/h/^2E@", "http/h/^2E.@", "http/h/^2E/@", "http/h/^2E./a@", "http/h/a/^2E.@",
         "http/h/...@", "http/h/%2E@", "http/h/.a@"]
    last = up.url_to_path("http://h/" + "a" * 200 + "../x")
    assert "/^2E./" in last                                 # a split never leaves a '..' name
    assert up.path_to_url(last) == "http://h/" + "a" * 200 + "../x"


def test_non_http_schemes():
    p = distinct("dns:example.com", "dns://example.com", "urn:example.com", "mailto:a@b",
                 "data:,hello", "data:text/html;base64,PGI+", "ftp://h/", "ftp:h/",
                 "x-wpull:/a", "urn:", "about:blank", "blank")
    assert p[0] == "dns:/example.com@" and p[1] == "dns/example.com@"


def test_empty_path_empty_host_and_empty_segments():
    assert distinct("http://h", "http://h/", "http://h//", "http://", "http:///", "http:", "",
                    "http://h/a//b") == \
        ["http/h@", "http/h/@", "http/h/^/@", "http/@", "http/^/@", "http:/@", ":/@",
         "http/h/a/^/b@"]


def test_fragments_and_userinfo():
    distinct("http://h/a", "http://h/a#", "http://h/a#f", "http://h/a#f/g", "http://h#f",
             "http://u@h/a", "http://u:p@h/a", "http://u%40x@h/a", "http://@h/a")


def test_bytes_that_are_not_utf8_and_nul():
    raw = b"http://h/\xff\xfe\xc3(\x00%00"
    p = up.url_to_path(raw)
    assert p == "http/h/^FF^FE^C3(^00%00@"
    assert up.path_to_url(p).encode("utf-8", SE) == raw
    distinct("http://h/%FF", "http://h/\udcff", "http://h/\xff", "http://h/\x00", "http://h/%00")


def test_text_that_no_bytes_decode_to_is_refused():
    for url in ("http://h/\ud800", "http://h/\udcc3\udca9", "http://h/\udc41"):
        with pytest.raises(ValueError):
            up.url_to_path(url)


def test_invisible_and_control_characters_are_escaped():
    p = up.url_to_path("http://h/a\u202eb\u200bc\td\ne\x85f\ufeff")
    assert p == "http/h/a^E2^80^AEb^E2^80^8Bc^09d^0Ae^C2^85f^EF^BB^BF@"
    assert up.url_to_path("http://h/日本語/😀") == "http/h/日本語/😀@"


@pytest.mark.parametrize("path", [
    "http/h/a", "http/h/a@x", "http/h/^61@", "http/h/^2e@", "http/h/.@", "http/h/..@", "http/h//a@",
    "http/h/^C3^A9@", "http/h/a^+@", "http/h/a^+/^+b@", "http/h/a^+/b@", "http/h@b/c@", "http/h/^@",
    "/http/h/@", "http/h/@/", "HTTP:x/a@", "1http/h@", "http/h/a?x/b@", ":/http:/x@", "http/h/^G0@",
    "http/h/^@", "http/h/" + "a" * 100 + "^+/b@", "http/h/@20240101120000~1", "http/h/@2024",
])
def test_paths_the_mapping_does_not_make_are_refused(path):
    with pytest.raises(ValueError):
        up.path_to_url(path)


# ---------------------------------------------------------------- several captures of one URL

def test_captures_sit_beside_each_other_in_date_order():
    url = "http://example.com/a/b.html"
    names = [up.capture_path(url, d, n).split("/")[-1] for d, n in [
        ("2024-01-01T12:00:00Z", 1), ("2024-01-01T12:00:00Z", 2), ("2024-01-01T12:00:00Z", 3),
        ("2024-01-01T12:00:00.5Z", 1), ("20240101120001", 1), ("2023-12-31T23:59:59Z", 1)]]
    assert names == ["b.html@20240101120000", "b.html@20240101120000~2", "b.html@20240101120000~3",
                     "b.html@20240101120000.5", "b.html@20240101120001", "b.html@20231231235959"]
    assert len(set(names)) == len(names)
    assert sorted(names)[0] == "b.html@20231231235959" and sorted(names)[-1] == "b.html@20240101120001"


@pytest.mark.parametrize("date", ["2024-01-01 12:00:00", "2024-01-01T12:00:00", "yesterday",
                                  "202401011200", "2024-01-01T12:00:00.1234567890Z"])
def test_stamps_need_a_warc_or_arc_date(date):
    with pytest.raises(ValueError):
        up.stamp(date)


def test_stamp_counts_from_one():
    assert up.stamp("20240101120000", 1) == "20240101120000"
    with pytest.raises(ValueError):
        up.stamp("20240101120000", 0)


# ---------------------------------------------------------------- the man page says the same

MAN5 = Path(__file__).resolve().parent.parent / "man" / "webfs-format.5"


def _deroff(line: str) -> str:
    return (line.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "")
            .replace("\\[u00FC]", "\u00fc"))


def _man_block(begin: str, end: str) -> list[str]:
    text = MAN5.read_text()
    block = text[text.index(begin):]
    block = block[:block.index(end, len(begin))]
    return [_deroff(line) for line in block.splitlines()[1:] if not line.startswith(".")]


def test_the_examples_in_webfs_format_5_are_what_the_code_does():
    rows = [re.split(r" {2,}", line) for line in _man_block(".SS Examples", ".PP") if "..." not in line]
    assert len(rows) > 15
    for url, path in rows:
        assert up.url_to_path(url) == path, url


def _url_of_script() -> str:
    return "\n".join(_man_block('.\\" url_of begin', '.\\" url_of end'))


def url_of(paths: list[str]) -> list[bytes]:
    """Run the man page's sh + awk url_of on each path (dash, the system awk)."""
    script = _url_of_script() + '\nfor p in "$@"; do url_of "$p"; printf "\\036"; done\n'
    out = subprocess.run(["dash", "-c", script, "url_of"] + paths, capture_output=True,
                         check=True, env={"PATH": "/usr/bin:/bin"}).stdout
    return [chunk[:-1] for chunk in out.split(b"\x1e")[:-1]]     # each ends in awk's newline


def test_the_sh_awk_inverse_in_the_man_page_reads_the_examples():
    paths = [p + "20240101120000~2" for _, p in READABLE]
    assert url_of(paths) == [u.encode() for u, _ in READABLE]


@settings(max_examples=60, deadline=None)
@given(st.lists(urls.filter(lambda u: "\x1e" not in u), min_size=1, max_size=20))
def test_the_sh_awk_inverse_in_the_man_page_is_exact(batch):
    paths = [up.capture_path(u, "20240101120000", 3) for u in batch]
    assert url_of(paths) == [u.encode("utf-8", SE) for u in batch]


def test_the_escaped_characters_in_webfs_format_5_are_the_code_s():
    text = " ".join(_man_block(".SS Names", "Nothing else"))
    listed = set()
    for a, b in re.findall(r"U\+([0-9A-F]{4})(?: to U\+([0-9A-F]{4}))?", text):
        listed |= set(range(int(a, 16), int(b or a, 16) + 1))
    escaped = {c for c in range(0x80, 0x10000)
               if not 0xD800 <= c <= 0xDFFF and up._ESCAPE_RE.match(chr(c))}
    assert listed == escaped
    assert "0x00 to 0x20" in text and "0x7F" in text
    assert {c for c in range(0x80) if up._ESCAPE_RE.match(chr(c))} == \
        set(range(0x21)) | {0x7F, ord("^"), ord("@"), ord("/")}
