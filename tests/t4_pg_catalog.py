"""The catalog in PostgreSQL (webfs mkfs --catalog postgresql://...), on a
real server the tests start (tests/postgres.py): t4_mount's round trips with
real tools run again here against it (imported, so pytest runs them with this
module's ``mounted``), and what is PostgreSQL's own: the URL in webfs.conf
and status without a password, a password from a file, a URL refused."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest

from conftest import Mounted, sh, webfs
from postgres import PASSWORD, PASSWORD_ROLE
from t4_mount import (test_cp_r_of_a_crawl_reads_back_identical,  # noqa: F401  (run here on PostgreSQL)
                      test_overwrite_append_and_random_writes, test_posix_details,
                      test_rsync_and_tar_in_and_out)


@pytest.fixture
def corpus(small_corpus):
    """t4_mount's workloads with a fifth of the files: each round trip to the
    server is what the PostgreSQL catalog adds, and every tool's kinds of
    operation (mkdir, create, write, chmod, utimes, rsync's renames,
    duplicates sharing blocks) are in the smaller crawl as in the larger."""
    return small_corpus


@pytest.fixture
def mounted(tmp_path, pg_catalog):
    """A mounted archive whose catalog is a fresh PostgreSQL database."""
    m = Mounted(tmp_path, mkfs_args=("--catalog", pg_catalog))
    yield m
    m.umount()


def test_the_server_answers(postgres):
    assert postgres.psql("postgres", "SELECT 1").strip() == "1"


def test_the_catalog_is_in_the_database_and_not_on_the_disk(mounted, postgres, pg_catalog):
    (mounted.mnt / "d").mkdir()
    (mounted.mnt / "d" / "page.html").write_bytes(b"<html>in postgres</html>" * 100)
    mounted.umount()
    assert not (mounted.disks[0] / "meta" / "catalog.db").exists()
    conf = (mounted.disks[0] / "webfs.conf").read_text()
    assert f"catalog_url = {pg_catalog}\n" in conf
    db = urllib.parse.urlsplit(pg_catalog).path.strip("/")
    assert postgres.psql(db, "SELECT count(*) FROM dentries WHERE name = 'page.html'::bytea").strip() == "1"
    status = webfs("status", mounted.disks[0]).stdout.decode()
    assert f"catalog: {pg_catalog}" in status
    mounted.mount()
    assert (mounted.mnt / "d" / "page.html").read_bytes() == b"<html>in postgres</html>" * 100


def test_a_password_comes_from_a_file_and_is_never_recorded(tmp_path, postgres):
    url = postgres.url(postgres.new_database(), user=PASSWORD_ROLE)
    secret = tmp_path / "catalog-password"
    secret.write_text(PASSWORD + "\n")
    disks = [tmp_path / f"disk{i}" for i in range(3)]
    refused = webfs("mkfs", "--catalog", url, *disks, check=False)
    assert refused.returncode == 1 and b"does not answer" in refused.stderr
    assert b"\n" not in refused.stderr.rstrip(b"\n")
    unreadable = dict(os.environ, WEBFS_CATALOG_PASSWORD_FILE=str(tmp_path / "no-such-file"))
    refused = webfs("mkfs", "--catalog", url, *disks, env=unreadable, check=False)
    assert refused.returncode == 1 and refused.stderr.count(b"\n") == 1
    assert b"no-such-file: cannot read the catalog's password" in refused.stderr
    env = dict(os.environ, WEBFS_CATALOG_PASSWORD_FILE=str(secret))
    webfs("mkfs", "--catalog", url, *disks, env=env)
    m = tmp_path / "mnt"
    m.mkdir()
    webfs("mount", disks[0], m, env=env)
    try:
        (m / "f").write_text("behind a password")
        assert (m / "f").read_text() == "behind a password"
        status = webfs("status", m, env=env).stdout
    finally:
        webfs("umount", m)
    seen = b"".join(p.read_bytes() for d in disks for p in d.rglob("*") if p.is_file())
    assert PASSWORD.encode() not in seen + status


@pytest.mark.parametrize("url, why", [
    ("postgresql://webfs:hunter2@localhost/db", b"carries a password"),
    ("postgresql://localhost/db?password=hunter2", b"carries a password"),
    ("mysql://localhost/db", b"not a postgresql:// URL"),
    ("postgresql://localhost/", b"names no database"),
])
def test_a_bad_catalog_url_is_refused_in_one_line(tmp_path, url, why):
    out = webfs("mkfs", "--catalog", url, tmp_path / "disk0", check=False)
    assert out.returncode == 1 and why in out.stderr and b"hunter2" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "disk0").exists()


def test_a_database_that_holds_an_archive_is_refused(tmp_path, pg_catalog):
    webfs("mkfs", "--catalog", pg_catalog, tmp_path / "a0")
    out = webfs("mkfs", "--catalog", pg_catalog, tmp_path / "b0", check=False)
    assert out.returncode == 1 and b"holds a webfs catalog already" in out.stderr
    assert not (tmp_path / "b0").exists()


def test_fsck_and_scrub_on_a_postgresql_catalog(mounted, corpus, tmp_path, postgres):
    """rm, mv and a hard link leave a catalog fsck and scrub find whole; a
    block the catalog lost is found by fsck (it reads the database)."""
    src = corpus / "crawl-001"
    sh(f"cp -r '{src}' '{mounted.mnt}/c' && cp -r '{src}' '{tmp_path}/expect'")
    first = sorted(p.name for p in src.iterdir() if p.is_dir())[0]
    sh(f"rm -r '{mounted.mnt}/c/{first}' '{tmp_path}/expect/{first}'")
    sh(f"mv '{mounted.mnt}/c' '{mounted.mnt}/moved'")
    mounted.umount()
    assert webfs("fsck", mounted.disks[0]).returncode == 0
    assert webfs("scrub", mounted.disks[0]).returncode == 0
    mounted.mount()
    sh(f"diff -r '{tmp_path}/expect' '{mounted.mnt}/moved'")
    mounted.umount()
    db = urllib.parse.urlsplit(mounted_url(mounted)).path.strip("/")
    postgres.psql(db, "DELETE FROM blocks WHERE id = (SELECT min(block) FROM contents)")
    found = webfs("fsck", mounted.disks[0], check=False)
    assert found.returncode != 0 and found.stdout.strip(), found
    refused = webfs("fsck", "--rebuild-catalog", "--repair", mounted.disks[0], check=False)
    assert refused.returncode == 8 and b"rebuilds SQLite catalogs only" in refused.stderr
    assert not (mounted.disks[0] / "meta" / "catalog.db").exists()


def mounted_url(m: Mounted) -> str:
    conf = (m.disks[0] / "webfs.conf").read_text()
    return next(line.split("=", 1)[1].strip() for line in conf.splitlines() if line.startswith("catalog_url"))


def test_s3_disks_with_the_catalog_in_postgresql_mount_on_a_new_machine(weeds, tmp_path, corpus, pg_catalog,
                                                                         monkeypatch):
    """Disks in three SeaweedFS buckets, the catalog in PostgreSQL: no catalog
    copy goes to the buckets (the database is the durable copy), and a new
    machine (a new state directory) mounts from a bucket's URL and the names."""
    from t4_s3_mount import bucket_on_each, mounted_site
    disks = bucket_on_each(weeds, "pg")
    mnt, src = mounted_site(disks, tmp_path, corpus, "--catalog", pg_catalog)
    try:
        sh(f"mv '{mnt}/site' '{mnt}/moved'")
        os.link(next(p for p in sorted((mnt / "moved").rglob("*")) if p.is_file()), mnt / "hard")
    finally:
        webfs("umount", mnt)
    names = [o["Key"] for w, url in zip(weeds, disks)
             for o in w.client().list_objects_v2(Bucket=url.rsplit("/", 1)[1]).get("Contents", [])]
    assert "webfs.conf" in names and not any("catalog.db" in n for n in names)
    monkeypatch.setenv("WEBFS_STATE_DIR", str(tmp_path / "new-machine"))
    webfs("mount", disks[1], mnt)
    try:
        sh(f"diff -r '{src}' '{mnt}/moved'")
        assert (mnt / "hard").stat().st_nlink == 2 and not (mnt / "site").exists()
    finally:
        webfs("umount", mnt)
    assert webfs("fsck", disks[0]).returncode == 0


def test_import_into_a_postgresql_catalog_then_mount(tmp_path, corpus, pg_catalog):
    m = Mounted(tmp_path, mkfs_args=("--catalog", pg_catalog), mount=False)
    webfs("import", corpus / "crawl-002", f"{m.disks[0]}:/c2")
    m.mount()
    try:
        sh(f"diff -r '{corpus}/crawl-002' '{m.mnt}/c2/crawl-002'")
    finally:
        m.umount()


def test_a_database_of_schema_3_is_altered_at_open(tmp_path, postgres, pg_catalog):
    """A catalog made by the webfs of schema 3 (created as text) gets its
    created column as seconds at the next open, every Created kept, and
    loses its blocks' name column (schema 5)."""
    m = Mounted(tmp_path, mkfs_args=("--catalog", pg_catalog))
    (m.mnt / "page.html").write_bytes(b"<html>schema 3</html>" * 100)
    m.umount()
    db = urllib.parse.urlsplit(pg_catalog).path.strip("/")
    postgres.psql(db, "ALTER TABLE blocks ALTER COLUMN created TYPE TEXT USING to_char(to_timestamp(created) "
                      "AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'); "
                      "ALTER TABLE blocks ADD COLUMN name TEXT NOT NULL DEFAULT '/page.html'; "
                      "UPDATE meta SET value = '3' WHERE key = 'schema'")
    texts = postgres.psql(db, "SELECT created FROM blocks").split()
    assert texts and all(t.endswith("Z") for t in texts), texts
    m.mount()
    try:
        assert (m.mnt / "page.html").read_bytes() == b"<html>schema 3</html>" * 100
    finally:
        m.umount()
    assert postgres.psql(db, "SELECT value FROM meta WHERE key = 'schema'").strip() == "6"
    assert postgres.psql(db, "SELECT DISTINCT pg_typeof(created) FROM blocks").strip() == "bigint"
    assert postgres.psql(db, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'blocks' "
                             "AND column_name = 'name'").strip() == "0"      # schema 5: no Name: hints
    assert postgres.psql(db, "SELECT to_char(to_timestamp(created) AT TIME ZONE 'UTC', "
                             "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM blocks").split() == texts
    assert webfs("fsck", m.disks[0], check=False).returncode == 0


def test_a_reader_in_order_asks_the_catalog_once_per_window_of_files(mounted):
    """cat of a directory's 100 files, cold: the read-ahead looks up the next
    files a window at a time (webfs.readcache.READ_AHEAD_WINDOW), not once per
    open (a round trip each to the server)."""
    (mounted.mnt / "e").mkdir()            # before d: no walker goes into it after d
    for n in range(10):
        (mounted.mnt / "e" / f"g{n}.html").write_bytes(b"<p>%d</p>" % n)
    d = mounted.mnt / "d"
    d.mkdir()
    for n in range(100):
        (d / f"f{n:03d}.html").write_bytes(b"<p>%d</p>" % n * 40)
    mounted.remount()
    sh(f"cat '{d}'/* > /dev/null")
    requests = json.loads(os.getxattr(mounted.mnt, "user.webfs.requests"))
    assert requests["open"] >= 100
    # The directory in three listings (8, then 64 once in order, then the
    # rest) and its parent's next entries, where a walker of the tree goes next.
    assert 1 <= requests.get("read-ahead-lookup", 0) <= 4, requests
    # A random reader past the file it opened before: one short query
    # (Namespace.has_reading_between) in PostgreSQL's SQL too.
    before = requests.get("read-ahead-lookup", 0)
    assert sh(f"cat '{mounted.mnt}/e/g2.html' '{mounted.mnt}/e/g7.html'").stdout == b"<p>2</p><p>7</p>"
    requests = json.loads(os.getxattr(mounted.mnt, "user.webfs.requests"))
    assert requests.get("read-ahead-lookup", 0) == before + 1, requests


def _buffered(sock) -> int:
    """Bytes waiting in a socket, not read (the listener's, while it is busy)."""
    try:
        return len(sock.recv(1 << 16, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return 0


def test_the_listener_hands_on_the_notices_that_piled_up_as_one_change(pg_catalog):
    """Notices that arrive while the daemon handles one are handed on together
    (a hand-off to its loop each), the mount's own left out; one call per
    notice before."""
    from webfs import changes
    from webfs.catalogengine import PostgresEngine
    engine = PostgresEngine(pg_catalog)
    calls, first, release = [], threading.Event(), threading.Event()

    def changed(inodes, names, everything):
        calls.append((inodes, names, everything))
        first.set()
        release.wait(60)
    listener = changes.Listener(engine, "here", changed)
    sender = engine.connect().conn
    try:
        sender.execute(changes.NOTIFY_SQL, ("there 5",))
        assert first.wait(60)
        later = ["here 6", "there 7 1/6162", "elsewhere 8"]
        for text in later:
            sender.execute(changes.NOTIFY_SQL, (text,))
        # All three in the listener's socket before it reads again (a NotificationResponse
        # is its type, length, sender pid, channel and payload).
        size = sum(1 + 4 + 4 + len(changes.CHANNEL) + 1 + len(t) + 1 for t in later)
        sock = socket.socket(fileno=os.dup(listener._conn.pgconn.socket))
        deadline = time.monotonic() + 60
        while _buffered(sock) < size and time.monotonic() < deadline:
            time.sleep(0.01)
        sock.close()
        release.set()
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls == [({5}, set(), False), ({7, 8}, {(1, b"ab")}, False)]
    finally:
        release.set()
        listener.close()
        sender.close()
