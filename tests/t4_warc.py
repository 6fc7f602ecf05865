"""webfs import-warc / export-warc through a real mount, and pywb replaying the
mount (the WARC writers and readers are t2_warc's)."""
from __future__ import annotations

import json
import os
import re

import pytest

from conftest import BIN, Mounted, eventually, webfs, webfs_here
from t2_warc import records_of, write_warc


# ---------------------------------------------------------------- through a mount

def test_import_into_a_mount(tmp_path):
    m = Mounted(tmp_path, disks=3)
    try:
        pages = [("http://example.com/", b"<html>home</html>"), ("http://example.com/a/b.html", b"<html>b</html>")]
        src = write_warc(tmp_path / "crawl.warc.gz", pages, every_type=True)
        coll = m.mnt / "crawl"
        assert not coll.exists()        # a miss the kernel keeps: the import has it forgotten
        webfs("import-warc", src, m.mnt)
        home = coll / "http" / "example.com" / "@20240101120000"
        assert home.read_bytes() == b"<html>home</html>"
        assert os.getxattr(home, "user.warc.target-uri") == b"http://example.com/"
        assert os.getxattr(home, "user.http.status") == b"200"
        assert (coll / "http/example.com/a/b.html@20240101120000").read_bytes() == b"<html>b</html>"
        assert sorted(os.listdir(coll / "@warc")) == ["crawl.warc.gz.cdxj", "crawl.warc.gz.heads", "crawl.warc.gz.index"]
        out = tmp_path / "out.warc.gz"
        res = webfs("export-warc", "--split", "1K", coll, out)
        assert b"(100%) byte-identical" in res.stdout
        parts = sorted(tmp_path.glob("out-*.warc.gz"))
        assert len(parts) > 1
        got = []
        for p in parts:
            got += records_of(p)
        assert got == records_of(src)
        ordered = tmp_path / "ordered.warc.gz"
        res = webfs("export-warc", "--order", "disk", coll, ordered)
        assert b"(100%) byte-identical" in res.stdout
        key = lambda r: (r["id"], r["type"])
        assert sorted(records_of(ordered), key=key) == sorted(records_of(src), key=key)
        assert records_of(ordered)[0]["type"] == "warcinfo"
        caps = json.loads(webfs("versions", "--json", "http://example.com/a/b.html", m.mnt).stdout)
        assert [c["path"] for c in caps] == ["crawl/http/example.com/a/b.html@20240101120000"]
        assert webfs("url", "http://example.com/", m.mnt).stdout.decode().strip() == str(home)
    finally:
        m.umount()


def test_an_import_warc_into_a_mount_loads_no_click_and_prints_what_clicks_path_prints(tmp_path):
    """webfs.quickimport runs a plain import-warc into a mount without click or
    webfs.cli (a tenth of a second of CPU of every command: a loop of them
    over a crawl's files) and prints what click's path (webfs.cli, run here)
    prints: the summary, the JSON, the damaged records on stderr and exit
    status 4, a daemon's refusal; what it leaves to click is click's."""
    from t2_query import imported_modules
    m = Mounted(tmp_path, disks=3)
    try:
        pages = [("http://example.com/", b"<html>home</html>"), ("http://example.com/b", b"<html>b</html>")]
        src = write_warc(tmp_path / "crawl.warc.gz", pages)
        damaged = tmp_path / "damaged.warc.gz"
        damaged.write_bytes(src.read_bytes() + b"not a record")
        (m.mnt / "file").write_text("not a directory")
        quick_env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")

        def same(args, status, quick_path=True):
            quick = webfs("import-warc", *args, check=False, env=quick_env)
            loaded = imported_modules(quick)
            assert ("click" in loaded) != quick_path and ("webfs.cli" in loaded) != quick_path, args
            full = webfs_here("import-warc", *[str(a).replace("/q", "/c") for a in args], check=False)
            err = b"".join(ln for ln in quick.stderr.splitlines(True) if not ln.startswith(b"import time:"))

            def masked(out):        # the figures of the summary line (the second finds the first's blocks)
                return re.sub(rb"[0-9.]+( [KMG]?i?B\b)?", b"N", out.replace(b"/c", b"/q"))
            assert (quick.returncode, masked(quick.stdout), masked(err)) == \
                (status, masked(full.stdout), masked(full.stderr)), args
            return quick

        assert b"imported 5 records" in same([src, f"{m.mnt}/q/"], 0).stdout
        got = json.loads(same(["--json", "--collection", "k", src, f"{m.mnt}/q/x/"], 0).stdout)
        assert got["figures"]["captures"] == 2
        assert (m.mnt / "q/x/k/http/example.com/b@20240101120000").read_bytes() == b"<html>b</html>"
        problem = same(["--collection=d", damaged, f"{m.mnt}/q/"], 4)
        assert b"damaged.warc.gz: offset" in problem.stderr
        assert b"not a directory" in same([src, f"{m.mnt}/file"], 1).stderr
        # Left to click: a WARC that is not a file, an option it does not read.
        assert b"does not exist" in same([tmp_path / "nowhere.warc", f"{m.mnt}/q/"], 2, quick_path=False).stderr
        same(["--", src, f"{m.mnt}/q/y/"], 0, quick_path=False)
    finally:
        m.umount()


# ---------------------------------------------------------------- replay by pywb

def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    """The answer of a server that may still be starting (pywb takes seconds,
    more on a loaded machine: the deadline only bounds a hang)."""
    import urllib.error
    import urllib.request

    def answer():
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError:
            return None
    return eventually(answer, f"{url} answering", every=0.2)


@pytest.mark.skipif(not (BIN / "wayback").exists(), reason="pywb is not installed")
def test_pywb_replays_the_mount(tmp_path):
    import subprocess
    m = Mounted(tmp_path, disks=3)
    procs = []
    try:
        pages = [("http://example.com/", b"<html><body>first home</body></html>"),
                 ("http://example.com/a.txt", b"plain text")]
        webfs("import-warc", write_warc(tmp_path / "crawl.warc.gz", pages), m.mnt)
        later = [("http://example.com/", b"<html><body>second home</body></html>")]
        webfs("import-warc", "--collection", "crawl",
              write_warc(tmp_path / "later.warc.gz", later, date="2024-02-01T12:00:00Z", start=500), m.mnt)
        p1, p2 = _free_port(), _free_port()
        pw = tmp_path / "pywb"
        rep = subprocess.Popen([str(BIN / "webfs"), "replay", "--port", str(p1), str(m.mnt / "crawl"), str(pw)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(rep)
        assert b"now run" in b"".join(rep.stdout.readline() for _ in range(3))
        cdxj = (pw / "webfs-cdxj" / "crawl.cdxj").read_bytes()
        assert cdxj.count(b"\n") == 3 and cdxj.splitlines() == sorted(cdxj.splitlines())
        way = subprocess.Popen([str(BIN / "wayback"), "-p", str(p2), "-b", "127.0.0.1"], cwd=pw,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(way)
        base = f"http://127.0.0.1:{p2}/crawl"
        status, body = _get(f"{base}/20240101120000id_/http://example.com/")
        assert status == 200 and body == pages[0][1]
        status, body = _get(f"{base}/20240201id_/http://example.com/")
        assert status == 200 and body == later[0][1]
        status, body = _get(f"{base}/2024id_/http://example.com/a.txt")
        assert status == 200 and body == b"plain text"
        status, tm = _get(f"{base}/timemap/link/http://example.com/")
        assert status == 200
        assert b"20240101120000" in tm and b"20240201120000" in tm and tm.count(b'rel="memento"') + \
            tm.count(b'rel="first memento"') + tm.count(b'rel="last memento"') >= 2
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=20)
        m.umount()


def test_long_and_deep_urls_through_a_mount(tmp_path):
    """A 6,000-byte URL and a 2,000-segment URL (paths past PATH_MAX): versions,
    url (also given the collection as TARGET), export-warc and
    webfs-warc-rebuild, byte-identical records."""
    import subprocess
    from conftest import REPO
    from t2_warc import _one
    long_url = b"http://example.com/long?" + b"q" * 6000
    deep_url = b"http://example.com/" + b"a/" * 2000 + b"end"
    src = tmp_path / "long.warc"
    src.write_bytes(_one(long_url, b"long") + _one(deep_url, b"deep") + _one(b"http://example.com/", b"home"))
    m = Mounted(tmp_path, disks=3)
    try:
        webfs("import-warc", src, m.mnt)
        for url in (long_url.decode(), deep_url.decode()):
            caps = json.loads(webfs("versions", "--json", url, m.mnt).stdout)
            assert [c["exact"] for c in caps] == [True], url[:40]
            path = webfs("url", url, m.mnt).stdout.decode().strip()
            assert path == os.path.join(str(m.mnt), caps[0]["path"])
            inside = webfs("url", url, m.mnt / "long").stdout.decode().strip()
            assert inside == path
        proc = webfs("url", "http://example.com/nothing", m.mnt / "long", check=False)
        assert proc.returncode == 1 and b"TARGET is one collection" in proc.stderr
        out = tmp_path / "out.warc"
        assert b"(100%) byte-identical" in webfs("export-warc", m.mnt / "long", out).stdout
        rebuilt = tmp_path / "rebuilt.warc"
        subprocess.run(["sh", str(REPO / "tools" / "webfs-warc-rebuild"), str(m.mnt / "long"), "long.warc",
                        str(rebuilt)], check=True, capture_output=True, env={"PATH": "/usr/bin:/bin"})
        assert rebuilt.read_bytes() == src.read_bytes()
    finally:
        m.umount()


def test_any_spelling_and_date_through_a_mount(tmp_path):
    """As an archivist types them, through a mount (MountTree lists the
    directories): the scheme swapped, :80 added, the host upper-cased, the
    trailing slash added or dropped, www. added or dropped all find the
    capture, and the spelling chosen is said; --at with a zone and a fraction
    is read, a month 13 is one line (exit 2); a collection given as TARGET is
    said when nothing is found."""
    from t2_warc import _one
    from webfs import urlpath
    src = tmp_path / "a.warc"
    src.write_bytes(_one(b"http://www.iana.org/", b"home", date=b"2014-01-27T00:00:00Z")
                    + _one(b"http://www.iana.org/", b"later", date=b"2014-01-27T10:00:00Z")
                    + _one(b"http://example.org/a/", b"a"))
    m = Mounted(tmp_path, disks=3)
    try:
        webfs("import-warc", src, m.mnt)
        home = m.mnt / "a" / "http" / "www.iana.org"
        for spelling in ("https://www.iana.org/", "http://IANA.org:80/", "http://iana.org", "http://www.iana.org"):
            proc = webfs("url", "--at", "2014-01-27T04:59:59+05:00", spelling, m.mnt)
            assert proc.stdout.decode().strip() == str(home / "@20140127000000"), spelling
            assert (f"no capture of {spelling} as written; chose the spelling http://www.iana.org/"
                    in proc.stderr.decode()), spelling
        at = webfs("url", "--at", "2014-01-27T05:00:00.5Z", "http://www.iana.org/", m.mnt)
        assert at.stdout.decode().strip() == str(home / "@20140127100000") and not at.stderr
        for spelling in ("http://example.org/a", "http://www.example.org/a/", "HTTP://EXAMPLE.ORG:80/a"):
            proc = webfs("url", spelling, m.mnt / "a")
            want = m.mnt / "a" / urlpath.capture_path("http://example.org/a/", "20240101120000")
            assert proc.stdout.decode().strip() == str(want), spelling
        bad = webfs("url", "--at", "2014-13", "http://www.iana.org/", m.mnt, check=False)
        assert bad.returncode == 2 and b"month must be in 1..12" in bad.stderr and b"Traceback" not in bad.stderr
        none = webfs("url", "http://example.org/b", m.mnt / "a", check=False)
        assert none.returncode == 1 and b"TARGET is one collection" in none.stderr
        # a directory of a collection, its @warc/, or one outside any mount is no TARGET (exit 2)
        for target in (m.mnt / "a" / "http", m.mnt / "a" / "@warc", tmp_path):
            bad = webfs("url", "http://www.iana.org/", target, check=False)
            assert bad.returncode == 2 and b"TARGET is a mount point" in bad.stderr, (target, bad.stderr)
        assert b"inside a collection" in webfs("versions", "http://iana.org/", m.mnt / "a" / "http", check=False).stderr
        # a collection imported into a collection's directory is looked up with the others
        webfs("import-warc", "--collection", "nested", src, m.mnt / "a")
        got = webfs("versions", "http://iana.org/", m.mnt).stdout.decode()
        assert got.count("a/nested/http/www.iana.org/@") == 2 and got.count(" a/http/www.iana.org/@") == 2, got
    finally:
        m.umount()
