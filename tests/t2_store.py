"""The store against a model: store/retrieve/release in all three modes."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

import pytest
from hypothesis import settings, strategies as st, HealthCheck
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from webfs.block import BlockHeader, HEADER_SIZE
from webfs.catalog import SCHEMA_VERSION
from webfs.errors import ArchiveBusy, ArchiveError, CorruptBlock, DataLost, NoSpace, NoSuchBlock
from webfs.signature import signature
from webfs.assembly import open_archive
from webfs.store import Piece

from conftest import examples, make_archive, strip_digests, tmpfs_disks


def weak_signature(data: bytes) -> str:
    """A signature with 4 possible values, so collisions (fake duplicates) are common."""
    return signature(data[:1])[:30] + "%02x" % (len(data) % 4)


DOCS = st.sampled_from([b"", b"a", b"b", b"ab", b"ba", b"abcd", b"abce", b"x" * 100, b"y" * 100,
                        b"<html>" + b"text " * 200]) | st.binary(max_size=64)


class StoreModel(RuleBasedStateMachine):
    """Every live reference reads back its document; refs match; blocks vanish with the last ref."""

    def __init__(self):
        super().__init__()
        import tempfile
        self.tmp = tempfile.mkdtemp(prefix="webfs-model-")
        make_archive(__import__("pathlib").Path(self.tmp), disks=3)
        self.store = open_archive(os.path.join(self.tmp, "disk0"), signature_fn=weak_signature)
        self.refs: list[tuple[int, bytes, str]] = []       # (block id, document, mode)

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.tmp)

    @rule(doc=DOCS, mode=st.sampled_from(["force-new", "regular", "compare"]))
    def store_doc(self, doc, mode):
        row = self.store.store(doc, name=b"/doc", mode=mode)
        self.store.commit()
        if mode == "compare":
            # compare mode never merges different documents
            assert self.store.read(row) == doc
        if mode == "force-new":
            assert row.refs == 1
        self.refs.append((row.id, doc, mode))

    @rule(docs=st.lists(DOCS, min_size=1, max_size=6), mode=st.sampled_from(["force-new", "regular", "compare"]))
    def store_chunk(self, docs, mode):
        """A chunk of an import, fake and real duplicates within it compared in memory."""
        rows = self.store.store_many([Piece(d) for d in docs], [b"/doc"] * len(docs), mode=mode)
        self.store.commit()
        for row, doc in zip(rows, docs):
            assert not isinstance(row, Exception), row
            if mode == "compare":
                assert self.store.read(row) == doc
            self.refs.append((row.id, doc, mode))
        if mode == "force-new":
            assert len({r.id for r in rows}) == len(docs)

    @precondition(lambda self: self.refs)
    @rule(data=st.data())
    def release(self, data):
        i = data.draw(st.integers(0, len(self.refs) - 1))
        block_id, doc, mode = self.refs.pop(i)
        row = self.store.catalog.block_by_id(block_id)
        left = self.store.release(row)
        self.store.commit()
        still = sum(1 for b, _, _ in self.refs if b == block_id)
        assert left == still
        vol = self.store.archive.volumes[row.disk]
        assert vol.has_block(row.sig, row.overflow) == bool(still)

    @invariant()
    def everything_reads_back(self):
        counts = Counter(b for b, _, _ in self.refs)
        rows = {r.id: r for r in self.store.catalog.blocks()}
        assert set(rows) == set(counts)
        for block_id, doc, mode in self.refs:
            row = rows[block_id]
            assert row.refs == counts[block_id]
            got = self.store.read(row)
            if mode != "regular":       # regular may merge a fake duplicate of the same size
                assert got == doc
            header = self.store.archive.volumes[row.disk].read_header(row.sig, row.overflow)
            assert header.refs == row.refs


TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(max_examples=examples(60), stateful_step_count=25, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])


def test_regular_mode_merges_a_fake_duplicate_and_compare_does_not(tmp_path):
    make_archive(tmp_path, disks=2)
    store = open_archive(str(tmp_path / "disk0"), signature_fn=lambda d: "0" * 32)
    a = store.store(b"first", mode="compare")
    b = store.store(b"other", mode="compare")
    assert (a.overflow, b.overflow) == (0, 1)
    assert store.archive.volumes[b.disk].has_block("0" * 32, 1)
    assert store.read(b) == b"other"
    c = store.store(b"third", mode="regular")       # same size as 'first': Webstore's regular mode merges
    assert c.id == a.id and c.refs == 2
    store.close()


def test_twins_found_ahead_match_only_the_same_bytes(tmp_path):
    """A bulk import asks ``twins`` ahead of ``store``: a block of the same
    signature but other bytes is no twin, and ``same`` makes ``store`` add a
    reference to the block named."""
    make_archive(tmp_path, disks=2)
    sign = lambda d: "0" * 32
    store = open_archive(str(tmp_path / "disk0"), signature_fn=sign)
    a = store.store(b"first")
    twins = store.twins([Piece(b"first").signed(sign), Piece(b"fir5t").signed(sign),
                         Piece(b"other", "1" * 32).signed(sign)])
    assert twins == [(a.id, True), (None, True), (None, False)]
    again = store.store(b"first", same=a.id)
    assert (again.id, again.refs) == (a.id, 2)
    other = store.store(b"fir5t", encoded=store.encode(b"fir5t"))    # a twin of nothing: overflow 1
    assert other.overflow == 1 and store.read(other) == b"fir5t"
    store.close()


def test_a_chunk_with_duplicates_within_it_gives_each_file_its_own_row(tmp_path):
    """``store_many`` (an import's chunk): a document repeated in the chunk
    is one block, each outcome a row of its own with the count the block had
    when that file was stored (the import's summary counts new blocks by
    it); fake duplicates in the chunk get overflow blocks."""
    make_archive(tmp_path, disks=3)
    store = open_archive(str(tmp_path / "disk0"), signature_fn=lambda d: "0" * 32)
    rows = store.store_many([Piece(b"page"), Piece(b"page"), Piece(b"pag3"), Piece(b"page")], [b"/a"] * 4)
    assert [(r.overflow, r.refs) for r in rows] == [(0, 1), (0, 2), (1, 1), (0, 3)]
    assert len({id(r) for r in rows}) == 4
    store.commit()
    assert [store.read(r) for r in rows] == [b"page", b"page", b"pag3", b"page"]
    assert store.catalog.block("0" * 32, 0).refs == 3
    assert store.archive.volumes[rows[0].disk].read_header("0" * 32, 0).refs == 3
    store.close()


def test_a_chunk_maps_each_new_group_to_the_disk_its_blocks_went_to(store):
    """``store_many`` maps a chunk's new groups in one statement after placing
    its blocks: a group that two blocks of the chunk start is placed once
    (both blocks on one disk), and every group's row names that disk."""
    docs = [b"document %d " % i * 40 for i in range(600)]
    rows = store.store_many([Piece(d) for d in docs], [b"/f%d" % i for i in range(len(docs))])
    store.commit()
    disks_of: dict = {}
    for r in rows:
        disks_of.setdefault(r.grp, set()).add(r.disk)
    assert any(sum(r.grp == g for r in rows) > 1 for g in disks_of)       # a group shared in the chunk
    assert all(len(d) == 1 for d in disks_of.values())
    mapped = dict(store.catalog.query("SELECT grp, disk FROM groups"))
    assert {g: mapped.get(g) for g in disks_of} == {g: min(d) for g, d in disks_of.items()}
    assert store.catalog.group_disk(rows[0].grp) == rows[0].disk


def counting_reads(store) -> list:
    """The rows the store reads back from now on (a list that grows)."""
    reads = []
    real_read = store.read
    store.read = lambda row: reads.append(row) or real_read(row)
    return reads


def test_a_duplicate_is_decided_by_its_digest_without_reading_the_block_back(tmp_path):
    """Every new block keeps its document's SHA-256 in the catalog and in its
    header; compare mode decides a duplicate by signature, size and digest,
    and reads nothing back, also after the archive is opened again."""
    make_archive(tmp_path, disks=2)
    store = open_archive(str(tmp_path / "disk0"), signature_fn=lambda d: "0" * 32)
    reads = counting_reads(store)
    a = store.store(b"first", name=b"/a")
    store.commit()
    assert a.sha256 == hashlib.sha256(b"first").digest()
    header = store.archive.volumes[a.disk].read_header(a.sig)
    assert header.sha256 == a.sha256
    raw = store.archive.volumes[a.disk].read_raw(a.sig)
    assert b"\nDigest: sha256:" + hashlib.sha256(b"first").hexdigest().encode() + b"\n" in raw[:HEADER_SIZE]
    again = store.store(b"first")
    other = store.store(b"fir5t")            # same signature and size, other bytes
    assert (again.id, again.refs, other.overflow, reads) == (a.id, 2, 1, [])
    store.commit()
    store.close()
    store = open_archive(str(tmp_path / "disk0"), signature_fn=lambda d: "0" * 32)
    reads = counting_reads(store)
    rows = store.store_many([Piece(b"fir5t"), Piece(b"first"), Piece(b"f1rst")], [b"/b"] * 3)
    assert [(r.overflow, r.refs) for r in rows] == [(1, 2), (0, 3), (2, 1)] and reads == []
    store.close()


def forger(good: bytes, evil: bytes):
    """A signature function with a forged xxh3-128 collision: ``evil`` (a
    hostile page of the same length) gets the signature of ``good``."""
    assert len(good) == len(evil) and good != evil
    return lambda d: signature(good if d == evil else d)


def test_a_forged_collision_is_never_merged_by_the_store(tmp_path):
    """Two documents with the same signature and size but other bytes: every
    way into the store (one at a time, a chunk, a chunk with ``twins`` asked
    ahead, either one first) gives each its own block, and each reads back."""
    good, evil = b"<html>the real page</html>", b"<html>a hostile pag</html>"
    make_archive(tmp_path, disks=3)
    store = open_archive(str(tmp_path / "disk0"), signature_fn=forger(good, evil))
    a = store.store(good)
    b = store.store(evil)
    assert (a.sig, a.overflow, b.sig, b.overflow) == (signature(good), 0, signature(good), 1)
    sign = store.signature_fn
    pieces = [Piece(evil).signed(sign), Piece(good).signed(sign), Piece(evil).signed(sign)]
    twins = store.twins(pieces)
    assert twins == [(b.id, True), (a.id, True), (b.id, True)]
    rows = store.store_many([p._replace(same=same) for p, (same, _) in zip(pieces, twins)], [b"/c"] * 3)
    rows += store.store_many([Piece(evil), Piece(good)], [b"/d"] * 2)
    assert [r.id for r in rows] == [b.id, a.id, b.id, b.id, a.id]
    store.commit()
    assert [store.read(r) for r in rows] == [evil, good, evil, evil, good]
    assert store.catalog.block_by_id(a.id).refs == 3 and store.catalog.block_by_id(b.id).refs == 4
    store.close()
    # The hostile page first, in a chunk of its own with the real one.
    make_archive(tmp_path / "2", disks=2)
    store = open_archive(str(tmp_path / "2" / "disk0"), signature_fn=forger(good, evil))
    rows = store.store_many([Piece(evil), Piece(good), Piece(good)], [b"/e"] * 3)
    assert [(r.overflow, r.refs) for r in rows] == [(0, 1), (1, 1), (1, 2)]
    assert [store.read(r) for r in rows] == [evil, good, good]
    store.close()


def test_blocks_without_a_digest_are_compared_byte_for_byte_and_then_given_one(tmp_path):
    """An archive written before digests (no Digest header, a schema-1
    catalog without the column) opens, its catalog grows the column, and a
    duplicate of one of its blocks is read back and compared: the same
    bytes are one block (the digest then goes to the catalog, so the next
    duplicate reads nothing), a forged collision gets an overflow block."""
    good, evil = b"<html>the real page</html>", b"<html>a hostile pag</html>"
    disks = make_archive(tmp_path, disks=2)
    store = open_archive(str(disks[0]), signature_fn=forger(good, evil))
    old = store.store(good, name=b"/old")
    store.commit()
    store.close()
    strip_digests(disks)
    store = open_archive(str(disks[0]), signature_fn=forger(good, evil))
    assert store.catalog.get_meta("schema") == str(SCHEMA_VERSION)
    assert store.catalog.block_by_id(old.id).sha256 is None
    reads = counting_reads(store)
    b = store.store(evil)
    assert (b.overflow, len(reads)) == (1, 1)
    again = store.store(good)
    assert (again.id, again.refs, len(reads)) == (old.id, 2, 2)
    store.commit()
    assert store.catalog.block_by_id(old.id).sha256 == hashlib.sha256(good).digest()
    third = store.store(good)
    assert (third.id, third.refs, len(reads)) == (old.id, 3, 2)
    store.commit()
    header = store.archive.volumes[old.disk].read_header(old.sig)
    assert header.sha256 is None and header.refs == 3      # the header stays as it was written
    assert [store.read(r) for r in (old, b, third)] == [good, evil, good]
    store.close()


def test_duplicates_share_a_block_and_the_header_counts_them(store):
    """The header's Refs follows the catalog's count once it is committed."""
    rows = [store.store(b"<html>same page</html>" * 50, name=f"/c{i}/index.html".encode()) for i in range(3)]
    assert len({r.id for r in rows}) == 1
    row = rows[-1]
    assert store.archive.volumes[row.disk].read_header(row.sig).refs == 1
    store.commit()
    header = store.archive.volumes[row.disk].read_header(row.sig)
    assert header.refs == 3
    assert header.name == "/c0/index.html"       # the first name it was stored under


def test_a_document_that_looks_like_a_block_header(store):
    fake = BlockHeader("f" * 32, 5, 5, "identity", 7, "2026-01-01T00:00:00Z", "x").encode() + b"hello"
    row = store.store(fake)
    assert store.read(row) == fake
    raw = store.archive.volumes[row.disk].read_raw(row.sig)
    assert BlockHeader.parse(raw[:HEADER_SIZE]).signature == signature(fake)


@pytest.fixture
def lonely(tmp_path):
    """A one-disk archive: no parity, so damage cannot be repaired."""
    make_archive(tmp_path, disks=1)
    s = open_archive(str(tmp_path / "disk0"))
    yield s
    s.close()


def test_corrupt_payload_is_never_returned(lonely):
    store = lonely
    row = store.store(b"some page " * 300)
    vol = store.archive.volumes[row.disk]
    path = os.path.join(vol.root, vol.block_path(row.sig))
    raw = bytearray(open(path, "rb").read())
    raw[-20] ^= 0xFF
    open(path, "wb").write(raw)
    with pytest.raises((CorruptBlock, DataLost)):
        store.read(row)


def test_corrupt_payload_is_read_from_parity(store):
    doc = b"some page " * 300
    row = store.store(doc)
    store.commit()
    vol = store.archive.volumes[row.disk]
    path = os.path.join(vol.root, vol.block_path(row.sig))
    raw = bytearray(open(path, "rb").read())
    raw[-20] ^= 0xFF
    open(path, "wb").write(raw)
    assert store.read(row) == doc


def test_payload_shorter_than_stored_is_corrupt(lonely):
    store = lonely
    row = store.store(b"some page " * 300)
    vol = store.archive.volumes[row.disk]
    path = os.path.join(vol.root, vol.block_path(row.sig))
    os.truncate(path, os.path.getsize(path) - 10)
    with pytest.raises(CorruptBlock, match="payload is"):
        vol.read_block(row.sig)
    with pytest.raises((CorruptBlock, DataLost)):
        store.read(row)


def test_unknown_codec_in_header(lonely):
    store = lonely
    row = store.store(b"page " * 300)
    vol = store.archive.volumes[row.disk]
    path = os.path.join(vol.root, vol.block_path(row.sig))
    raw = open(path, "rb").read().replace(b"Codec: gzip", b"Codec: lzma")
    open(path, "wb").write(raw)
    with pytest.raises((CorruptBlock, DataLost)):
        store.read(row)


def test_archive_with_a_missing_disk_opens_and_writes_elsewhere(disks):
    shutil.rmtree(disks[2])
    store = open_archive(str(disks[1]))
    assert list(store.archive.missing) == [2]
    rows = [store.store(f"page {i}".encode() * 20) for i in range(200)]
    assert all(r.disk != 2 for r in rows)
    assert all(store.read(r) == f"page {i}".encode() * 20 for i, r in enumerate(rows))
    store.close()


def test_lock_refuses_a_second_user(disks):
    first = open_archive(str(disks[0]), holder="first")
    with pytest.raises(ArchiveBusy, match="first"):
        open_archive(str(disks[3]), holder="second")
    first.close()
    open_archive(str(disks[3])).close()


def test_a_killed_holder_leaves_no_stale_lock(disks):
    proc = subprocess.Popen([sys.executable, "-c", f"""
import time
from webfs.assembly import open_archive
store = open_archive({str(disks[2])!r}, holder="doomed")
print('locked', flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"locked\n"
    with pytest.raises(ArchiveBusy):
        open_archive(str(disks[0]))
    proc.kill()
    proc.wait()
    open_archive(str(disks[0])).close()


def test_not_an_archive(tmp_path):
    with pytest.raises(ArchiveError, match="not a webfs disk"):
        open_archive(str(tmp_path))


def test_no_such_block(store):
    from webfs.signature import ContentKey
    with pytest.raises(NoSuchBlock):
        store.retrieve(ContentKey("a" * 32))


@pytest.fixture
def small_disks(tmp_path):
    """Two disks on 3 MiB tmpfs mounts: real ENOSPC."""
    with tmpfs_disks(tmp_path, 2, "3m") as disks:
        yield disks


def test_full_disks_raise_nospace_and_keep_what_was_stored(small_disks):
    store = open_archive(str(small_disks[0]))
    stored = []
    with pytest.raises(NoSpace):
        for i in range(1000):
            doc = os.urandom(64 * 1024)
            row = store.store(doc, pin=True)
            store.commit()
            stored.append((row, doc))
    assert len(stored) > 10
    for row, doc in stored:
        assert store.read(row) == doc
    # No temporary file or half block is left behind.
    for p in small_disks:
        for dirpath, _, files in os.walk(p / "blocks"):
            for f in files:
                assert "webfs-tmp" not in f
    from webfs.commands import fsck
    assert fsck.check(store).findings == []
    store.close()


def test_has_room_counts_down_far_from_full_and_asks_the_disk_near_it(tmp_path, monkeypatch):
    """Far from the reserve, a disk's free space is asked once and counted down;
    once it is near (here: filled by someone else), every call asks the disk, so
    the last bytes are never promised twice."""
    from webfs import volume
    from webfs.locks import Clock
    from webfs.backends.local import LocalBackend
    with tmpfs_disks(tmp_path, 1, "400m") as (disk,):
        clock = Clock(start=1000.0)
        vol = volume.Volume(LocalBackend(str(disk)), 0, "u", 2, clock)
        asked = []
        statvfs = os.statvfs
        monkeypatch.setattr(os, "statvfs", lambda path: asked.append(path) or statvfs(path))
        assert all(vol.has_room(4096) for _ in range(100))
        assert len(asked) == 1                      # counted down, not asked 100 times
        with open(disk / "filler", "wb") as f:      # the disk fills behind webfs's back
            f.write(b"\0" * (380 << 20))
        assert vol.has_room(4096) and len(asked) == 1   # not asked again while fresh ...
        clock.advance(volume.ROOM_FRESH)                # ... and asked once it is not
        free = statvfs(str(disk)).f_bavail * statvfs(str(disk)).f_frsize
        asked.clear()
        answers = [vol.has_room(4096) for _ in range(5)]
        assert len(asked) == 5                      # near the reserve: every call asks
        kept = volume.reserve(statvfs(str(disk)).f_blocks * statvfs(str(disk)).f_frsize, False)
        assert answers == [free >= 4096 + kept] * 5
        assert not vol.has_room(free)               # more than is left past the reserve



def test_the_catalog_disk_keeps_room_for_the_wal_on_disks_of_every_size():
    """The disk that holds the catalog keeps 1/16 (up to 256 MiB) but never less
    than 16 MiB, or half a small disk; the others 1/50 up to 64 MiB."""
    from webfs.volume import reserve
    MiB, GiB = 1 << 20, 1 << 30
    assert reserve(2 * MiB, True) == 1 * MiB
    assert reserve(100 * MiB, True) == 16 * MiB
    assert reserve(1 * GiB, True) == 64 * MiB
    assert reserve(10 * GiB, True) == 256 * MiB
    assert reserve(2 * MiB, False) == 2 * MiB // 50
    assert reserve(10 * GiB, False) == 64 * MiB

def test_storing_again_before_the_release_commits_keeps_the_new_block(store):
    doc = b"a page that goes and comes back " * 40
    row = store.store(doc, pin=True)
    store.commit()
    store.release(row, pin=True)
    again = store.store(doc, pin=True)
    store.commit()
    assert store.read(again) == doc
    assert store.archive.volumes[again.disk].has_block(again.sig, again.overflow)


def freed_and_reused(store):
    """A block's row kept, the block freed, and a new block stored after, which
    SQLite gives the same id (the highest again): (the kept row, the new one)."""
    gone = store.store(b"a block freed after its row was read", pin=True)
    store.commit()
    store.release(gone, pin=True)
    other = store.store(b"another block, stored after", pin=True)
    store.commit()
    assert other.id == gone.id
    return gone, other


def test_a_reference_to_a_freed_block_whose_number_went_to_another_is_refused(store):
    """A row read before its block was freed (an import taking a file's blocks
    it found earlier: webfs.walkread.take_found): the number is the next new
    block's now (SQLite gives the highest number again); add_ref refuses it
    rather than count a reference to the other block."""
    gone, other = freed_and_reused(store)
    with pytest.raises(NoSuchBlock):
        store.add_ref(gone)
    assert store.catalog.block_by_id(other.id).refs == 1


def test_a_move_of_a_freed_block_whose_number_went_to_another_moves_nothing(store):
    """The same for a move (rebalance, remove-disk: a group's rows listed,
    each block moved under its own lock): the other block stays where its
    signature put it."""
    from webfs.commands.moves import move_block
    gone, other = freed_and_reused(store)
    target = next(d for d in store.archive.volumes if d != other.disk)
    assert move_block(store, gone, target) == 0
    assert store.catalog.block_by_id(other.id).disk == other.disk
    assert store.read(store.catalog.block_by_id(other.id)) == b"another block, stored after"


@pytest.mark.parametrize("change", ["add_ref", "release"])
def test_a_refs_header_behind_a_commit_is_set_by_the_next_open(tmp_path, change):
    """A reference count goes to the catalog at a commit and to the block's
    header after it; a process killed between the two leaves the header
    behind. The next open sets it to the catalog's count."""
    disks = make_archive(tmp_path, 2)
    script = f"""
import os
from webfs import testkill
from webfs.assembly import open_archive
store = open_archive({str(disks[0])!r}, holder="test")
row = store.store(b"a page kept twice " * 50, pin=True)
store.add_ref(row)
store.commit()
row = store.catalog.block(row.sig, row.overflow)
os.environ[testkill.ENV] = "commit-after-journal"
testkill.arm()
store.{change}(row)
store.commit()                       # the catalog's count committed, killed before the header's
"""
    assert subprocess.run([sys.executable, "-c", script]).returncode == -9
    store = open_archive(str(disks[0]), holder="test")
    try:
        (row,) = store.catalog.blocks()
        header = lambda: store.archive.volumes[row.disk].read_header(row.sig, row.overflow)
        want = 3 if change == "add_ref" else 1
        assert row.refs == want and header().refs == 2          # the crash window, made
        store.forget_unfinished_writes()
        assert header().refs == want
    finally:
        store.close()


def test_a_chunk_written_side_by_side_goes_around_a_full_disk(small_disks):
    """``store_many`` writes a chunk's block files from the writer threads; a
    block whose disk is full comes back to the storing thread, which writes
    it on the other disk: every document reads back, fsck finds nothing."""
    store = open_archive(str(small_disks[0]))
    filler = small_disks[1] / "filler"
    with open(filler, "wb") as f:            # disk 1 full, bar what its reserve keeps
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    docs = [os.urandom(16 * 1024) for _ in range(24)]
    rows = store.store_many([Piece(d) for d in docs], [b"/chunk"] * len(docs), pin=True)
    store.commit()
    assert all(not isinstance(r, Exception) for r in rows)
    assert {r.disk for r in rows} == {0}
    for row, doc in zip(rows, docs):
        assert store.read(row) == doc
    from webfs.commands import fsck
    assert fsck.check(store).findings == []
    store.close()


def test_a_chunk_whose_disk_vanishes_is_written_on_the_others(disks):
    """A disk whose root went after a chunk was written (its room still
    counted down, not asked): its blocks of the next chunk fail in the writer
    threads; the storing thread finds the disk gone, says so, and writes
    them on the others."""
    from webfs.locks import Clock
    store = open_archive(str(disks[0]), holder="test")
    store.archive.volumes[2].free.clock = Clock(start=1000.0)     # its room stays counted down, however slow this runs
    first = store.store_many([Piece(b"before %d" % i) for i in range(40)], [b"/first"] * 40, pin=True)
    store.commit()
    assert 2 in {r.disk for r in first}
    store.protection.writer.pool.submit(lambda: None).result()   # full stripes' files written: none lands in the rmtree
    shutil.rmtree(disks[2])
    docs = [b"vanishing disk %d " % i * 50 for i in range(40)]
    rows = store.store_many([Piece(d) for d in docs], [b"/chunk"] * len(docs), pin=True)
    store.commit()
    assert all(not isinstance(r, Exception) for r in rows)
    assert 2 in store.archive.missing and 2 not in {r.disk for r in rows}
    for row, doc in zip(rows, docs):
        assert store.read(row) == doc
    store.close()


def test_local_reads_whole_files_and_parts_and_fall_back_without_noatime(tmp_path):
    """A block file is read in one pread (to its end, or a part); O_NOATIME,
    refused (EPERM) to a reader that does not own the file, gives way to a
    plain open, for that read and the ones after."""
    from webfs.backends.local import LocalBackend
    (tmp_path / "f").write_bytes(b"x" * 1000 + b"yyyyy")
    (tmp_path / "empty").write_bytes(b"")
    disk = LocalBackend(str(tmp_path))
    assert disk.read("f") == b"x" * 1000 + b"yyyyy"
    assert disk.read("f", 1000) == b"yyyyy" and disk.read("f", 998, 4) == b"xxyy"
    assert disk.read("f", 2000) == b"" and disk.read("empty") == b""
    with pytest.raises(FileNotFoundError):
        disk.read("absent")
    script = ("import os, sys; from webfs.backends.local import LocalBackend; os.setuid(65534); "
              "d = LocalBackend(sys.argv[1]); a = d.read('f'); b = d.read('f', 1000); "
              "print(len(a), b.decode(), d._noatime)")
    with tempfile.TemporaryDirectory(dir="/tmp") as shared:      # tmp_path is root's alone
        os.chmod(shared, 0o755)
        shutil.copy(tmp_path / "f", shared)
        out = subprocess.run([sys.executable, "-c", script, shared], capture_output=True,
                             text=True, check=True).stdout.split()
    assert out == ["1005", "yyyyy", "0"]
