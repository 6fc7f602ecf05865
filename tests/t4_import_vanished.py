"""A file stored before an import, found by its inode and removed (or
renamed over) through a real mount before the import takes its blocks:
import-warc stores the revisit of it as an unresolved revisit (as if its
original were never stored), a tree import reports the hard link to it as a
problem; neither stores an empty file, another file's bytes, or a name for
an inode that has none.

The interleaving is made, not raced: the import runs in the mount's daemon,
whose thread waits at the test point import-before-refs (the ``wait`` form:
it opens a FIFO for reading and reads it to its end) right before it asks
for the blocks. The test's open of the FIFO for writing returns once the
thread waits there; it removes, renames over or moves the file through the
mount (its directory fsynced, so the change is committed), and closes the
FIFO to let the import go on."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import threading

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from conftest import BIN, Mounted, sh, webfs
from t4_export_vanished import removed

ORIG = "http://site.org/orig.html"
AGAIN = "http://site.org/again.html"


class WaitingImport:
    """A webfs import run through a mount whose daemon waits at import-before-refs."""

    def __init__(self, fifo, *args):
        self.proc = subprocess.Popen([str(BIN / "webfs"), *map(str, args)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}"))
        threading.Thread(target=self._free_the_fifo_if_it_ends, args=(fifo,), daemon=True).start()
        self.fifo = os.open(fifo, os.O_WRONLY)      # returns when the daemon's thread opened it: waiting
        if self.proc.poll() is not None:
            os.close(self.fifo)
            raise AssertionError(f"webfs {args[0]} ended before its point: {self.proc.stderr.read().decode()}")

    def _free_the_fifo_if_it_ends(self, fifo) -> None:
        """An import that ends without reaching the point: open the FIFO to read
        (and close it), so the test's open for writing returns and says so."""
        self.proc.wait()
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))

    def go_on(self) -> tuple[int, str, str]:
        os.close(self.fifo)
        out, err = self.proc.communicate()
        return self.proc.returncode, out.decode(), err.decode()


@pytest.fixture
def waiting_mount(tmp_path):
    """(an unmounted archive, a FIFO, and how to mount it with its daemon armed to wait on that FIFO)."""
    m = Mounted(tmp_path, disks=3, mount=False)
    fifo = tmp_path / "point.fifo"
    os.mkfifo(fifo)

    def mount(point="import-before-refs"):
        webfs("mount", m.disks[0], m.mnt, env=dict(os.environ, WEBFS_TEST_KILL_AT=f"{point}:1:wait:{fifo}"))
    yield m, fifo, mount
    m.umount()


def fsck_clean(m) -> None:
    m.umount()
    proc = webfs("fsck", m.disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def capture(mnt, url, date):
    from webfs import urlpath
    return mnt / "c" / urlpath.capture_path(url, date)


# ---------------------------------------------------------------- import-warc: a revisit's original

def _digest(body: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()


def _warc(path, records) -> None:
    http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for kind, url, date, body in records:
            if kind == "response":
                rec = w.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http,
                                           warc_headers_dict={"WARC-Date": date})
            else:
                rec = w.create_revisit_record(url, _digest(body), ORIG, "2024-01-01T12:00:00Z", http_headers=http)
                rec.rec_headers.replace_header("WARC-Date", date)
            w.write_record(rec)


@pytest.mark.parametrize("how", ["rm", "renamed-over", "moved"])
def test_a_revisits_original_gone_before_its_blocks_are_taken(waiting_mount, tmp_path, how):
    m, fifo, mount = waiting_mount
    body = b"<html>the original</html>" + os.urandom(300).hex().encode()
    _warc(tmp_path / "a.warc.gz", [("response", ORIG, "2024-01-01T12:00:00Z", body)])
    _warc(tmp_path / "b.warc.gz", [("revisit", AGAIN, "2024-01-02T12:00:00Z", body)])
    webfs("import-warc", "--collection", "c", tmp_path / "a.warc.gz", f"{m.disks[0]}:/")
    mount()
    orig = capture(m.mnt, ORIG, "2024-01-01T12:00:00Z")
    again = capture(m.mnt, AGAIN, "2024-01-02T12:00:00Z")
    other = m.mnt / "c" / "other"
    other.write_bytes(b"another file's bytes")
    imp = WaitingImport(fifo, "import-warc", "--json", "--collection", "c", tmp_path / "b.warc.gz", m.mnt)
    if how == "rm":
        removed(orig)
    elif how == "renamed-over":
        removed(orig, other)
    else:                   # still named, elsewhere: its inode is what the revisit was given
        removed(m.mnt / "c" / "moved", orig)
    code, out, err = imp.go_on()
    fig = json.loads(out)["figures"]
    if how == "moved":
        assert code == 0 and (fig["revisits_resolved"], fig["revisits_unresolved"]) == (1, 0), err
        assert again.read_bytes() == body
        sh(f"cmp '{again}' '{m.mnt / 'c' / 'moved'}'")
    else:
        # as if its original were never stored: kept with the record's payload, said, counted
        assert code == 4 and (fig["revisits_resolved"], fig["revisits_unresolved"]) == (0, 1), err
        assert "is not here" in err, err
        assert os.getxattr(again, "user.warc.revisit") == b"unresolved"
        assert again.read_bytes() == b""                 # the revisit record's own payload
        if how == "renamed-over":
            assert orig.read_bytes() == b"another file's bytes"
    fsck_clean(m)


# ---------------------------------------------------------------- import: a hard link's first name

@pytest.mark.parametrize("point", ["import-before-refs", "import-after-refs"])
@pytest.mark.parametrize("how", ["rm", "renamed-over", "moved"])
def test_a_hard_links_first_name_gone_before_the_link_is_made(waiting_mount, tmp_path, how, point):
    """Before its blocks are taken, or after (they are given back), before its name is made."""
    m, fifo, mount = waiting_mount
    src = tmp_path / "src"
    src.mkdir()
    body = os.urandom(200_000)
    (src / "a").write_bytes(body)
    webfs("import", src, f"{m.disks[0]}:/dest")
    os.link(src / "a", src / "c")               # a rerun: a is there (skipped), c is a hard link to it
    mount(point)
    a, c = m.mnt / "dest" / "src" / "a", m.mnt / "dest" / "src" / "c"
    other = m.mnt / "dest" / "other"
    other.write_bytes(b"another file's bytes")
    imp = WaitingImport(fifo, "import", src, m.mnt / "dest")
    if how == "rm":
        removed(a)
    elif how == "renamed-over":
        removed(a, other)
    else:
        removed(m.mnt / "dest" / "moved", a)
    code, out, err = imp.go_on()
    if how == "moved":
        assert code == 0 and "1 hard links" in out, out + err
        sh(f"cmp '{c}' '{src / 'a'}'")
        assert os.stat(c).st_ino == os.stat(m.mnt / "dest" / "moved").st_ino and os.stat(c).st_nlink == 2
    else:
        # its first name went: the link not made (no name left without its inode), said; a rerun imports both
        assert sorted(os.listdir(a.parent)) == (["a"] if how == "renamed-over" else []), out + err
        if how == "renamed-over":
            assert a.read_bytes() == b"another file's bytes"
        rerun = webfs("import", src, m.mnt / "dest", check=False)
        assert rerun.returncode == 0, rerun.stdout.decode() + rerun.stderr.decode()
        sh(f"cmp '{c}' '{src / 'a'}'")
        assert os.stat(c).st_ino == os.stat(a).st_ino
        assert code == 4 and "0 hard links" in out and "was removed during the import" in err, out + err
    fsck_clean(m)
