"""Query access through a real mount: a crawl copied in with cp -r is found by
webfs search and listed, read and grepped through .webfs/search/QUERY/; the
index follows removals, and catches up after the daemon is killed."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, Mounted, eventually, sh, wait_dead, webfs, webfs_here
from t2_query import NOT_FOR_A_SEARCH, crawl, imported_modules


# What a plain search of a mount does without: the archive, the index, click and the command line.
NOT_FOR_A_QUICK_SEARCH = {"webfs.archive", "webfs.store", "webfs.admincommands", "sqlite3", "selectolax", "zlib_ng",
                          "concurrent.futures", "click", "webfs.cli", "webfs.control", "webfs.admin", "typing"}


def listing(m, query: str) -> list[str]:
    try:
        return sorted(os.listdir(m.mnt / ".webfs" / "search" / query))
    except FileNotFoundError:
        return []


@pytest.fixture
def mkfs_args() -> tuple:
    """How the archives here are made (t4_pg_query: with a PostgreSQL catalog)."""
    return ()


def test_a_copied_crawl_is_found_and_read_through_search(tmp_path, mkfs_args):
    m = Mounted(tmp_path, disks=2, mkfs_args=mkfs_args)
    try:
        for name, stamp in (("crawl-2014", "20140301000000"), ("crawl-2015", "20150301000000")):
            src = crawl(tmp_path / "src", name, stamp, {"http/example.com/gone.html": b"ephemeral " + name.encode()})
            sh(f"cp -r '{src}' '{m.mnt}/'")
        zebra = f"{m.mnt}/crawl-2014/http/example.com/@20140301000000"
        assert webfs("search", "zebra", m.mnt).stdout.decode().split() == [zebra]
        eventually(lambda: len(listing(m, "perennial")) == 2, "the background index")
        names = listing(m, "perennial")
        assert names == ["crawl-2014%2Fhttp%2Fexample.com%2Fsame.html@20140301000000",
                         "crawl-2015%2Fhttp%2Fexample.com%2Fsame.html@20150301000000"]
        link = m.mnt / ".webfs" / "search" / "perennial" / names[0]
        assert os.readlink(link) == "../../../crawl-2014/http/example.com/same.html@20140301000000"
        assert sh(f"cat '{link}'").stdout == (tmp_path / "src" / "crawl-2014/http/example.com/same.html@20140301000000").read_bytes()
        hits = sh(f"cd '{m.mnt}/.webfs/search/title:stanford links-to:http:%2F%2Fwww-db.stanford.edu%2F' && grep -l zebra *").stdout
        assert hits.decode().split() == ["crawl-2014%2Fhttp%2Fexample.com%2F@20140301000000"]
        tar = sh(f"tar -chf - -C '{m.mnt}/.webfs/search' 'crème' | tar -tf -").stdout.decode().split()
        assert len(tar) == 3                            # the directory and its two answers, followed
        proc = sh(f"ls '{m.mnt}/.webfs/search/date:nonsense'", check=False)
        assert proc.returncode != 0 and b"Invalid argument" in proc.stderr
        assert len(listing(m, "ephemeral")) == 2
        os.unlink(m.mnt / "crawl-2015/http/example.com/gone.html@20150301000000")
        assert webfs("search", "--count", "ephemeral", m.mnt).stdout == b"1\n"
        eventually(lambda: len(listing(m, "ephemeral")) == 1, "the removal reaching the index")
    finally:
        m.umount()


def test_what_a_killed_mount_did_not_index_is_caught_up(tmp_path):
    m = Mounted(tmp_path, disks=2)
    try:
        src = crawl(tmp_path / "src", "crawl-2014", "20140301000000", {})
        sh(f"cp -r '{src}' '{m.mnt}/' && sync")
        pid = m.pid()
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid)
        subprocess.run(["fusermount3", "-uz", str(m.mnt)], check=False)
        for f in (m.disks[0] / "meta").glob("index.db*"):
            f.unlink()                                  # and the index lost with it: derived data
        m.mount()
        eventually(lambda: len(listing(m, "zebra")) == 1, "the catch-up at the next mount")
        assert webfs("search", "--urls", "inlinks=0 title:stanford", m.mnt).stdout == b"http://example.com/\n"
        # Asking a mount, the command loads neither the archive nor the index (the daemon has them
        # open), nor click and the rest of the command line (webfs.quicksearch answers).
        proc = webfs("search", "--count", "links-to:http://www-db.stanford.edu/ zebra", m.mnt,
                     env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"))
        assert proc.stdout == b"1\n"
        loaded = imported_modules(proc)
        assert "webfs.quicksearch" in loaded
        assert loaded & (NOT_FOR_A_SEARCH | NOT_FOR_A_QUICK_SEARCH) == set()
    finally:
        m.umount()


# Searches of a mount (what comes before its mount point) webfs.quicksearch answers
# itself, and ones it leaves to click, with their exit status: a bad query (the daemon
# says so before there is any index), an option click refuses or reads its own way, a
# path with a terminal escape in it (click takes it out).
QUICK = (["zebra"], ["--json", "perennial"], ["--urls", "perennial"], ["perennial", "--count"],
         ["--limit", "1", "--offset=1", "perennial"], ['"unchanged between"'], ["crème"], ["nowhere"])
LEFT_TO_CLICK = ((["date:nonsense"], 2), ([""], 2), (["--limit", "0", "zebra"], 2), (["--count=1", "zebra"], 2),
                 (["--urls", "--json", "zebra"], 0), (["--", "zebra"], 0), (["okapi"], 0))


def test_a_search_of_a_mount_prints_what_clicks_path_prints(tmp_path):
    m = Mounted(tmp_path, disks=2)
    try:
        for name, stamp in (("crawl-2014", "20140301000000"), ("crawl-2015", "20150301000000")):
            sh(f"cp -r '{crawl(tmp_path / 'src', name, stamp, {})}' '{m.mnt}/'")
        (m.mnt / "c").mkdir()
        (m.mnt / "c" / "esc\x1b[1mape.html").write_bytes(b"<title>t</title>okapi")
        for args, status in [(args, 0) for args in QUICK] + list(LEFT_TO_CLICK):
            quick = webfs("search", *args, m.mnt, check=False, env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"))
            full = webfs_here("search", *args, m.mnt, check=False)
            assert ("click" in imported_modules(quick)) == (args not in QUICK), args
            err = b"".join(line for line in quick.stderr.splitlines(True) if not line.startswith(b"import time:"))
            assert (quick.returncode, quick.stdout, err) == (status, full.stdout, full.stderr), args
            assert full.returncode == status
        closed = sh(f"'{BIN}/webfs' search zebra '{m.mnt}' >&-", check=False)     # no stdout: click's path, quiet
        assert (closed.returncode, closed.stderr) == (0, b"")
    finally:
        m.umount()


def test_only_the_owner_looks_into_search(tmp_path):
    import tempfile
    m = Mounted(tmp_path, disks=2, mount=False)
    m.mnt = Path(tempfile.mkdtemp(prefix="webfs-search-"))       # pytest's tmp is root-only
    os.chmod(m.mnt, 0o755)
    m.mount("allow_other")
    try:
        (m.mnt / "c").mkdir()
        (m.mnt / "c" / "page.html").write_text("<title>t</title>okapi")
        os.chmod(m.mnt / "c" / "page.html", 0o644)
        assert webfs("search", "okapi", m.mnt).stdout.decode().split() == [f"{m.mnt}/c/page.html"]
        assert sh(f"runuser -u nobody -- cat '{m.mnt}/c/page.html'").stdout.endswith(b"okapi")
        eventually(lambda: listing(m, "okapi") == ["c%2Fpage.html"], "the background index")
        proc = sh(f"runuser -u nobody -- ls '{m.mnt}/.webfs/search/okapi'", check=False)
        assert proc.returncode != 0 and b"Permission denied" in proc.stderr
    finally:
        m.umount()
        os.rmdir(m.mnt)
