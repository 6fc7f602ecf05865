"""The search a mount's daemon runs refuses a query that does not parse
before it looks anything up, even where no index is made yet: so
webfs.quicksearch, which leaves checking the query to the daemon, hears an
error and leaves the command line to click, which says it as a usage error."""
from __future__ import annotations

import pytest

from conftest import make_archive
from webfs import searching
from webfs.admin import Progress
from webfs.assembly import open_archive
from webfs.query import BadQuery


def test_a_bad_query_is_refused_before_there_is_an_index(tmp_path):
    disk = make_archive(tmp_path / "a", 2)[0]
    store = open_archive(str(disk))
    try:
        with pytest.raises(BadQuery, match="date:nonsense"):
            searching.search(store, Progress(), "date:nonsense")
        assert not list((disk / "meta").glob("index.db*"))
        assert searching.search(store, Progress(), "zebra").lines == []
        assert list((disk / "meta").glob("index.db*"))          # a good query's pass made it
    finally:
        store.close()
