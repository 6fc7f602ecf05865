"""Declustered parity: the parity file format, degraded reads, rebuild, scrub,
crash recovery, the layout's balance and overhead, and a model of random
store/release sequences.

The helpers at the top (``fill``, ``lose``, ``assert_parity_consistent``,
``flip``, ``tree``) take plain paths and a Store, so mount-level tests can
reuse them.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from conftest import cases, examples, make_archive, webfs_here
from records_helpers import read_manifest
from webfs.figures import archive_figures
from webfs.assembly import open_archive
from webfs import admin
from webfs.admincommands import ADMIN_COMMANDS
from webfs.assembly import OpenArchive
from webfs.backends.local import TMP_SUFFIX
from webfs.catalog import BlockRow
from webfs.cli import protection_lines
from webfs.errors import ArchiveError, CorruptParity, DataLost, NoSpace
from webfs.parity import (Member, Parity, ParityHeader, size_class, xor_payloads)
from webfs.commands.rebuild_disk import MAX_THREADS, Pace, measure
from webfs.signature import ContentKey, signature
from webfs.store import Piece, Store, key_of

WORDS = [w * k for w in ("web", "page", "archive", "link", "html", "crawl", "text") for k in (1, 2)]


# -- helpers (reusable) ------------------------------------------------------

def documents(n: int, seed: int = 0, median: float = 9.0, sigma: float = 1.0) -> list[bytes]:
    """Distinct documents of log-normal sizes: text pages (compressible) and
    'images' (random bytes, stored as they are)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        size = max(1, min(int(rnd.lognormvariate(median, sigma)), 400_000))
        if rnd.random() < 0.4:
            body = rnd.randbytes(size)
        else:
            body = " ".join(rnd.choice(WORDS) for _ in range(size // 5 + 1)).encode()[:size]
        out.append(f"<!-- {seed}/{i} -->".encode() + body)
    return out


def fill(store: Store, docs: list[bytes], commit_every: int = 7) -> list[tuple[BlockRow, bytes]]:
    """Store documents (pinned, as 'webfs put' does); return (row, document)."""
    stored = []
    for i, doc in enumerate(docs):
        stored.append((store.store(doc, name=f"/crawl/doc-{i}.html".encode(), pin=True), doc))
        if i % commit_every == 0:
            store.commit()
    store.commit()
    store.protection.flush()        # parity of open stripes is written behind; put it on the disks
    return stored


def lose(disk: Path, keep: Path) -> Path:
    """Take a disk away (as a dead drive would), keeping a copy outside the
    archive's directory (a sibling would be found and used as the disk)."""
    copy = keep / disk.name
    shutil.copytree(disk, copy)
    shutil.rmtree(disk)
    return copy


def tree(root: Path, sub: str) -> dict[str, bytes]:
    """Relative path -> bytes of every file under root/sub."""
    base = root / sub
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def flip(path: Path, offset: int) -> None:
    """Bit rot: invert one byte of a file, counted from the end if negative."""
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def block_file(disks: list[Path], row: BlockRow) -> Path:
    vol_path = Path(str(disks[row.disk]))
    return vol_path / "blocks" / row.sig[:2] / row.sig[2:4] / (row.sig[4:] + (f"~{row.overflow}" if row.overflow else ""))


def parity_file(disks: list[Path], stripe_id: str, parity_disk: int) -> Path:
    return disks[parity_disk] / "parity" / stripe_id[:2] / stripe_id[2:4] / stripe_id[4:]


def assert_parity_consistent(store: Store) -> None:
    """Every stripe: members on distinct disks, parity on none of them, its
    header lists exactly the catalog's members with their blocks' name hints,
    its payload is their XOR, and
    the catalog's counters agree; no parity file without a stripe."""
    parity = store.protection
    assert isinstance(parity, Parity)
    ids = set(parity.stripe_ids())
    for stripe_id in ids:
        stripe = parity.stripe(stripe_id)
        rows = parity.members(stripe_id)
        assert rows, f"stripe {stripe_id} has no member"
        disks = [r.disk for r in rows]
        assert len(set(disks)) == len(disks) and stripe.parity_disk not in disks
        assert len(rows) <= parity.width
        assert stripe.state == "ok" and stripe.members == len(rows)
        assert stripe.disks == sum(1 << d for d in disks) | 1 << stripe.parity_disk
        header, payload = parity.read_parity(stripe_id, stripe.parity_disk)
        assert set(header.members) == {Member.of(r) for r in rows}
        assert header.length == stripe.length == max(r.stored for r in rows)
        blocks = [store.archive.volumes[r.disk].read_block(r.sig, r.overflow) for r in rows]
        assert payload == xor_payloads([p for _, p in blocks], header.length)
        # Name hints as the blocks' headers have them (the catalog keeps none).
        assert {m.key: m.name for m in header.members} == \
            {(r.sig, r.overflow): h.name for r, (h, _) in zip(rows, blocks)}
    for vol in store.archive.volumes.values():
        for rel in vol.backend.list("parity"):
            if rel.endswith(TMP_SUFFIX):
                continue                # a killed write's leftover: fsck's to remove
            sig = rel.removeprefix("parity/").replace("/", "")
            assert sig in ids and parity.stripe(sig).parity_disk == vol.index, rel


def assert_kept_after_close(store: Store, stored, disk: Path) -> None:
    """Committed, every (row, document) read back, closed, and fsck finds nothing."""
    store.commit()
    for row, doc in stored:
        assert store.read(row) == doc
    store.close()
    assert webfs_here("fsck", disk).returncode == 0


def open_store(disks: list[Path], **kwargs) -> Store:
    return open_archive(str(disks[0]), holder="test", **kwargs)


# -- the format --------------------------------------------------------------

def test_parity_header_round_trip_and_layout():
    members = (Member("a" * 32, 0, 1, 100, 400, "gzip", "2026-01-01T00:00:00Z", "/x/index.html"),
               Member("b" * 32, 2, 3, 90, 90, "identity", "2026-01-01T00:00:00Z", ""))
    raw = ParityHeader("c" * 32, 100, members).encode()
    assert len(raw) == 512 and raw.endswith(b"\n")
    text = raw.decode()
    assert text.startswith("WEBFS-PARITY 1\nHeader-Bytes: 512\nStripe: " + "c" * 32 + "\nLength: 100\n")
    assert "Member: " + "b" * 32 + "~2 3 90 90 identity 2026-01-01T00:00:00Z\n" in text
    header, n = ParityHeader.parse(raw + b"\0" * 100, "here")
    assert n == 512 and header == ParityHeader("c" * 32, 100, members)


def test_a_long_header_takes_more_sectors():
    members = tuple(Member(f"{i:032x}", 0, i, 10, 10, "identity", "2026-01-01T00:00:00Z", "%2F" * 300)
                    for i in range(4))
    raw = ParityHeader("d" * 32, 10, members).encode()
    assert len(raw) % 512 == 0 and len(raw) > 512
    assert f"Header-Bytes: {len(raw)}\n".encode() in raw[:64]
    assert ParityHeader.parse(raw + b"x" * 10, "here")[0].members == members


@pytest.mark.parametrize("raw, why", [
    (b"WEBFS-BLOCK 1\n" + b" " * 498, "not a webfs parity file"),
    (b"WEBFS-PARITY 1\nHeader-Bytes: 500\n" + b" " * 477 + b"\n", "bad Header-Bytes"),
    (b"WEBFS-PARITY 1\nHeader-Bytes: 512\nLength: 3\n".ljust(511) + b"\n", "lacks a Stripe"),
    (b"WEBFS-PARITY 1\nHeader-Bytes: 512\nStripe: x\nLength: 9\nMember: zz 1 2\n".ljust(511) + b"\n",
     "bad Member line"),
])
def test_a_damaged_header_is_corrupt_parity(raw, why):
    with pytest.raises(CorruptParity, match=why):
        ParityHeader.parse(raw, "disk 1: parity/x")


def test_xor_and_size_classes():
    assert xor_payloads([b"\x01\x02", b"\x03"], 3) == b"\x02\x02\x00"
    assert xor_payloads([b"abc", b"abc"], 3) == b"\0\0\0"
    # Classes are quarter octaves: members of one class differ by less than 25 %.
    for n in (5, 100, 4097, 10 ** 6):
        same = [m for m in range(n // 2, n * 2) if size_class(m) == size_class(n)]
        assert max(same) < 1.25 * min(same)
    assert size_class(1) < size_class(1000) < size_class(2000)


# -- losing a disk, rebuilding it ----------------------------------------------

@pytest.mark.parametrize("c, g", cases([(4, 4), (5, 3), (6, 6), (7, 4), (8, 4), (8, 8)]))
def test_a_lost_disk_reads_through_parity_and_rebuilds_byte_identical(tmp_path, c, g):
    disks = make_archive(tmp_path / "a", disks=c, group_size=g)
    store = open_store(disks)
    stored = fill(store, documents(60 * c, seed=c * 10 + g))
    assert_parity_consistent(store)
    store.close()
    victim = disks[c // 2]
    before_blocks, before_parity = tree(victim, "blocks"), tree(victim, "parity")
    assert before_blocks and before_parity
    lose(victim, tmp_path)

    store = open_store(disks)
    assert list(store.archive.missing) == [c // 2]
    for row, doc in stored:
        assert store.read(row) == doc
    st = archive_figures(store)["protection"]
    assert st["missing_disks"] == [c // 2] and st["lost_count"] == 0
    assert st["degraded_count"] == len(before_blocks)
    store.close()
    on_victim = [(r, d) for r, d in stored if r.disk == c // 2]
    for row, doc in on_victim[:2]:
        assert webfs_here("get", disks[0], key_of(row)).stdout == doc

    out = webfs_here("rebuild", "--disk", c // 2, "--to", tmp_path / "new", disks[0]).stdout.decode()
    assert f"{len(before_blocks)} block(s) rebuilt" in out and "0 lost" in out
    assert tree(tmp_path / "new", "blocks") == before_blocks
    assert tree(tmp_path / "new", "parity") == before_parity
    assert not (tmp_path / "new" / "meta" / "REBUILDING").exists()
    for d in disks:
        if d != victim:
            assert f"path = {tmp_path / 'new'}" in (d / "webfs.conf").read_text()
    assert webfs_here("fsck", disks[0]).returncode == 0
    assert webfs_here("scrub", disks[0]).returncode == 0
    store = open_store(disks)
    assert not store.archive.missing
    assert_parity_consistent(store)
    store.close()


def test_a_rebuilt_record_disk_gets_the_manifest_and_journal_back(tmp_path):
    """The records (MANIFEST, JOURNAL: every name) are on two disks so that
    losing one leaves a copy (webfs-format(5), RECORDS); a record disk
    rebuilt had none until the next mount, so a second loss in between lost
    every name. The rebuild now writes them there."""
    disks = make_archive(tmp_path / "a", disks=4)
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for i in range(30):
        (src / "d" / f"page-{i}.html").write_bytes(b"<p>%d</p>" % i * (i + 1))
    webfs_here("import", f"{src}/", f"{disks[0]}:/crawl/")
    assert (disks[1] / "meta" / "RECORDS").read_text().splitlines()[-1] == "Disks: 0 1"
    lose(disks[1], tmp_path)
    new = tmp_path / "new"
    out = webfs_here("rebuild", "--disk", 1, "--to", new, disks[0]).stdout.decode()
    assert "MANIFEST and JOURNAL written on the record disks (0, 1)" in out, out
    assert (new / "meta" / "JOURNAL").exists()
    names = read_manifest(new / "meta")
    assert all(b"/crawl/d/page-%d.html" % i in names for i in range(30))
    for d in (disks[0], new, disks[2], disks[3]):
        assert (d / "meta" / "RECORDS").read_text().splitlines()[-1] == "Disks: 0 1", d
    # Nothing more to write when the records are where they belong.
    out = webfs_here("rebuild", "--disk", 1, "--to", new, disks[0]).stdout.decode()
    assert "MANIFEST" not in out, out
    assert webfs_here("fsck", disks[0]).returncode == 0


def test_writes_while_a_disk_is_missing_get_parity_on_the_survivors(tmp_path):
    disks = make_archive(tmp_path / "a", disks=5, group_size=3)
    lose(disks[3], tmp_path)
    store = open_store(disks)
    stored = fill(store, documents(150, seed=3))
    for row, doc in stored:
        fresh = store.catalog.block_by_id(row.id)
        assert fresh.disk != 3 and fresh.stripe is not None
        assert store.protection.stripe(fresh.stripe).parity_disk != 3
    assert_parity_consistent(store)
    assert archive_figures(store)["protection"]["unprotected_blocks"] == 0
    store.close()


def test_rebuild_resumes_after_an_interruption_and_can_be_paced(tmp_path):
    disks = make_archive(tmp_path / "a", disks=5, group_size=4)
    store = open_store(disks)
    fill(store, documents(500, seed=5, median=7.0))
    store.close()
    before = tree(disks[1], "blocks"), tree(disks[1], "parity")
    lose(disks[1], tmp_path)
    new = tmp_path / "new"

    store = open_store(disks)
    steps = []

    # Stopped by the progress hook, not by time: after 10 steps, with at most
    # 2 x MAX_THREADS blocks in flight, the blocks of disk 1 (about 100) are
    # not all done whatever the load of the machine.
    assert len(before[0]) > 10 + 2 * MAX_THREADS

    def stop_early(kind, n, total, what):
        if kind == "advance":
            steps.append(n)
            if len(steps) == 10:
                progress.stop_requested.set()
    progress = admin.Progress(stop_early)
    result = ADMIN_COMMANDS["rebuild"](OpenArchive(store), progress, disk=1, to=str(new))
    store.close()
    assert result.exit_code == 4 and result.figures["interrupted"]
    assert (new / "meta" / "REBUILDING").exists()
    assert "rebuild not finished" in webfs_here("status", disks[0]).stdout.decode()
    assert 0 < len(tree(new, "blocks")) < len(before[0])

    # Into another directory: refused, disk 1 is at 'new' now.
    proc = webfs_here("rebuild", "--disk", 1, "--to", tmp_path / "other", disks[0], check=False)
    assert proc.returncode == 1 and b"is present at" in proc.stderr
    out = json.loads(webfs_here("rebuild", "--disk", 1, "--to", new, "--json", disks[0]).stdout)
    # What the first run wrote is kept (blocks in flight when it stopped included).
    assert out["exit_code"] == 0 and out["figures"]["blocks_present"] == result.figures["blocks_rebuilt"] >= 10
    assert (tree(new, "blocks"), tree(new, "parity")) == before
    assert not (new / "meta" / "REBUILDING").exists()

    pace = Pace(2.0)            # 2 MB/s: 300 kB takes 0.15 s
    t = time.monotonic()
    pace.wrote(300_000)
    assert time.monotonic() - t >= 0.12


def test_rebuild_refuses_a_foreign_directory_and_a_present_disk(tmp_path):
    disks = make_archive(tmp_path / "a", disks=3)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "precious").write_text("mine")
    lose(disks[2], tmp_path)
    proc = webfs_here("rebuild", "--disk", 2, "--to", junk, disks[0], check=False)
    assert proc.returncode == 1 and b"not empty, and not disk 2" in proc.stderr
    proc = webfs_here("rebuild", "--disk", 1, "--to", tmp_path / "x", disks[0], check=False)
    assert proc.returncode == 1 and b"disk 1 is present" in proc.stderr
    assert (junk / "precious").read_text() == "mine"


def test_rebuild_reads_spread_over_the_survivors(tmp_path):
    """The benchmark's measurement, small: with G < C every survivor reads
    about (G-1)/(C-1) of what is rebuilt, and none much more than another."""
    disks = make_archive(tmp_path / "a", disks=7, group_size=4)
    store = open_store(disks)
    fill(store, documents(700, seed=11, sigma=0.3))
    store.close()
    lose(disks[4], tmp_path)
    figures = measure(str(disks[0]), 4, str(tmp_path / "new"))
    shares = figures["read_share_per_disk"]
    assert sorted(shares) == ["0", "1", "2", "3", "5", "6"]
    assert figures["predicted_share"] == pytest.approx(0.5)
    assert max(shares.values()) < 1.0                     # G = C would read everything
    # 1.2-1.3 on a quiet machine; reads go where a queue is shortest, so a busy
    # one skews them (1.66 seen at load 20): no survivor reads twice another's.
    assert max(shares.values()) / min(shares.values()) < 2.0
    assert figures["mb_per_s"] > 0 and not figures["lost"]


def test_the_catalog_disk_missing_is_said_clearly(tmp_path):
    disks = make_archive(tmp_path / "a", disks=3)
    lose(disks[0], tmp_path)
    with pytest.raises(ArchiveError, match="holds the catalog"):
        open_store([disks[1]])
    proc = webfs_here("fsck", disks[1], check=False)
    assert proc.returncode != 0 and b"holds the catalog" in proc.stderr


# -- bit rot, scrub --------------------------------------------------------------

def test_scrub_checks_stripes_at_once_and_keeps_to_max_rate(tmp_path):
    disks = make_archive(tmp_path / "a", disks=5, group_size=4)
    store = open_store(disks)
    try:
        fill(store, documents(120, seed=9))
        free = ADMIN_COMMANDS["scrub"](OpenArchive(store), admin.Progress()).figures
        assert free["problems"] == 0 and free["stripes"] == len(store.protection.stripe_ids())
        rate = free["bytes_read"] / 1e6 / 0.5            # MB/s: half a second for all of it
        paced = ADMIN_COMMANDS["scrub"](OpenArchive(store), admin.Progress(), max_rate=rate).figures
        assert paced["problems"] == 0 and paced["blocks"] == free["blocks"]
        assert paced["seconds"] >= 0.4
    finally:
        store.close()


def test_scrub_finds_and_repairs_bit_rot_in_blocks_and_parity(tmp_path):
    disks = make_archive(tmp_path / "a", disks=6, group_size=4)
    store = open_store(disks)
    stored = fill(store, documents(240, seed=7))
    parity = store.protection
    rnd = random.Random(1)
    # One damaged block in each of 8 stripes, and another stripe's parity file.
    by_stripe = {}
    for row, doc in stored:
        by_stripe.setdefault(store.catalog.block_by_id(row.id).stripe, []).append((row, doc))
    stripes = rnd.sample(sorted(by_stripe), 9)
    rotten = [rnd.choice(by_stripe[s]) for s in stripes[:8]]
    for row, _ in rotten:
        path = block_file(disks, row)
        flip(path, rnd.randrange(512 + 10, path.stat().st_size))    # not gzip's unchecked MTIME/OS
    bad_parity = parity.stripe(stripes[8])
    flip(parity_file(disks, bad_parity.id, bad_parity.parity_disk), -1)
    for row, doc in stored:
        assert store.read(row) == doc
    assert sorted(archive_figures(store)["damaged"]) == sorted(str(ContentKey(r.sig, r.overflow)) for r, _ in rotten)
    store.close()

    proc = webfs_here("scrub", disks[0], check=False)
    out = proc.stdout.decode()
    assert proc.returncode == 4 and out.count("corrupt:") == 8 and out.count("parity:") == 1, out
    assert "9 problem(s), 0 repaired, 9 left" in out
    assert "9 problem(s), 9 left" in webfs_here("status", disks[0]).stdout.decode()
    proc = webfs_here("scrub", "--repair", disks[0], check=False)
    out = proc.stdout.decode()
    assert proc.returncode == 0 and "9 repaired, 0 left" in out, out
    proc = webfs_here("scrub", "--json", disks[0], check=False)
    assert proc.returncode == 0 and json.loads(proc.stdout)["figures"]["problems"] == 0
    store = open_store(disks)
    assert_parity_consistent(store)
    for row, _ in rotten:
        raw = block_file(disks, row).read_bytes()
        assert raw[:512] == store.archive.volumes[row.disk].read_header(row.sig).encode()
    store.close()


def test_damage_that_parity_cannot_mend_is_reported_never_returned(tmp_path):
    disks = make_archive(tmp_path / "a", disks=4, group_size=4)
    store = open_store(disks)
    stored = fill(store, documents(80, seed=8))
    row, doc = stored[10]
    row = store.catalog.block_by_id(row.id)
    stripe = store.protection.stripe(row.stripe)
    flip(block_file(disks, row), -3)
    header, _ = store.protection.read_parity(stripe.id, stripe.parity_disk)
    flip(parity_file(disks, stripe.id, stripe.parity_disk), -(header.length - row.stored) - 3)
    with pytest.raises(DataLost, match=f"block {row.sig} on disk {row.disk} is damaged"):
        store.read(row)
    store.close()
    proc = webfs_here("scrub", "--repair", disks[0], check=False)
    assert proc.returncode == 4 and "NOT repaired" in proc.stdout.decode()
    proc = webfs_here("get", disks[0], key_of(row), check=False)
    assert proc.returncode == 1 and proc.stdout == b"" and row.sig.encode() in proc.stderr


# -- two lost disks ------------------------------------------------------------------

def test_two_lost_disks_in_one_stripe_lose_only_their_blocks(tmp_path):
    disks = make_archive(tmp_path / "a", disks=5, group_size=5)
    store = open_store(disks)
    stored = fill(store, documents(150, seed=9))
    store.close()
    lose(disks[1], tmp_path)
    lose(disks[3], tmp_path)
    store = open_store(disks)
    gone = {1, 3}
    lost, fine = [], []
    for row, doc in stored:
        row = store.catalog.block_by_id(row.id)
        if row.disk not in gone:
            assert store.read(row) == doc
            fine.append(row)
            continue
        others = {r.disk for r in store.protection.members(row.stripe) if r.id != row.id}
        others.add(store.protection.stripe(row.stripe).parity_disk)
        if others & gone:
            with pytest.raises(DataLost, match="neither can|missing disk") as info:
                store.read(row)
            assert row.block_name in str(info.value)
            lost.append(row)
        else:
            assert store.read(row) == doc
    assert lost and fine
    st = archive_figures(store)["protection"]
    assert st["lost_count"] == len(lost) and st["missing_disks"] == [1, 3]
    store.close()
    proc = webfs_here("get", disks[0], key_of(lost[0]), check=False)
    assert proc.returncode == 1 and proc.stdout == b""
    assert b"cannot be read" in proc.stderr and lost[0].sig.encode() in proc.stderr
    text = webfs_here("status", disks[0]).stdout.decode()
    assert "MISSING disk 1" in text and "MISSING disk 3" in text
    assert f"LOST: {len(lost)} block(s)" in text and str(ContentKey(lost[0].sig, 0, lost[0].disk)) in text


# -- crashes ---------------------------------------------------------------------

CRASH_CHILD = textwrap.dedent("""
    import os, signal, sys
    from webfs import parity
    from webfs.assembly import open_archive
    from webfs.parity.stripeio import StripeIO
    where, disk = sys.argv[1], sys.argv[2]
    store = open_archive(disk, holder="crash test")
    real_write = StripeIO.write_parity
    real_removed = parity.Parity.block_removed
    def die():
        os.kill(os.getpid(), signal.SIGKILL)
    def write(self, vol, header, payload, new=False):
        if where == "before-parity":
            die()
        if where == "committed-before-parity":
            store.catalog.commit()
            die()
        real_write(self, vol, header, payload, new)
        if where == "after-parity":
            die()
    def removed(self, row, payload):
        die()
    StripeIO.write_parity = write
    parity.Parity.block_removed = removed
    if where == "release":
        row = store.catalog.block_by_id(int(sys.argv[3]))
        store.release(row, pin=True)
        store.commit()
    else:
        store.store(b"the document a crash interrupts " * 300, name=b"/crash", pin=True)
        store.commit()
        store.protection.flush()    # parity of an open stripe is written behind
    print("not killed")
""")


@pytest.mark.parametrize("where", ["before-parity", "after-parity", "committed-before-parity", "release"])
def test_a_crash_between_a_block_and_its_parity_is_repaired_at_the_next_open(tmp_path, where):
    disks = make_archive(tmp_path / "a", disks=4, group_size=3)
    store = open_store(disks)
    stored = fill(store, documents(40, seed=12))
    victim = stored[17][0].id
    store.close()
    proc = subprocess.run([sys.executable, "-c", CRASH_CHILD, where, str(disks[0]), str(victim)],
                          capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    # fsck opens the archive, which reconciles; it reports what that did.
    proc = webfs_here("fsck", "--repair", disks[0], check=False)
    out = proc.stdout.decode()
    # after-parity: the parity of an open stripe is written behind, after the
    # commit, so a kill then leaves nothing to mend.
    if where in ("committed-before-parity", "release"):
        assert "found at open: an interrupted update" in out, out
    assert proc.returncode in (0, 1), out
    assert webfs_here("fsck", disks[0]).returncode == 0
    store = open_store(disks)
    assert_parity_consistent(store)
    for row, doc in stored:
        fresh = store.catalog.block_by_id(row.id)
        if fresh is not None:
            assert store.read(fresh) == doc
    assert not (disks[0] / "meta" / "parity-intent").read_bytes().strip()
    store.close()


@pytest.mark.parametrize("committed", [True, False])
def test_a_new_stripes_parity_file_cut_short_by_a_crash_is_mended_at_the_next_open(tmp_path, committed):
    """A new stripe's first parity file is written in place, not through a
    temporary file: a crash in the middle leaves it short, under its own
    name, with the stripe in meta/parity-intent. The next open recomputes it
    (the stripe was committed) or removes it (it was not)."""
    disks = make_archive(tmp_path / "a", disks=4, group_size=4)
    store = open_store(disks)
    stored = fill(store, documents(12, seed=21))
    stripe_id = store.protection.stripe_ids()[0]
    parity_disk = store.protection.stripe(stripe_id).parity_disk
    if not committed:       # as if the catalog never learnt of the stripe
        store.catalog.execute("UPDATE blocks SET stripe=NULL WHERE stripe=?", (bytes.fromhex(stripe_id),))
        store.catalog.execute("DELETE FROM stripes WHERE id=?", (bytes.fromhex(stripe_id),))
        store.commit()
    store.close()
    path = parity_file(disks, stripe_id, parity_disk)
    path.write_bytes(path.read_bytes()[:100])
    (disks[0] / "meta" / "parity-intent").write_text(stripe_id + "\n")
    store = open_store(disks)
    [(sid, done)] = store.protection.recovered
    assert sid == stripe_id
    if committed:
        assert "unreadable" in done and path.exists()
        assert_parity_consistent(store)
        for row, doc in stored:
            assert store.read(row) == doc
    else:
        assert "does not know" in done and not path.exists()
    store.close()


def test_a_failed_commit_takes_its_blocks_out_of_the_parity_again(tmp_path, monkeypatch):
    disks = make_archive(tmp_path / "a", disks=4, group_size=3)
    store = open_store(disks)
    stored = fill(store, documents(30, seed=17))

    def full():
        raise NoSpace("the disk that holds the catalog is full")
    real = store.catalog.commit
    monkeypatch.setattr(store.catalog, "commit", full)
    for doc in documents(12, seed=18):
        store.store(doc, pin=True)
    with pytest.raises(NoSpace):
        store.commit()
    monkeypatch.setattr(store.catalog, "commit", real)
    assert_parity_consistent(store)
    assert_kept_after_close(store, stored, disks[0])


def test_a_block_whose_row_cannot_be_inserted_leaves_its_stripe_as_it_was(tmp_path, monkeypatch):
    # The stripe of a new block is chosen before its row is inserted
    # (webfs.blockrows): a failed insert takes the block out of it again,
    # and the stripe is reconciled (dropped if it was started for it alone).
    disks = make_archive(tmp_path / "a", disks=4, group_size=3)
    store = open_store(disks)
    stored = fill(store, documents(12, seed=21))
    real, calls = store.catalog.insert_block, []
    real_many = store.catalog.executemany

    def insert_block(*args, **kw):
        calls.append(args[0])
        if len(calls) == 2:
            raise NoSpace("the disk that holds the catalog is full")
        return real(*args, **kw)

    def executemany(sql, rows):
        # SQLite's chunk in one statement (Catalog.insert_blocks) fails half
        # way: the rows it inserted stay, the rest go one at a time.
        if sql.startswith("INSERT INTO blocks (id,"):
            real_many(sql, rows[:len(rows) // 2])
            raise NoSpace("the disk that holds the catalog is full")
        return real_many(sql, rows)
    monkeypatch.setattr(store.catalog, "insert_block", insert_block)
    monkeypatch.setattr(store.catalog, "executemany", executemany)
    docs = documents(6, seed=22)
    out = store.store_many([Piece(d) for d in docs], [b"/f"] * len(docs), pin=True)
    monkeypatch.setattr(store.catalog, "insert_block", real)
    monkeypatch.setattr(store.catalog, "executemany", real_many)
    assert len(calls) == 3      # the three the statement did not insert, the second failing
    assert isinstance(out[4], NoSpace) and all(isinstance(r, BlockRow) for i, r in enumerate(out) if i != 4)
    assert not store.catalog.blocks_with_sigs([calls[1]])
    assert len({r.id for r in out if isinstance(r, BlockRow)}) == 5
    assert store.protection.out_of_date() == 0
    for stripe_id, members in store.catalog.query("SELECT id, members FROM stripes"):
        assert members == store.catalog.scalar("SELECT COUNT(*) FROM blocks WHERE stripe=?", (stripe_id,))
    assert all(r.refs == 1 for r in out if isinstance(r, BlockRow))
    stored += [(r, d) for r, d in zip(out, docs) if isinstance(r, BlockRow)]
    stored += fill(store, documents(6, seed=23))      # the stripe locks were let go
    store.commit()
    assert_parity_consistent(store)
    for row, doc in stored:
        assert store.read(row) == doc
        assert store.catalog.block_by_id(row.id).refs == row.refs
    store.close()
    assert webfs_here("fsck", disks[0]).returncode == 0


def test_a_chunks_new_rows_go_in_one_statement_numbered_as_sqlite_numbers_them(tmp_path, monkeypatch):
    # SQLite: the rows of a chunk's new blocks in one statement (Catalog.insert_blocks),
    # each under the id SQLite would have given it (past the highest), with its stripe
    # and its count set right (narrow), and none inserted one at a time.
    disks = make_archive(tmp_path / "a", disks=4, group_size=3)
    store = open_store(disks)
    fill(store, documents(5, seed=31))
    top = store.catalog.scalar("SELECT max(id) FROM blocks")
    real, singles = store.catalog.insert_block, []
    monkeypatch.setattr(store.catalog, "insert_block", lambda *a, **kw: singles.append(a) or real(*a, **kw))
    docs = documents(6, seed=32)
    out = store.store_many([Piece(d) for d in docs], [b"/f"] * len(docs), pin=True)
    assert not singles
    assert [r.id for r in out] == list(range(top + 1, top + 7))
    for r in out:
        kept = store.catalog.block_by_id(r.id)
        assert (kept.sig, kept.refs, kept.stripe) == (r.sig, 1, r.stripe) and r.stripe is not None
    assert_kept_after_close(store, zip(out, docs), disks[0])


def test_a_block_its_writer_thread_fails_is_written_by_the_storing_thread(tmp_path, monkeypatch):
    # webfs.blockwriters: each writer thread is handed its share of a chunk; a
    # block it fails to write (an error of its disk, or any other) comes back
    # unwritten for the storing thread to write, and the rest of its share is
    # written all the same.
    import threading
    disks = make_archive(tmp_path / "a", disks=4, group_size=3)
    store = open_store(disks)
    docs = documents(12, seed=41)
    failing = {signature(docs[1]): OSError(5, "Input/output error"), signature(docs[5]): ValueError("odd")}
    written = {}
    for vol in store.archive.volumes.values():
        def write_block(header, payload, overflow=0, fsync=False, real=vol.write_block):
            written[header.signature] = threading.current_thread()
            if header.signature in failing and threading.current_thread().name.startswith("webfs-block-writer"):
                raise failing[header.signature]
            return real(header, payload, overflow, fsync=fsync)
        monkeypatch.setattr(vol, "write_block", write_block)
    out = store.store_many([Piece(d) for d in docs], [b"/f"] * len(docs), pin=True)
    assert all(isinstance(r, BlockRow) for r in out)
    assert {s for s, t in written.items() if t is threading.current_thread()} == set(failing)
    assert len(written) == len(docs)
    assert_kept_after_close(store, zip(out, docs), disks[0])


def test_a_new_blocks_insert_takes_every_field_of_its_row():
    # blockrows hands insert_block the row's fields one by one (astuple deep-copies
    # each, under the catalog lock): a field added to BlockRow must be added there too.
    from dataclasses import astuple, fields
    from webfs.blockrows import _columns
    row = BlockRow(*(f"value {i}" for i in range(len(fields(BlockRow)))))
    assert _columns(row) == astuple(row)[1:]


def test_stale_parity_is_found_by_fsck_and_repaired(tmp_path):
    disks = make_archive(tmp_path / "a", disks=4, group_size=4)
    store = open_store(disks)
    stored = fill(store, documents(30, seed=13))
    row = store.catalog.block_by_id(stored[4][0].id)
    stripe = store.protection.stripe(row.stripe)
    path = parity_file(disks, stripe.id, stripe.parity_disk)
    # A parity file that has lost a member (written by hand: no intent, not dirty).
    header, payload = store.protection.read_parity(stripe.id, stripe.parity_disk)
    mine = store.archive.volumes[row.disk].read_block(row.sig)[1]
    others = [m for m in header.members if m.key != (row.sig, row.overflow)]
    length = max([m.stored for m in others] + [0])
    stale = xor_payloads([payload, mine], header.length)[:length]
    store.close()
    path.write_bytes(ParityHeader(stripe.id, length, tuple(others)).encode() + stale)
    proc = webfs_here("fsck", disks[0], check=False)
    assert proc.returncode == 4 and "parity lists other blocks than the catalog" in proc.stdout.decode()
    assert webfs_here("fsck", "--repair", disks[0], check=False).returncode == 1
    assert webfs_here("fsck", disks[0]).returncode == 0
    store = open_store(disks)
    assert_parity_consistent(store)
    store.close()


def test_fsck_removes_orphan_parity_files(tmp_path):
    disks = make_archive(tmp_path / "a", disks=3)
    store = open_store(disks)
    fill(store, documents(10, seed=14))
    store.close()
    stray = disks[1] / "parity" / "ab" / "cd" / ("e" * 28)
    stray.parent.mkdir(parents=True)
    stray.write_bytes(ParityHeader("abcd" + "e" * 28, 0).encode())
    proc = webfs_here("fsck", disks[0], check=False)
    assert proc.returncode == 4 and "orphan: disk 1: parity/ab/cd/" in proc.stdout.decode()
    assert webfs_here("fsck", "--repair", disks[0], check=False).returncode == 1
    assert not stray.exists()


# -- layout ----------------------------------------------------------------------------

@pytest.mark.parametrize("c, g", cases([(8, 4), (7, 3), (6, 6)]))
def test_every_pair_of_disks_shares_about_the_same_number_of_stripes(tmp_path, c, g):
    disks = make_archive(tmp_path / "a", disks=c, group_size=g)
    store = open_store(disks)
    rnd = random.Random(c * g)
    # One size class, so every block competes for the same stripes.
    fill(store, [rnd.randbytes(3000 + rnd.randrange(200)) for _ in range(3000)], commit_every=50)
    pairs = store.protection.pair_counts()
    assert len(pairs) == c * (c - 1) // 2
    assert max(pairs.values()) / min(pairs.values()) < 1.15, pairs
    # Parity goes where blocks are scarce: every disk is in about as many
    # stripes as another, counting its blocks and its parity files.
    st = archive_figures(store)
    elements = {d["index"]: d["blocks"] + st["protection"]["parity_per_disk"][d["index"]]["parity_files"]
                for d in st["disks"]}
    assert max(elements.values()) / min(elements.values()) < 1.1, elements
    # Few stripes left open. How many depends on ties broken by the random
    # stripe ids: 6 disks, G=6, 60 runs: median 12, most 27 (of ~600 stripes).
    assert st["protection"]["open_stripes"] <= 6 * c
    # The counters kept while writing are the ones recounted from the catalog.
    store.close()
    store = open_store(disks)
    assert store.protection.pair_counts() == pairs
    store.close()


def test_parity_overhead_on_a_realistic_crawl_is_close_to_one_over_g_minus_one(tmp_path, corpus):
    disks = make_archive(tmp_path / "a", disks=6, group_size=4)
    store = open_store(disks)
    for i, path in enumerate(sorted(p for p in (corpus / "crawl-001").rglob("*") if p.is_file())):
        store.store(path.read_bytes(), name=str(path).encode())
        if i % 20 == 0:
            store.commit()
    store.commit()
    st = archive_figures(store)
    p = st["protection"]
    assert p["unprotected_blocks"] == 0 and p["expected_overhead"] == pytest.approx(1 / 3, abs=1e-3)
    assert 1 / 3 <= p["parity_overhead"] < 1.3 / 3, p
    assert f"{p['parity_overhead']:.3f} of the protected payload" in "\n".join(protection_lines(st))
    store.close()


def test_scrub_repair_never_protects_a_loose_block_with_another_ones_bytes(tmp_path, monkeypatch):
    """A loose block read by scrub --repair, then freed and its id given to a
    block stored meanwhile (SQLite gives the highest id again), as a mount
    serving writes and removals does: the other block is not put in a stripe
    with the first one's payload. The interleaving is made with the test
    point scrub-after-read (its wait form: the scrub's thread waits on a FIFO)."""
    import threading
    from webfs import testkill
    disks = make_archive(tmp_path / "a", disks=2)
    keep = lose(disks[1], tmp_path)
    store = open_store(disks)
    stored = fill(store, documents(3, seed=16))
    store.close()
    shutil.move(str(keep), str(disks[1]))
    store = open_store(disks)
    gone = max((row for row, _ in stored), key=lambda r: r.id)
    fifo = tmp_path / "point.fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv("WEBFS_TEST_KILL_AT", f"scrub-after-read:3:wait:{fifo}")
    testkill.arm()
    try:
        done = {}
        scrub = threading.Thread(target=lambda: done.update(r=ADMIN_COMMANDS["scrub"](
            OpenArchive(store), admin.Progress(), repair=True)))
        scrub.start()
        with open(fifo, "wb"):              # returns once the scrub waits, the last loose block read
            store.release(gone, pin=True)
            other = store.store(b"another block, stored while the scrub waited", pin=True)
            store.commit()
            assert other.id == gone.id
        scrub.join()
    finally:
        monkeypatch.delenv("WEBFS_TEST_KILL_AT")
        testkill.arm()
    assert done["r"].exit_code == 0, done["r"].lines
    assert_parity_consistent(store)
    assert store.read(store.catalog.block_by_id(other.id)) == b"another block, stored while the scrub waited"
    store.close()


def test_blocks_stored_without_a_second_disk_are_protected_by_scrub_repair(tmp_path):
    disks = make_archive(tmp_path / "a", disks=2)
    keep = lose(disks[1], tmp_path)
    store = open_store(disks)
    stored = fill(store, documents(20, seed=15))
    assert archive_figures(store)["protection"]["unprotected_blocks"] == 20
    store.close()
    shutil.move(str(keep), str(disks[1]))
    assert "20 block(s) in no parity stripe; 'webfs scrub --repair' protects them" in \
        webfs_here("status", disks[0]).stdout.decode()
    out = webfs_here("scrub", "--repair", disks[0]).stdout.decode()
    assert "put 20 unprotected block(s) into parity stripes" in out
    store = open_store(disks)
    assert archive_figures(store)["protection"]["unprotected_blocks"] == 0
    assert_parity_consistent(store)
    store.close()
    for row, doc in stored[:3]:
        assert webfs_here("get", disks[0], key_of(row)).stdout == doc


# -- a model -------------------------------------------------------------------------

class ParityModel(RuleBasedStateMachine):
    """Random store / release / commit sequences (some releases with the
    block's file already gone) keep every stripe's parity the XOR of its members."""

    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="webfs-parity-"))
        self.disks = make_archive(self.tmp, disks=4, group_size=3)
        self.store = open_store(self.disks)
        self.live: list[tuple[int, bytes]] = []

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.tmp)

    @rule(size=st.integers(1, 3000), seed=st.integers(0, 10 ** 6))
    def store_doc(self, size, seed):
        doc = random.Random(seed).randbytes(size)
        row = self.store.store(doc, name=b"/m", pin=True)
        self.live.append((row.id, doc))

    @rule(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=12), seed=st.integers(0, 10 ** 6),
          twice=st.booleans())
    def store_chunk(self, sizes, seed, twice):
        """A chunk of an import: placed at once, several members of a stripe XOR-ed in at once."""
        rnd = random.Random(seed)
        docs = [rnd.randbytes(size) for size in sizes]
        if twice:
            docs.append(docs[0])            # a duplicate within the chunk
        rows = self.store.store_many([Piece(d) for d in docs], [b"/m"] * len(docs), pin=True)
        for row, doc in zip(rows, docs):
            self.live.append((row.id, doc))

    @rule()
    def commit(self):
        self.store.commit()

    @precondition(lambda self: self.live)
    @rule(data=st.data(), file_gone=st.booleans())
    def release(self, data, file_gone):
        block_id, doc = self.live.pop(data.draw(st.integers(0, len(self.live) - 1)))
        row = self.store.catalog.block_by_id(block_id)
        if file_gone and row.refs == 1:     # its payload cannot be XOR-ed out: recomputed from the others
            self.store.archive.volumes[row.disk].remove_block(row.sig, row.overflow)
        self.store.release(row, pin=True)
        self.store.commit()

    @invariant()
    def parity_is_the_xor_of_the_members(self):
        self.store.commit()
        assert_parity_consistent(self.store)
        for block_id, doc in self.live:
            assert self.store.read(self.store.catalog.block_by_id(block_id)) == doc


TestParityModel = ParityModel.TestCase
TestParityModel.settings = settings(max_examples=examples(50), stateful_step_count=30, deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])



def test_blocks_stored_at_once_by_many_threads_agree_with_their_parity(tmp_path, caplog):
    """webfs import and a mount store from several threads. A stripe is in the
    catalog as soon as its first block is placed; a block that joins it
    before that first block's parity exists must wait for it, not find no
    parity file (and have its own parity overwritten by the first's)."""
    from concurrent.futures import ThreadPoolExecutor
    disks = make_archive(tmp_path, 4)
    docs = documents(800, seed=11, median=5.0, sigma=0.5)
    store = open_archive(str(disks[0]), holder="test")
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)         # threads interleave as on a busy machine
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: store.store(docs[i], name=b"/d%d" % i, pin=True), range(len(docs))))
        store.commit()
        store.protection.flush()
    finally:
        sys.setswitchinterval(switch)
    try:
        found = ADMIN_COMMANDS["scrub"](OpenArchive(store), admin.Progress()).figures
    finally:
        store.close()
    assert found["problems"] == 0, found
    assert not [r.getMessage() for r in caplog.records if "cannot add" in r.getMessage()]


def test_chunks_stored_at_once_by_threads_agree_with_their_parity(tmp_path, caplog):
    """An import stores a chunk of files at once (``store_many``): its blocks
    are placed together and each stripe's new members XOR-ed in at once, from
    several threads (two imports into a mount, a mount's own writes)."""
    from concurrent.futures import ThreadPoolExecutor
    disks = make_archive(tmp_path, 5, group_size=4)
    docs = documents(900, seed=12, median=5.0, sigma=0.5)
    chunks = [docs[i:i + 30] for i in range(0, len(docs), 30)]
    store = open_archive(str(disks[0]), holder="test")
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda c: store.store_many([Piece(d) for d in c], [b"/c"] * len(c), pin=True),
                                chunks))
        store.commit()
        store.protection.flush()
        assert_parity_consistent(store)
        assert archive_figures(store)["protection"]["unprotected_blocks"] == 0
        for chunk, rows in zip(chunks, got):
            assert [store.read(r) for r in rows] == chunk
    finally:
        sys.setswitchinterval(switch)
        store.close()
    assert not [r.getMessage() for r in caplog.records if "cannot add" in r.getMessage()]


def test_the_intent_file_lists_a_stripe_once_until_it_is_emptied(tmp_path):
    """The members of a stripe whose parity waits in memory list it once; the
    file empties when every rewrite is done and committed, and lists it again after."""
    from webfs.parity.intents import IntentLog
    log = IntentLog(str(tmp_path / "parity-intent"), fsync=False)
    a, b = "a" * 32, "b" * 32
    for sid in (a, a, b, a):
        log.begin(sid)
    assert (tmp_path / "parity-intent").read_text().split() == [a, b]
    for sid in (a, a, b):
        log.done(sid)
    log.committed()
    assert log.listed() == {a, b}                  # a rewrite of a still runs: kept whole
    log.done(a)
    assert log.listed() == set()
    log.begin(a)
    assert log.listed() == {a}
    log.close()


def test_a_chunks_intents_are_one_append(tmp_path, monkeypatch):
    """begin_many (a chunk's new blocks): the stripes not listed yet appended in
    one write, each once; every block counted until its rewrite is done."""
    from webfs.parity import intents
    log = intents.IntentLog(str(tmp_path / "parity-intent"), fsync=False)
    a, b, c = "a" * 32, "b" * 32, "c" * 32
    log.begin(a)
    writes = []
    real = os.write
    monkeypatch.setattr(intents.os, "write", lambda fd, data: writes.append(data) or real(fd, data))
    log.begin_many([b, a, b, c, b])
    assert writes == [f"{b}\n{c}\n".encode()]
    assert (tmp_path / "parity-intent").read_text().split() == [a, b, c]
    for sid in (a, b, a, b, c):
        log.done(sid)
    log.committed()
    assert log.busy(b) and log.listed() == {a, b, c}      # one of b's three rewrites still runs
    log.done(b)
    assert not log.busy(b) and log.listed() == set()
    log.close()


def test_full_stripes_are_written_by_the_parity_writer_each_file_created_once(tmp_path, monkeypatch):
    """A stripe that fills has its parity file written by the parity writer
    thread, not by the thread storing the blocks; a stripe whose parity never
    reached its disk (begun in one chunk, filled in a later one) is created
    in place, never through a temporary file and a rename."""
    import threading
    from webfs.parity.stripeio import StripeIO
    writes = []                 # (thread name, new, members, stripe) of every parity file written
    real_write = StripeIO.write_parity

    def write(self, vol, header, payload, new=False):
        writes.append((threading.current_thread().name, new, len(header.members), header.stripe))
        real_write(self, vol, header, payload, new)
    monkeypatch.setattr(StripeIO, "write_parity", write)
    disks = make_archive(tmp_path, 4, group_size=4)
    store = open_store(disks)
    docs = documents(120, seed=31, median=7.0, sigma=0.5)
    try:
        for i in range(0, len(docs), 7):            # chunks that leave stripes open between them
            store.store_many([Piece(d) for d in docs[i:i + 7]], [b"/c%d" % i] * 7, pin=True)
            store.commit()
        store.protection.writer.close()             # (waits for what was handed over)
        full = [w for w in writes if w[2] == store.protection.width]
        assert full and all(name.startswith("webfs-parity-writer") for name, _, _, _ in full), writes
        # A stripe's first file is made in place (a stripe written behind for
        # long enough is written while open, then replaced when it fills).
        firsts = {sid: i for i, (_, _, _, sid) in reversed(list(enumerate(writes)))}
        assert [new for _, new, _, _ in writes] == [firsts[sid] == i for i, (_, _, _, sid) in enumerate(writes)]
        store.protection.flush()
        assert_parity_consistent(store)
        assert archive_figures(store)["protection"]["unprotected_blocks"] == 0
    finally:
        store.close()


def test_a_full_stripe_the_parity_writer_fails_on_is_written_by_the_next_flush(tmp_path, monkeypatch, caplog):
    """The parity writer meets an error it does not know: it says so, and the
    stripe's parity still waits in memory (its intents listed) for the next
    flush, which writes it. The other stripes handed over with it (one
    chunk's, one task) are still written by the writer."""
    from webfs.parity.stripeio import StripeIO
    real_write = StripeIO.write_parity
    failed, written = [], []

    def write(self, vol, header, payload, new=False):
        if not failed and len(header.members) == 3:
            failed.append(header.stripe)
            raise RuntimeError("an error of nobody's foresight")
        real_write(self, vol, header, payload, new)
        if len(header.members) == 3:
            written.append(header.stripe)
    monkeypatch.setattr(StripeIO, "write_parity", write)
    disks = make_archive(tmp_path, 4, group_size=4)
    store = open_store(disks)
    try:
        docs = documents(30, seed=41, median=7.0, sigma=0.3)
        store.store_many([Piece(d) for d in docs], [b"/d"] * len(docs), pin=True)
        store.commit()
        store.protection.writer.close()
        assert failed and "writing its parity file failed" in caplog.text
        assert written and not any(store.protection.busy(s) for s in written)
        assert store.protection.busy(failed[0]) and failed[0] in store.protection.interrupted()
        store.protection.flush()
        assert_parity_consistent(store)
        assert not store.protection.busy(failed[0])
    finally:
        store.close()
