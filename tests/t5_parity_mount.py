"""Declustered parity seen through a mount: a disk removed while mounted, bit rot,
two lost disks; shell tools read on, webfs rebuild and scrub mend it online."""
from __future__ import annotations

import errno
import json
import random
import shutil

import pytest

from conftest import Mounted, eventually, sh, webfs
from records_helpers import read_manifest


def _flip(path, offset):
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x5A
    path.write_bytes(bytes(raw))


def _site(corpus):
    return sorted((corpus / "crawl-001").iterdir())[1]


def _mount_with_site(tmp_path, src, disks: int, group: int) -> Mounted:
    """An archive of `disks` disks and parity groups of `group`, mounted, with one
    site copied in and synced (parity on the disks)."""
    m = Mounted(tmp_path, disks=disks, mkfs_args=("--group-size", str(group)))
    try:
        sh(f"cp -a '{src}' '{m.mnt}/site'")
        webfs("sync", m.mnt)
    except BaseException:
        m.umount()
        raise
    return m


@pytest.mark.parametrize("disks,group,index", [(4, 4, 2), (5, 3, 1)])
def test_a_disk_removed_while_mounted_is_read_through_and_rebuilt_online(tmp_path, corpus, disks, group, index):
    """Disk 1 is a record disk: rebuilt online, it gets the MANIFEST and
    JOURNAL back from the mount's checkpoint, not at the next mount."""
    src = _site(corpus)
    m = _mount_with_site(tmp_path, src, disks, group)
    try:
        lost = m.disks[index]
        before = tmp_path / "before"
        shutil.copytree(lost / "blocks", before)
        shutil.rmtree(lost)                                   # the disk dies under the mount
        sh(f"diff -r '{src}' '{m.mnt}/site'")                 # every file reads back identical
        (m.mnt / "after.html").write_bytes(b"<html>written while a disk is gone</html>" * 50)
        assert (m.mnt / "after.html").read_bytes() == b"<html>written while a disk is gone</html>" * 50
        st = json.loads(webfs("status", "--json", m.mnt).stdout)
        assert [d["state"] for d in st["disks"]][index] == "missing"
        new = tmp_path / "replacement"
        proc = webfs("rebuild", "--disk", str(index), "--to", new, m.mnt, check=False)
        assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
        sh(f"diff -r '{src}' '{m.mnt}/site'")
        if index == 1:
            assert b"MANIFEST and JOURNAL are being written on the record disks (0, 1)" in proc.stdout
            eventually(lambda: (new / "meta" / "RECORDS").exists() and
                       (new / "meta" / "RECORDS").read_text().splitlines()[-1] == "Disks: 0 1", "records on it")
            assert b"/site/" in read_manifest(new / "meta")
    finally:
        m.umount()
    # The rebuilt disk's blocks are byte for byte the lost ones.
    for p in before.rglob("*"):
        if p.is_file():
            rebuilt = new / "blocks" / p.relative_to(before)
            assert rebuilt.read_bytes() == p.read_bytes(), p
    proc = webfs("fsck", m.disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode()


def test_bit_rot_reads_right_and_scrub_repairs_it_online(tmp_path, corpus):
    src = _site(corpus)
    m = _mount_with_site(tmp_path, src, 5, 3)
    try:
        rnd = random.Random(3)
        blocks = sorted(p for d in m.disks for p in (d / "blocks").rglob("*") if p.is_file())
        parities = sorted(p for d in m.disks for p in (d / "parity").rglob("*") if p.is_file())
        heads = {p: p.read_bytes()[:4096] for p in parities}

        def sig_of(block):
            return "".join(block.relative_to(block.parents[2]).parts).split("~")[0].encode()
        # Three blocks of three different stripes, and the parity of a fourth:
        # two damaged members of one stripe are a real loss, not a repair.
        damaged, used = [], set()
        for b in rnd.sample(blocks, len(blocks)):
            stripes = [p for p in parities if sig_of(b) in heads[p]]
            if len(stripes) == 1 and stripes[0] not in used:
                damaged.append(b)
                used.add(stripes[0])
                if len(damaged) == 3:
                    break
        assert len(damaged) == 3, "fewer than three stripes to damage"
        for p in damaged:
            _flip(p, rnd.randrange(512 + 10, p.stat().st_size))
        parity = next(p for p in parities if p not in used)
        _flip(parity, parity.stat().st_size - 1)
        sh("sync; echo 3 > /proc/sys/vm/drop_caches")
        sh(f"diff -r '{src}' '{m.mnt}/site'")                 # damage never reaches a reader
        proc = webfs("scrub", "--repair", m.mnt, check=False)
        out = proc.stdout.decode()
        assert proc.returncode == 0 and "4 repaired, 0 left" in out, out
        proc = webfs("scrub", m.mnt, check=False)
        assert proc.returncode == 0 and "0 problem(s)" in proc.stdout.decode(), proc.stdout.decode()
    finally:
        m.umount()
    assert webfs("fsck", m.disks[0]).returncode == 0


def test_two_lost_disks_give_eio_never_wrong_bytes(tmp_path, corpus):
    src = _site(corpus)
    m = _mount_with_site(tmp_path, src, 4, 4)
    try:
        shutil.rmtree(m.disks[1])
        shutil.rmtree(m.disks[3])
        sh("sync; echo 3 > /proc/sys/vm/drop_caches")
        good = bad = 0
        for p in src.rglob("*"):
            if not p.is_file():
                continue
            try:
                data = (m.mnt / "site" / p.relative_to(src)).read_bytes()
            except OSError as exc:
                assert exc.errno == errno.EIO
                bad += 1
                continue
            assert data == p.read_bytes()
            good += 1
        assert bad and good
        st = webfs("status", m.mnt).stdout.decode()
        assert "LOST" in st
    finally:
        m.umount()
