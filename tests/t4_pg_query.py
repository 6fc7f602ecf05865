"""The query index in PostgreSQL (webfs.pgindex), on a real server the tests
start (tests/postgres.py): the query tests of t1_query, t2_query and
t4_query run again here, imported, with this module's fixtures (an index,
an archive, a mount whose catalog is in PostgreSQL), so both engines give
the same answers to every kind of term; and what is PostgreSQL's own: the
index in the catalog's database and nowhere on the disks, dropped tables
and another version made again, reindex, an index that refuses writes."""
from __future__ import annotations

import shutil
import urllib.parse

import pytest

from conftest import make_archive, webfs_here
from t1_query import filled
from t1_query import test_any_text_is_a_query_or_a_clear_refusal, test_each_kind_of_term  # noqa: F401
from t2_query import crawl, search
from t2_query import (test_a_later_import_is_found_and_a_bad_query_is_exit_2,  # noqa: F401  (run here on PostgreSQL)
                      test_known_answers_after_import, test_phrases_are_checked_against_the_pages,
                      test_stream_subsets_from_a_disk, test_warc_captures_are_indexed_with_their_urls)
from t4_query import test_a_copied_crawl_is_found_and_read_through_search  # noqa: F401
from webfs.catalogengine import PostgresEngine
from webfs.pgindex import PgIndex


@pytest.fixture
def index(pg_catalog):
    """t1_query's index of known answers, in PostgreSQL."""
    ix = filled(PgIndex(PostgresEngine(pg_catalog)))
    yield ix
    ix.close()


@pytest.fixture
def catalog_url(pg_catalog) -> str:
    return pg_catalog


@pytest.fixture
def mkfs_args(pg_catalog) -> tuple:
    return ("--catalog", pg_catalog)


@pytest.fixture(scope="module")
def imported(tmp_path_factory, postgres) -> tuple[list, str]:
    """t2_query's two crawls imported once into an archive whose catalog
    (and so index) is a PostgreSQL database; each test gets a copy of both."""
    root = tmp_path_factory.mktemp("pgquery")
    db = postgres.new_database()
    disks = make_archive(root / "a", 2, catalog_url=postgres.url(db))
    for name, stamp in (("crawl-2014", "20140301000000"), ("crawl-2015", "20150301000000")):
        webfs_here("import", crawl(root / "src", name, stamp, {}), f"{disks[0]}:/")
    return disks, db


@pytest.fixture
def archive(tmp_path, imported, postgres):
    disks, db = imported
    copy = postgres.new_database(template=db)
    for pristine in disks:
        shutil.copytree(pristine, tmp_path / "a" / pristine.name, symlinks=True)
        conf = tmp_path / "a" / pristine.name / "webfs.conf"
        conf.write_text(conf.read_text().replace(postgres.url(db), postgres.url(copy)))
    return tmp_path / "a" / disks[0].name


def database(disk) -> str:
    conf = (disk / "webfs.conf").read_text()
    url = conf.split("catalog_url = ", 1)[1].split("\n", 1)[0]
    return urllib.parse.urlsplit(url).path.strip("/")


def test_the_index_is_in_the_catalog_s_database_and_each_document_once(archive, postgres):
    assert not list(archive.parent.rglob("index.db*"))
    db = database(archive)
    # Six files, four distinct documents: same.html and latin1.txt are stored (and indexed) once.
    assert postgres.psql(db, "SELECT count(*) FROM webfs_index.files WHERE collection != ''").strip() == "6"
    assert postgres.psql(db, "SELECT count(*) FROM webfs_index.docs").strip() == "4"
    words = postgres.psql(db, "SELECT words FROM webfs_index.docs WHERE words @@ 'zebra'").strip()
    assert "'_stanford'" in words and "'cafe'" in words and "scriptonly" not in words


def test_dropped_tables_and_another_version_are_made_again(archive, postgres):
    want = search(archive, "host:example.com", "--json")
    db = database(archive)
    for damage, said in (("DROP TABLE webfs_index.docs", b"1 of its tables missing"),
                         ("DROP SCHEMA webfs_index CASCADE", b""),
                         ("UPDATE webfs_index.meta SET value = 'pg0' WHERE key = 'version'", b"index version pg0"),
                         ("DROP INDEX webfs_index.docs_words", b"")):
        postgres.psql(db, damage)
        proc = webfs_here("search", "--json", "host:example.com", archive)
        assert proc.stdout.decode().split("\n")[:-1] == want and said in proc.stderr, damage
        assert search(archive, "zebra") == ["/crawl-2014/http/example.com/@20140301000000"]
    assert postgres.psql(db, "SELECT count(*) FROM pg_indexes WHERE indexname = 'docs_words'").strip() == "1"


def test_reindex_rebuilds_in_the_database_and_refuses_an_index_dir(archive, tmp_path, postgres):
    before = search(archive, "host:example.com", "--json")
    left = archive / "meta" / "index.db"
    left.write_bytes(b"an index from before the catalog moved")
    out = webfs_here("reindex", archive).stdout.decode()
    assert "indexed 6 files, 4 distinct documents, in the catalog's database (postgresql://" in out
    assert not left.exists()
    assert search(archive, "host:example.com", "--json") == before
    proc = webfs_here("reindex", "--index-dir", tmp_path / "idx", archive, check=False)
    assert proc.returncode == 1 and proc.stderr.count(b"\n") == 1
    assert b"is in its catalog's database" in proc.stderr and not (tmp_path / "idx").exists()


def test_an_import_whose_index_refuses_writes_still_imports(archive, tmp_path, postgres):
    db = database(archive)
    postgres.psql(db, "CREATE FUNCTION webfs_index.refuse() RETURNS trigger AS $$ BEGIN "
                      "RAISE EXCEPTION 'no writes here'; END $$ LANGUAGE plpgsql; "
                      "CREATE TRIGGER refuse BEFORE INSERT ON webfs_index.files "
                      "FOR EACH ROW EXECUTE FUNCTION webfs_index.refuse()")
    proc = webfs_here("import", crawl(tmp_path / "src3", "crawl-2017", "20170301000000", {}), f"{archive}:/")
    assert b"no writes here" in proc.stderr and b"'webfs reindex' rebuilds it" in proc.stderr
    postgres.psql(db, "DROP TRIGGER refuse ON webfs_index.files")
    assert search(archive, "perennial collection:crawl-2017") == [
        "/crawl-2017/http/example.com/same.html@20170301000000"]
