"""What the search a mount's daemon runs costs, and what it says first: it
refuses a query that does not parse before it looks anything up, even where
no index is made yet (so webfs.quicksearch, which leaves checking the query
to the daemon, hears an error and leaves the command line to click, which
says it as a usage error); and in the archive's writer, a search after a
search with nothing written between them makes no index pass."""
from __future__ import annotations

import pytest

from conftest import make_archive, webfs_here
from t2_query import crawl
from webfs import index, indexer, searching
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


def test_a_search_after_a_search_makes_no_pass_until_something_changes(tmp_path, monkeypatch):
    disk = make_archive(tmp_path / "a", 2)[0]
    webfs_here("import", crawl(tmp_path / "src", "crawl-2014", "20140301000000", {}), f"{disk}:/")
    passes, make_pass = [], indexer._pass
    monkeypatch.setattr(indexer, "_pass", lambda store, progress: passes.append(1) or make_pass(store, progress))
    store = open_archive(str(disk))
    try:
        for output in ("paths", "count", "json", "paths"):     # each opens the index read-only after its pass
            assert searching.search(store, Progress(), "zebra", output=output).lines
        assert len(passes) == 1
        other = index.Index(indexer.location(store))           # another process's pass, its WAL not yet checkpointed
        other.set_meta("seen", "1")
        other.commit()
        searching.search(store, Progress(), "zebra")
        assert len(passes) == 2
        other.close()
    finally:
        store.close()
