"""webfs.versions's dates (``webfs url --at``) and URL keys, without an archive."""
from __future__ import annotations

import calendar

import pytest

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
