"""Losing the catalog (or the disk that holds it) loses no file that was closed."""
from __future__ import annotations

import errno
import os
import shutil
import signal

import pytest

from conftest import Mounted, eventually, parity_written, sh, unmount, wait_dead, webfs


def _fill(m: Mounted, src, sync_midway: bool = False) -> None:
    sh(f"cp -a '{src}' '{m.mnt}/site'")
    if sync_midway:             # a MANIFEST now; what follows is only in the JOURNAL
        webfs("sync", m.mnt)
    sh(f"ln '{m.mnt}/site/index.html' '{m.mnt}/hard' && ln -s site/index.html '{m.mnt}/soft'")
    sh(f"mkdir '{m.mnt}/renamed-later' && cp '{m.mnt}/hard' '{m.mnt}/renamed-later/x'")
    sh(f"mv '{m.mnt}/renamed-later' '{m.mnt}/renamed' && rm '{m.mnt}/renamed/x' && echo new > '{m.mnt}/renamed/y'")


def _check(m: Mounted, src) -> None:
    sh(f"diff -r '{src}' '{m.mnt}/site'")
    assert (m.mnt / "hard").read_bytes() == (src / "index.html").read_bytes()
    assert os.readlink(m.mnt / "soft") == "site/index.html"
    assert sorted(os.listdir(m.mnt / "renamed")) == ["y"]
    assert (m.mnt / "renamed" / "y").read_text() == "new\n"


@pytest.fixture
def site(corpus):
    first = sorted((corpus / "crawl-001").iterdir())[0]
    return first


@pytest.mark.parametrize("how,sync_midway", [("catalog file", False), ("whole disk", False),
                                              ("whole disk", True)])
def test_catalog_lost_after_a_kill(tmp_path, site, how, sync_midway):
    m = Mounted(tmp_path)
    try:
        _fill(m, site, sync_midway)
        eventually(lambda: parity_written(m.mnt), "parity written behind", every=0.2)
        pid = m.pid()
        os.kill(pid, signal.SIGKILL)            # no unmount, no MANIFEST: the JOURNAL has it all
        wait_dead(pid)
    finally:
        unmount(m.mnt)
    if how == "whole disk":
        shutil.rmtree(m.disks[0])
    else:
        for f in (m.disks[0] / "meta").glob("catalog.db*"):
            f.unlink()
    proc = webfs("status", m.disks[1], check=False)
    assert proc.returncode == 1 and b"--rebuild-catalog" in proc.stderr
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[1], check=False)
    out = proc.stdout.decode()
    assert "rebuilt the catalog" in out, out
    assert proc.returncode == (4 if how == "whole disk" else 0), out   # blocks of the lost disk stay unavailable
    m.disks_for_mount = m.disks[1]
    webfs("mount", m.disks[1], m.mnt)
    try:
        _check(m, site)
    finally:
        unmount(m.mnt)


def test_catalog_rebuild_without_any_journal_or_manifest_keeps_every_block(tmp_path, site):
    m = Mounted(tmp_path)
    try:
        _fill(m, site)
    finally:
        m.umount()
    for d in m.disks:
        for name in ("MANIFEST.gz", "MANIFEST", "JOURNAL", "catalog.db"):
            p = d / "meta" / name
            if p.exists():
                p.unlink()
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode()
    st = __import__("json").loads(webfs("status", "--json", m.disks[0]).stdout)
    distinct = {p.read_bytes() for p in site.rglob("*") if p.is_file()} | {b"site/index.html", b"new\n"}
    assert st["blocks"] == len(distinct)         # every document kept, none lost


def test_a_file_whose_block_is_gone_everywhere_reads_eio_after_a_rebuild(tmp_path):
    m = Mounted(tmp_path, options="sync")
    try:
        (m.mnt / "doomed.html").write_bytes(b"<html>only copy</html>" * 100)
        (m.mnt / "fine.html").write_bytes(b"<html>kept</html>" * 100)
        disk = int(os.getxattr(m.mnt / "doomed.html", "user.webfs.disk"))
        sig = os.getxattr(m.mnt / "doomed.html", "user.webfs.signature").decode()
    finally:
        m.umount()
    # The block and its stripe's parity are both gone; so is the catalog.
    (m.disks[disk] / "blocks" / sig[:2] / sig[2:4] / sig[4:]).unlink()
    for d in m.disks:
        for p in (d / "parity").rglob("*"):
            if p.is_file():
                p.unlink()
        for p in (d / "meta").glob("catalog.db*"):
            p.unlink()
    proc = webfs("fsck", "--rebuild-catalog", "--repair", m.disks[0], check=False)
    assert "the file is lost" in proc.stdout.decode()
    assert proc.returncode == 4
    webfs("mount", m.disks[0], m.mnt)
    try:
        with pytest.raises(OSError) as exc:
            (m.mnt / "doomed.html").read_bytes()
        assert exc.value.errno == errno.EIO
        assert (m.mnt / "fine.html").read_bytes() == b"<html>kept</html>" * 100
    finally:
        unmount(m.mnt)
