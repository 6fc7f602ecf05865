"""Query access on an unmounted archive, through the command as a user runs it:
webfs import / import-warc index what they made, webfs search finds it,
webfs reindex makes the index again from the archive alone."""
from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, make_archive, webfs, webfs_here
from webfs import indexengine, indexer, indexprocess
from webfs.commands.moves import move_block
from webfs.index import pass_lock
from webfs.assembly import open_archive
from t2_warc import write_warc

KNOWN = (b"<html><head><title>Stanford Database Group</title><script>var scriptonly = 1;</script></head>"
         b"<body><p>The &lt;zebra&gt; caf&eacute; page</p><a href='/people.html'>people</a>"
         b"<a href='http://www-db.stanford.edu/'>db</a></body></html>")
SAME = b"<html><head><title>Unchanged</title></head><body>perennial page, unchanged between crawls</body></html>"


def crawl(root: Path, name: str, stamp: str, extra: dict) -> Path:
    """A generated crawl: capture paths (webfs-format(5), URL PATHS) -> bytes."""
    pages = {"http/example.com/": KNOWN if name == "crawl-2014" else b"<title>Home</title> newer home",
             "http/example.com/same.html": SAME,
             "http/example.com/latin1.txt": b"cr\xe8me br\xfbl\xe9e",
             **extra}
    for rel, body in pages.items():
        p = root / name / f"{rel}@{stamp}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)
    return root / name


def search(disk, query, *opts):
    return webfs_here("search", *opts, query, disk).stdout.decode().split("\n")[:-1]


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> list[Path]:
    """Two crawls imported once (and indexed at import); each test gets a copy."""
    root = tmp_path_factory.mktemp("query")
    disks = make_archive(root / "a", 2)
    for name, stamp in (("crawl-2014", "20140301000000"), ("crawl-2015", "20150301000000")):
        webfs_here("import", crawl(root / "src", name, stamp, {}), f"{disks[0]}:/")
    return disks


@pytest.fixture
def catalog_url() -> str:
    """The catalog of an archive a test makes: SQLite's here (t4_pg_query
    runs these tests again with a PostgreSQL database)."""
    return ""


@pytest.fixture
def archive(tmp_path, imported):
    copies = [tmp_path / "a" / d.name for d in imported]
    for pristine, copy in zip(imported, copies):
        shutil.copytree(pristine, copy, symlinks=True)
    return copies[0]


def test_known_answers_after_import(archive):
    assert search(archive, "zebra") == ["/crawl-2014/http/example.com/@20140301000000"]
    assert search(archive, "café") == search(archive, "cafe") == search(archive, "zebra")
    assert search(archive, "scriptonly") == []                      # scripts are not text
    assert search(archive, "title:stanford links-to:http://www-db.stanford.edu/",
                  "--urls") == ["http://example.com/"]
    assert search(archive, "crème") == ["/crawl-2015/http/example.com/latin1.txt@20150301000000",
                                        "/crawl-2014/http/example.com/latin1.txt@20140301000000"]
    assert search(archive, "perennial") == ["/crawl-2015/http/example.com/same.html@20150301000000",
                                            "/crawl-2014/http/example.com/same.html@20140301000000"]
    assert search(archive, "perennial collection:crawl-2014") == [
        "/crawl-2014/http/example.com/same.html@20140301000000"]
    assert search(archive, "host:example.com date:2015", "--count") == ["3"]
    assert search(archive, "mime:text/plain date:..2014") == ["/crawl-2014/http/example.com/latin1.txt@20140301000000"]
    got = json.loads("\n".join(search(archive, "home", "--json")))
    assert got == [{"path": "crawl-2015/http/example.com/@20150301000000", "url": "http://example.com/",
                    "date": "20150301000000", "mime": "text/html", "size": 30}]
    page1, page2 = search(archive, "host:example.com", "--limit", "1"), search(archive, "host:example.com", "--limit", "1", "--offset", "1")
    assert len(page1) == len(page2) == 1 and page1 != page2


def test_a_page_in_many_crawls_is_indexed_once(archive):
    db = sqlite3.connect(archive / "meta" / "index.db")
    # Six files, five distinct documents: same.html and latin1.txt are stored (and indexed) once.
    assert db.execute("SELECT count(*) FROM files WHERE collection != ''").fetchone()[0] == 6
    assert db.execute("SELECT count(*) FROM docs").fetchone()[0] == 4
    db.close()


def test_warc_captures_are_indexed_with_their_urls(tmp_path, catalog_url):
    disk = make_archive(tmp_path / "a", 2, catalog_url=catalog_url)[0]
    warc = write_warc(tmp_path / "w.warc.gz", [("http://www.example.org/a", b"<title>Gnu</title>wildebeest"),
                                               ("http://other.net/", b"<a href='http://www.example.org/a'>x</a>")])
    webfs_here("import-warc", "--collection", "w", warc, f"{disk}:/")
    assert search(disk, "wildebeest host:example.org date:2024", "--urls") == ["http://www.example.org/a"]
    assert search(disk, "inlinks>0", "--urls") == ["http://www.example.org/a"]
    assert search(disk, "links-to:www.example.org/a", "--urls") == ["http://other.net/"]


def test_reindex_rebuilds_from_the_archive_alone(archive, tmp_path):
    before = search(archive, "host:example.com", "--json")
    for f in (archive / "meta").glob("index.db*"):
        f.unlink()
    out = webfs_here("reindex", archive).stdout.decode()
    assert "indexed 6 files, 4 distinct documents" in out
    assert search(archive, "host:example.com", "--json") == before
    elsewhere = tmp_path / "idx"
    webfs_here("reindex", "--index-dir", elsewhere, archive)
    assert (elsewhere / "index.db").exists() and not (archive / "meta" / "index.db").exists()
    assert search(archive, "host:example.com", "--json") == before


def test_a_block_moved_during_a_pass_is_read_where_it_went(archive):
    """A pass reads blocks by its snapshot's rows; a block moved to another
    disk since (cool, rebalance) is read by its row now, not left unindexed."""
    want = search(archive, "host:example.com", "--json")
    for f in (archive / "meta").glob("index.db*"):
        f.unlink()
    store = open_archive(str(archive), holder="test")
    try:
        index = indexengine.open_index(store, indexer.location(store))
        one_pass = indexer.Pass(store, index)           # its snapshot is taken here
        rows = list(store.catalog.blocks())
        for row in rows:
            move_block(store, row, next(d for d in store.archive.volumes if d != row.disk))
        assert all(store.catalog.block_by_id(r.id).disk != r.disk for r in rows)
        counts = one_pass.run()
        index.close()
    finally:
        store.close()
    assert counts["documents"] == 4
    assert search(archive, "host:example.com", "--json") == want


def test_a_later_import_is_found_and_a_bad_query_is_exit_2(archive, tmp_path):
    webfs_here("import", crawl(tmp_path / "src2", "crawl-2016", "20160301000000",
                          {"http/example.com/gone.html": b"ephemeral words"}), f"{archive}:/")
    assert len(search(archive, "ephemeral")) == 1
    proc = webfs_here("search", "--count", "date:x", archive, check=False)
    assert proc.returncode == 2 and b"date:x" in proc.stderr


def test_a_damaged_index_is_made_again(archive):
    want = search(archive, "perennial")
    (archive / "meta" / "index.db").write_bytes(b"not an sqlite database" * 100)
    for f in (archive / "meta").glob("index.db-*"):
        f.unlink()
    proc = webfs_here("search", "perennial", archive)
    assert proc.stdout.decode().split() == want and b"made again from the archive" in proc.stderr


def test_phrases_are_checked_against_the_pages(archive):
    # The index keeps no word positions: a phrase is read again from the page's block.
    assert search(archive, '"unchanged between crawls"', "--count") == ["2"]
    assert search(archive, '"between unchanged crawls"', "--count") == ["0"]
    assert search(archive, 'title:"database group"', "--urls") == ["http://example.com/"]
    assert search(archive, 'title:"group database"') == []
    assert search(archive, "zebra-café", "--urls") == ["http://example.com/"]    # one term, two words in order
    # A stream over a query checks its phrases as search does.
    assert len(stream(archive, "--query", '"unchanged between crawls"')[0]) == 2
    assert stream(archive, "--query", '"between unchanged crawls"')[0] == []


def test_an_index_of_another_version_is_made_again(archive):
    want = search(archive, "perennial")
    db = sqlite3.connect(archive / "meta" / "index.db")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'version'")
    db.execute("DROP TABLE urls")                   # what version 1 had is not read
    db.commit()
    db.close()
    proc = webfs_here("search", "perennial", archive)
    assert proc.stdout.decode().split() == want and b"index version 1" in proc.stderr


def test_an_import_whose_index_cannot_be_written_still_imports(archive, tmp_path):
    blocked = tmp_path / "idx"
    webfs_here("reindex", "--index-dir", blocked, archive)
    for f in blocked.iterdir():
        f.unlink()
    blocked.rmdir()
    blocked.write_bytes(b"")            # a file where the index's directory was: every pass fails
    proc = webfs_here("import", crawl(tmp_path / "src3", "crawl-2017", "20170301000000", {}), f"{archive}:/")
    assert b"'webfs reindex' rebuilds it" in proc.stderr
    blocked.unlink()
    assert search(archive, "perennial collection:crawl-2017") == [
        "/crawl-2017/http/example.com/same.html@20170301000000"]


def stream(disk, *opts):
    proc = webfs_here("stream", *opts, disk)
    return proc.stdout.decode().splitlines(), proc.stderr.decode().splitlines()


def test_stream_subsets_from_a_disk(archive, tmp_path):
    everything, tokens = stream(archive)
    assert len(everything) == 6 and len(tokens) == 6 and all(t.startswith("resume ") for t in tokens)
    assert sorted(stream(archive, "--collection", "crawl-2015")[0]) == sorted(
        p for p in everything if p.startswith("/crawl-2015/"))
    assert stream(archive, "--since", "2015", "--until", "2015")[0] == \
        [p for p in everything if p.startswith("/crawl-2015/")]
    assert stream(archive, "--query", "perennial", "--host", "example.com")[0] == \
        [p for p in everything if "same.html" in p]
    # A resume sends what comes after, with the first run's snapshot: a later import is not in it.
    webfs_here("import", crawl(tmp_path / "src3", "crawl-2016", "20160301000000", {}), f"{archive}:/")
    rest, _ = stream(archive, "--resume", tokens[2].split()[1])
    assert rest == everything[3:]
    tar = webfs_here("stream", "--tar", "--collection", "crawl-2014", archive).stdout
    import io
    import tarfile
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        assert sorted(t.getnames()) == sorted(p[1:] for p in everything if p.startswith("/crawl-2014/"))
        assert t.extractfile("crawl-2014/http/example.com/@20140301000000").read() == KNOWN


def imported_modules(proc) -> set[str]:
    """The modules a command loaded, from the -X importtime lines it wrote to stderr."""
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.decode().splitlines()
            if line.startswith("import time:") and "|" in line}


# What a search must not load: the mount's event loop and FUSE binding, S3, pywb,
# the compressors of other codecs (webfs-internals(7), COMMAND START-UP).
NOT_FOR_A_SEARCH = {"trio", "pyfuse3", "boto3", "botocore", "pywb", "zstandard", "webfs.daemon", "webfs.fs",
                    "webfs.replay"}


def test_a_search_of_a_disk_loads_no_mount_s3_or_replay_module(archive):
    proc = webfs("search", "--count", "zebra", archive, env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"))
    assert proc.stdout == b"1\n"
    loaded = imported_modules(proc)
    assert "webfs.searching" in loaded                     # the hook saw the command's own modules
    assert loaded & NOT_FOR_A_SEARCH == set()


def test_a_killed_indexing_process_is_said_and_its_pass_made_here(tmp_path, monkeypatch, caplog):
    """The indexing process (indexer.Apart) killed (kill -9) at its first file:
    the keeper says so and makes that pass itself; the next pass starts another
    process. It reads the archive while another holds the archive's lock."""
    disk = make_archive(tmp_path / "a", 2)[0]
    webfs("import", crawl(tmp_path / "src", "crawl-2014", "20140301000000", {}), f"{disk}:/",
          env=dict(os.environ, WEBFS_INDEX="0"))
    store = open_archive(str(disk), holder="test")
    keeper = indexer.Keeper(store, apart_after=0)
    try:
        monkeypatch.setenv("WEBFS_TEST_KILL_AT", "index-after-file")
        with caplog.at_level(logging.WARNING):
            counts = keeper.catch_up()
        assert "the indexing process ended (killed by signal 9); indexing in this process instead" in caplog.text
        assert counts["indexed"] == 3 and keeper.apart is None
        monkeypatch.delenv("WEBFS_TEST_KILL_AT")
        assert keeper.catch_up()["indexed"] == 0 and keeper.apart is not None
        # A pass that fails there is made here, and fails here too: said by the caller.
        shutil.move(disk / "meta" / "index.db", tmp_path / "index.db")
        (disk / "meta" / "index.db").mkdir()
        with pytest.raises(sqlite3.OperationalError, match="unable to open"):
            keeper.catch_up()
        (disk / "meta" / "index.db").rmdir()
        shutil.move(tmp_path / "index.db", disk / "meta" / "index.db")
    finally:
        keeper.close()
        store.close()
    assert search(disk, "zebra") == ["/crawl-2014/http/example.com/@20140301000000"]


def test_the_indexing_process_finds_what_another_process_wrote_at_each_pass(tmp_path):
    """The indexing process keeps its read-only catalog open from pass to pass;
    files another process imports between two passes are indexed by the second
    (its own catalog's write count never moves, so it must not take the index
    for current)."""
    disk = make_archive(tmp_path / "a", 2)[0]
    quiet = dict(os.environ, WEBFS_INDEX="0")
    webfs("import", crawl(tmp_path / "src", "crawl-2014", "20140301000000", {}), f"{disk}:/", env=quiet)
    store = open_archive(str(disk), holder="test")
    apart = indexer.Apart(store)
    store.close()
    try:
        assert apart.run_pass()["indexed"] == 3
        assert apart.run_pass()["indexed"] == 0
        pages = {f"http/example.com/n{i}.html": b"<title>New %d</title>okapi" % i for i in range(5)}
        webfs("import", crawl(tmp_path / "src2", "crawl-2015", "20150301000000", pages), f"{disk}:/", env=quiet)
        assert apart.run_pass()["indexed"] == 8
    finally:
        apart.close()
    assert indexed_files(disk, "okapi") == 5


def indexed_files(disk: Path, word: str) -> int:
    """Files whose document holds ``word``, read from the index as it is (no pass first)."""
    db = sqlite3.connect(disk / "meta" / "index.db")
    try:
        return db.execute("SELECT count(*) FROM files JOIN docs_text ON docs_text.rowid = files.doc "
                          "WHERE docs_text MATCH ?", (word,)).fetchone()[0]
    finally:
        db.close()


def test_a_search_after_an_import_finds_every_page_even_if_its_indexer_dies(tmp_path):
    """A search right after an import finds every page it made, though in
    the second import (2,000 new pages) its indexing process, if it went
    apart, was killed at its first file (the import indexes what it can
    itself; the search's own pass the rest: an import that leaves more than
    LEAVE_AFTER files does not wait for them)."""
    disk = make_archive(tmp_path / "a", 2)[0]
    said = b"the indexing process ended (killed by signal 9); indexing in this process instead"
    pages_made = 0
    for n, size, kill in ((1, 600, None), (2, 2000, "index-after-file")):
        pages = {f"http/example.com/p{i}.html": b"<title>Page %d %d</title>gnu wildebeest" % (n, i) for i in range(size)}
        src = crawl(tmp_path / f"src{n}", "crawl-2016", "20160301000000", pages)
        proc = webfs("import", src, f"{disk}:/import{n}", env=dict(os.environ, **({"WEBFS_TEST_KILL_AT": kill} if kill else {})))
        pages_made += size
        assert search(disk, "wildebeest", "--count") == [str(pages_made)]
        # Whether an import lasts past its first look (ALONGSIDE_INTERVAL) to
        # index apart depends on the machine: the kill is said when it does
        # (test_a_killed_indexing_process_is_said_and_its_pass_made_here makes
        # it happen every time), never without one.
        assert kill is not None or said not in proc.stderr


def test_an_import_does_not_wait_for_a_long_last_pass_and_a_search_does(tmp_path):
    """An import that ends with LEAVE_AFTER files or more unindexed hands its
    last pass to its indexing process and exits without waiting for it, nor
    holding the stderr its caller reads to the end: here the index's lock is
    held all through the import (an import that waited would hang). A search
    started then (webfs(1)'s promise: right after the import) waits for that
    pass and answers for every page."""
    disk = make_archive(tmp_path / "a", 2)[0]
    pages = {f"http/example.org/p{i}.html": b"<title>P %d</title>quokka" % i for i in range(indexer.LEAVE_AFTER)}
    src = crawl(tmp_path / "src", "crawl-2014", "20140301000000", pages)
    with pass_lock(str(disk / "meta")):
        proc = webfs("import", src, f"{disk}:/", timeout=300)
        assert proc.stderr == b"" and not (disk / "meta" / "index.db").exists()
        searching = subprocess.Popen([str(BIN / "webfs"), "search", "--count", "quokka", str(disk)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert searching.poll() is None
    out, err = searching.communicate(timeout=300)
    assert (out, err, searching.returncode) == (b"%d\n" % indexer.LEAVE_AFTER, b"", 0)
    assert wait_for(lambda: indexed_files_once_there(disk, "quokka") == indexer.LEAVE_AFTER)
    assert not (disk / "meta" / indexprocess.LEFT_LOG).exists()


def test_a_failed_last_pass_not_waited_for_is_written_to_index_log(tmp_path):
    """No one reads what the indexing process says after its import ended: a
    last pass that fails (index.db cannot be opened), made on its own once
    the lock goes, is written to index.log beside it."""
    disk = make_archive(tmp_path / "a", 2)[0]
    pages = {f"http/example.org/p{i}.html": b"<title>P %d</title>quokka" % i for i in range(indexer.LEAVE_AFTER)}
    with pass_lock(str(disk / "meta")):
        webfs("import", crawl(tmp_path / "src", "crawl-2014", "20140301000000", pages), f"{disk}:/", timeout=300)
        (disk / "meta" / "index.db").mkdir()
    log_file = disk / "meta" / indexprocess.LEFT_LOG
    assert wait_for(lambda: log_file.exists() and b"not brought up to date" in log_file.read_bytes())
    assert b"webfs reindex" in log_file.read_bytes()


def wait_for(condition, seconds: float = 120) -> bool:
    """Poll ``condition`` until it holds or a generous deadline passes."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def indexed_files_once_there(disk: Path, word: str) -> int:
    """indexed_files, 0 while index.db is not made yet or not yet committed to (locked, no tables)."""
    if not (disk / "meta" / "index.db").exists():
        return 0
    try:
        return indexed_files(disk, word)
    except sqlite3.OperationalError:
        return 0


@pytest.mark.parametrize("indexed_at_import", [False, True])
def test_a_mount_s_first_pass_goes_apart_if_the_index_lacks_many_files(tmp_path, indexed_at_import):
    """The keeper's first pass (a mount's comes once a copy into it has gone on
    for INDEX_BUSY_INTERVAL: thousands of files) is the indexing process's when
    the catalog has ``apart_after`` files more than the index; here when the
    index already has them (an archive mounted again)."""
    disk = make_archive(tmp_path / "a", 2)[0]
    env = os.environ if indexed_at_import else dict(os.environ, WEBFS_INDEX="0")
    webfs("import", crawl(tmp_path / "src", "crawl-2014", "20140301000000", {}), f"{disk}:/", env=env)
    store = open_archive(str(disk), holder="test")
    keeper = indexer.Keeper(store, apart_after=3)
    try:
        keeper.step()
        assert (keeper.apart is not None) is not indexed_at_import
        # Its catalog connection counts files, a scan: its page cache is kept small.
        assert keeper.watch.db.execute("PRAGMA cache_size").fetchone()[0] == -indexer.WATCH_CACHE_KIB
    finally:
        keeper.close()
        store.close()
    assert indexed_files(disk, "zebra") == 1


def test_a_fresh_mount_makes_no_pass_beside_an_import_that_starts_at_once(tmp_path):
    """A mount's start counts as its last pass: an import run into a fresh
    mount is not met by a pass at its first commit (made in the daemon, it
    took the import's CPU), only by the one when it ends."""
    disk = make_archive(tmp_path / "a", 2)[0]
    webfs("import", crawl(tmp_path / "src", "crawl-2014", "20140301000000", {}), f"{disk}:/",
          env=dict(os.environ, WEBFS_INDEX="0"))        # files the index has not seen, as a copy leaves them
    store = open_archive(str(disk), holder="test")
    keeper = indexer.Keeper(store)
    try:
        with indexer.imports_running:
            assert keeper.step() is False
        assert keeper.step() is True
        assert indexed_files(disk, "perennial OR home OR zebra OR creme") == 3
    finally:
        keeper.close()
        store.close()


def test_a_mount_leaves_its_index_behind_an_import_running_in_it(tmp_path):
    """The mount's keeper makes no pass while an import runs in the mount
    (within IMPORT_BUSY_INTERVAL of its last), and one as soon as it ends."""
    disk = make_archive(tmp_path / "a", 2)[0]
    webfs("import", crawl(tmp_path / "src", "crawl-2014", "20140301000000", {}), f"{disk}:/")
    store = open_archive(str(disk), holder="test")
    keeper = indexer.Keeper(store)
    try:
        keeper.step()
        with sqlite3.connect(disk / "meta" / "index.db") as db:
            db.execute("DELETE FROM files")     # three files for the next pass to index again
        db.close()
        keeper.poke()
        with indexer.imports_running:
            assert keeper.step() is False
            assert indexed_files(disk, "perennial OR home OR zebra OR creme") == 0
        # A pass that indexed says so (an import's next pass then follows at once); one with nothing to do, not.
        assert keeper.step() is True
        assert indexed_files(disk, "perennial OR home OR zebra OR creme") == 3
        keeper.poke()
        assert keeper.step() is False
    finally:
        keeper.close()
        store.close()


def test_only_files_in_a_collection_are_indexed(archive, tmp_path):
    """A file at the top of the archive is in no collection, and not indexed
    (webfs(1), QUERIES); the same page one directory down is."""
    page = tmp_path / "loose.html"
    page.write_bytes(b"<html><title>t</title><p>solitary words</p></html>")
    webfs_here("import", page, f"{archive}:/")
    assert search(archive, "solitary") == []
    webfs_here("import", page, f"{archive}:/crawl-2014/")
    assert search(archive, "solitary") == ["/crawl-2014/loose.html"]
