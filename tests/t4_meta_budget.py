"""Budgets of issue 10, item 8: meta/ bytes per file at rest, the JOURNAL's
size bound, the two copies of the plain-text records (the daemon's RSS
staying flat while files are copied in, a soak: t5_rss)."""
from __future__ import annotations

import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, Mounted

from webfs.catalog import CATALOG_FILE
from webfs.index import INDEX_FILE
from webfs.manifest import JOURNAL, MANIFEST, MANIFEST_GZ, RECORDS, plain_size

AIM_AT_REST = 400           # bytes of meta/ per file, catalog and records on every disk (issue 25)
NOW_AT_REST = 425           # what this code keeps to (411 B by cp -r of the 3,000 pages): no regression
CATALOG_AT_REST = 345       # of which catalog.db (330 B: schema 5, packed at the unmount)


def make_corpus(out: Path, pages: int) -> int:
    subprocess.run([sys.executable, str(REPO / "tools" / "make-corpus"), "--pages", str(pages),
                    "--crawls", "1", "--images-per-page", "0", str(out)], check=True,
                   capture_output=True)
    return sum(len(files) for _, _, files in os.walk(out))


def meta_bytes(disks: list[Path]) -> int:
    """The catalog and the plain-text records: not the query index kept beside
    them by default (derived data, its size measured by the bench's query section)."""
    return sum(p.stat().st_size for d in disks for p in (d / "meta").iterdir()
               if p.is_file() and not p.name.startswith(INDEX_FILE))


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def plain_bytes(disk: Path) -> int:
    """The plain bytes of the disk's MANIFEST.gz (0 when there is none yet)."""
    try:
        return plain_size(str(disk), MANIFEST_GZ)
    except (FileNotFoundError, OSError):
        return 0


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    """3,000 pages copied into a 4-disk mount with a 64 KiB JOURNAL bound,
    the JOURNAL's size sampled all along; then unmounted."""
    root = tmp_path_factory.mktemp("budget")
    files = make_corpus(root / "corpus", 3000)
    limit = 64 << 10
    (root / "archive").mkdir()
    m = Mounted(root / "archive", options=f"journal_limit={limit}")
    over, samples, done = [], [0], threading.Event()

    def sample():
        while not done.is_set():
            bound = 2 * max(limit, plain_bytes(m.disks[0]) // 2)
            for d in m.disks:
                j = size(d / JOURNAL)
                if j > bound:
                    over.append((d.name, j, bound))
            samples[0] += 1
            time.sleep(0.01)
    t = threading.Thread(target=sample)
    t.start()
    try:
        subprocess.run(["cp", "-r", str(root / "corpus"), str(m.mnt / "c")], check=True)
    finally:
        done.set()
        t.join()
        m.umount()
    return m, files, over, samples[0]


def test_journal_stays_within_its_size_bound(copied):
    m, files, over, samples = copied
    assert samples > 10
    # The bound is the larger of journal_limit and half the MANIFEST; a
    # checkpoint starts when it is passed, and what comes while it runs may
    # take the JOURNAL past it, not to twice it.
    assert not over, over[:5]


def test_records_are_on_two_disks_named_in_records(copied):
    m, files, _, _ = copied
    have = [d for d in m.disks if (d / MANIFEST_GZ).exists()]
    assert have == m.disks[:2], have                 # the catalog disk and the next one
    assert len({(d / MANIFEST_GZ).read_bytes() for d in have}) == 1
    assert not [d for d in m.disks if (d / MANIFEST).exists()]      # no plain form left
    assert not [d for d in m.disks if (d / JOURNAL).exists() and d not in have]
    for d in m.disks:
        assert (d / RECORDS).read_bytes().endswith(b"\nDisks: 0 1\n")


def test_meta_per_file_at_rest(copied):
    m, files, _, _ = copied
    per_file = meta_bytes(m.disks) / files
    catalog = (m.disks[0] / CATALOG_FILE).stat().st_size / files
    print(f"meta/ {per_file:.0f} B per file, catalog.db {catalog:.0f}")
    assert per_file <= NOW_AT_REST, per_file
    assert catalog <= CATALOG_AT_REST, catalog


def test_the_catalog_is_packed_at_rest(copied, tmp_path):
    """The unmount packs the catalog (webfs.catalogfile.pack_at_rest): the
    file is as small as a VACUUM makes it (before, the pages the copy's
    inserts split left it about 6 % larger)."""
    m, _, _, _ = copied
    catalog = m.disks[0] / CATALOG_FILE
    db = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)
    try:
        db.execute("VACUUM INTO ?", (str(tmp_path / "vacuumed.db"),))
    finally:
        db.close()
    packed, vacuumed = catalog.stat().st_size, (tmp_path / "vacuumed.db").stat().st_size
    print(f"catalog.db at rest {packed} B, vacuumed {vacuumed} B")
    assert packed <= vacuumed + 2 * 4096


@pytest.mark.xfail(strict=True, reason="at 3,000 pages the catalog holds ~330 B per file (fixed costs "
                   "weigh more than at 100,000); with two ~40 B MANIFEST.gz, ~411 B")
def test_meta_per_file_at_rest_meets_the_aim(copied):
    m, files, _, _ = copied
    assert meta_bytes(m.disks) / files <= AIM_AT_REST


def test_records_written_on_every_disk_move_to_two(tmp_path):
    """Disks written before (a plain MANIFEST and a JOURNAL on every disk)
    mount, and the first checkpoint leaves the records on two disks, gzip'd;
    a disk that holds an older copy keeps none after it."""
    m = Mounted(tmp_path)
    (m.mnt / "f").write_bytes(b"x" * 100)
    m.umount()
    plain = gzip.decompress((m.disks[0] / MANIFEST_GZ).read_bytes())
    for d in m.disks:
        (d / MANIFEST).write_bytes(plain)
        (d / MANIFEST_GZ).unlink(missing_ok=True)
        if d in m.disks[2:]:
            shutil.copy2(m.disks[0] / JOURNAL, d / JOURNAL)
            (d / RECORDS).unlink()
    m.mount()
    try:
        assert sorted(os.listdir(m.mnt)) == ["f"]
        (m.mnt / "g").write_bytes(b"y" * 100)
        assert not (m.disks[3] / MANIFEST).exists()
        assert b"\t/g\n" in (m.disks[1] / JOURNAL).read_bytes()
    finally:
        m.umount()
    assert [d for d in m.disks if (d / MANIFEST_GZ).exists()] == m.disks[:2]
    assert not [d for d in m.disks if (d / MANIFEST).exists()]
    assert b"\t/g\n" in gzip.decompress((m.disks[1] / MANIFEST_GZ).read_bytes())
