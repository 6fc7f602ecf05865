"""The virtual WARC files a mount shows (webfs.warcview) while the collection
changes under them: a view reads the files, and their blocks, it found when
replay made it, and nothing else."""
from __future__ import annotations

import errno
import json
import os

import pytest

from conftest import Mounted, webfs
from t2_warc import write_warc
from t4_replay import free_port


def _view(m: Mounted, tmp_path) -> tuple:
    """(the view's a.warc, {url: (offset, length)}) once webfs replay made the view of collection c."""
    pw = tmp_path / "pw"
    webfs("replay", "--port", str(free_port()), m.mnt / "c", pw)     # a collection in a mount: it ends at once
    (view,) = os.listdir(m.mnt / ".webfs" / "warc")
    lines = [json.loads(x.split(" ", 2)[2]) for x in (pw / "webfs-cdxj" / "c.cdxj").read_text().splitlines()]
    return m.mnt / ".webfs" / "warc" / view / "a.warc", {x["url"]: (int(x["offset"]), int(x["length"])) for x in lines}


def _record(vfile, where: tuple[int, int]) -> bytes:
    with open(vfile, "rb") as f:
        f.seek(where[0])
        return f.read(where[1])


def _imported(tmp_path, pages: int, options: str = "") -> Mounted:
    m = Mounted(tmp_path, options=options)
    body = [(f"http://example.com/{i}", f"<html>page {i}</html>".encode()) for i in range(pages)]
    webfs("import-warc", "--collection", "c", write_warc(tmp_path / "a.warc.gz", body), m.mnt)
    return m


def test_a_capture_written_since_the_view_was_made_fails_its_record(tmp_path):
    """Another content of the same size (written over it): EIO for its record,
    never bytes its CDXJ line did not index; the other records read as before."""
    m = _imported(tmp_path, 4)
    try:
        vfile, at = _view(m, tmp_path)
        assert b"page 1" in _record(vfile, at["http://example.com/1"])
        capture = m.mnt / "c" / "http" / "example.com" / "1@20240101120000"
        assert len(capture.read_bytes()) == len(b"<html>PAGE 9</html>")
        capture.write_bytes(b"<html>PAGE 9</html>")
        with pytest.raises(OSError) as changed:
            _record(vfile, at["http://example.com/1"])
        assert changed.value.errno == errno.EIO
        assert b"page 2" in _record(vfile, at["http://example.com/2"])
    finally:
        m.umount()


def test_a_view_reads_its_records_after_their_blocks_moved(tmp_path):
    """The blocks a view keeps moved to other disks (remove-disk; rebalance and
    cooling move them as well): every record still reads, from its new disk
    (no piece cache: each read goes to the disks)."""
    m = _imported(tmp_path, 30, options="piece_cache=0")
    try:
        vfile, at = _view(m, tmp_path)
        before = {url: _record(vfile, where) for url, where in at.items()}
        assert all(f"page {url.rsplit('/', 1)[1]}<".encode() in rec for url, rec in before.items())
        moved = json.loads(webfs("remove-disk", "1", m.mnt, "--json").stdout)["figures"]
        assert moved["blocks_left"] == 0 and not any(p.is_file() for p in (m.disks[1] / "blocks").rglob("*"))
        assert {url: _record(vfile, where) for url, where in at.items()} == before
    finally:
        m.umount()
