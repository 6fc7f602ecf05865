"""webfs.versions's dates (``webfs url --at``) and URL keys, without an archive."""
from __future__ import annotations

import calendar

import pytest
from hypothesis import given, strategies as st

from webfs import versions as lookup
from webfs.errors import WebfsError


def _utc(*parts) -> float:
    return float(calendar.timegm((*parts, 0, 0, 0)))


@pytest.mark.parametrize("text, want", [
    ("2014", _utc(2014, 1, 1, 0, 0, 0)),
    ("201401", _utc(2014, 1, 1, 0, 0, 0)),
    ("20140127", _utc(2014, 1, 27, 0, 0, 0)),
    ("20140127103000", _utc(2014, 1, 27, 10, 30, 0)),
    ("2014-01", _utc(2014, 1, 1, 0, 0, 0)),
    ("2014-01-27", _utc(2014, 1, 27, 0, 0, 0)),
    ("2014-01-27T10:30", _utc(2014, 1, 27, 10, 30, 0)),
    ("2014-01-27T10:30:00Z", _utc(2014, 1, 27, 10, 30, 0)),
    ("2014-01-27T00:00:00+05:00", _utc(2014, 1, 26, 19, 0, 0)),
    ("2014-01-27T00:00:00-0130", _utc(2014, 1, 27, 1, 30, 0)),
    ("2014-01-27T00:00:00.25Z", _utc(2014, 1, 27, 0, 0, 0) + 0.25),
    ("2014-01-27 00:00:00,5", _utc(2014, 1, 27, 0, 0, 0) + 0.5),
])
def test_dates_a_user_writes(text, want):
    assert lookup.when(text) == want


@pytest.mark.parametrize("text, says", [
    ("2014-13", "month must be in 1..12"), ("2014-02-30", "day is out of range"),
    ("2014-01-27T24:00", "hour must be in 0..23"), ("201413", "month must be in 1..12"),
    ("2014-01-27T00:00+24:00", "time zone"), ("yesterday", "not a date"), ("20140", "not a date"),
    ("2014-01-27T00:00:00+05:00junk", "not a date"),
])
def test_bad_dates_are_one_clear_line(text, says):
    with pytest.raises(WebfsError) as exc:
        lookup.when(text)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_stamps_keep_their_fraction():
    assert lookup.stamp_seconds("20140127000000.5~2") == _utc(2014, 1, 27, 0, 0, 0) + 0.5


def test_spellings_of_a_page_share_its_key():
    same = ["http://www.iana.org", "https://www.iana.org/", "http://IANA.org:80/", "http://iana.org/"]
    assert len({lookup.key(u) for u in same}) == 1
    assert lookup.key("http://iana.org/a") != lookup.key("http://iana.org/b")


class _Bytes:
    """A tree of one file, read as DiskTree and MountTree are: by ranges."""

    def __init__(self, data: bytes):
        self.data, self.reads = data, 0

    def size(self, path: bytes) -> int:
        return len(self.data)

    def read_at(self, path: bytes, offset: int, size: int) -> bytes:
        self.reads += 1
        return self.data[offset:offset + size]


# Few keys, so that a key has many lines (a page captured often), and any key.
_keys = st.sampled_from(["a", "a)/", "ab", "b", "b,a)/"]) | st.text(alphabet="ab,)/:", min_size=1, max_size=5)


@given(st.lists(st.tuples(_keys, st.integers(0, 3)), max_size=40), _keys, st.integers(1, 40),
       st.booleans())
def test_a_key_s_lines_are_found_by_search_as_by_a_scan(rows, want, window, last_newline):
    """The lines of a sorted CDXJ file with a key, found by the binary search
    (any window, down to a byte), are those a scan of every line finds."""
    import json
    lines = sorted(f'{k} 2024010112000{n} {json.dumps({"url": f"{k}#{n}"})}'.encode() for k, n in rows)
    data = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    scanned = {json.loads(ln.split(b" ", 2)[2])["url"] for ln in lines if ln.split(b" ", 1)[0] == want.encode()}
    assert lookup._keyed_lines(_Bytes(data), b"f.cdxj", want.encode(), window) == scanned


def test_a_search_reads_a_few_windows_of_a_large_file():
    import json
    lines = sorted(f'k{i:06d} 20240101120000 {json.dumps({"url": f"u{i}"})}'.encode() for i in range(100_000))
    tree = _Bytes(b"\n".join(lines) + b"\n")
    assert lookup._keyed_lines(tree, b"f.cdxj", b"k054321", 4096) == {"u54321"}
    assert tree.reads < 40, tree.reads        # of the file's 1,200 windows
    assert lookup._keyed_lines(_Bytes(b""), b"f.cdxj", b"k", 4096) == set()
