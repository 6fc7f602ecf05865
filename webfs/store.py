"""The store: Webstore's store / retrieve / delete over the disks of an archive.

``store`` computes a document's signature, finds its placement group's
disk and either adds a reference to an existing block (a duplicate) or
writes a new one. The three Webstore modes decide what a duplicate is:
``force-new`` (never), ``regular`` (same signature and size) and
``compare`` (same signature, size and bytes; the default, so no fake
duplicate is ever merged). A different document with a taken signature gets
an overflow block ``~1``, ``~2``, ...

``compare`` decides by the content digest (SHA-256, in the catalog and the
block header of every block written since digests came): same signature,
size and digest is the same document, and nothing is read back. A block
written before digests has none; a document is compared with its bytes,
read back, and the digest then proven is kept in the catalog.

``retrieve`` reads a block, decodes it and checks it against its
signature; a block that cannot be read whole from its disk is asked of the
archive's protection (parity), so a reader gets the right bytes or an
error, never wrong bytes. ``release`` drops a reference; the last one
removes the block. The catalog keeps the reference counts; each block's
header mirrors its count in the fixed-width ``Refs`` field, written behind
the commit that made it (``_set_refs``).

The store is thread-safe: catalog access is serialised by the catalog's
lock, and two threads storing the same signature are serialised by a lock
on that signature, so they make one block with two references.
"""
from __future__ import annotations

import errno
import logging
import os
import time
from typing import Callable, Optional, Union

from . import blockrows, codecs, lockorder, sharedrefs, testkill
from . import signature as sigmod
from .archive import STORE_MODES, Archive
from .block import HEADER_SIZE, BlockHeader, percent_encode, utc_timestamp
from .catalog import BlockRow, Catalog
from .catalogfile import consistent_copy
from .errors import CorruptBlock, DataLost, NoSpace, NoSuchBlock, WebfsError
from .background import Background
from .heat import DEFAULT_K, HeatTracker
from .blockintents import INTENTS_FILE, REFS_INTENT, Intents
from .blockwriters import BlockWriters
from .locks import KeyedLocks
from .outages import Missed
from .placement import home_disks
from .protection import Protection
from .piece import Piece
from .refheaders import headers_writer, mirror_refs
from .signature import ContentKey, SignatureFn
from .volume import search_order

log = logging.getLogger(__name__)

FLUSH_EVERY = 0.25         # seconds between asks to flush parity written behind


class Store:
    """Documents in, documents out, over the disks of one archive."""

    def __init__(self, archive: Archive, catalog: Catalog,
                 signature_fn: SignatureFn = sigmod.signature,
                 protection: Optional[Protection] = None, fsync: bool = False,
                 heat_k: int = DEFAULT_K, background: bool = False):
        self.archive = archive
        self.conf = archive.conf
        self.catalog = catalog
        self.signature_fn = signature_fn
        self.protection = protection or Protection()
        self.fsync = fsync
        self._sig_locks = KeyedLocks("signature")
        self.heat = HeatTracker(catalog, heat_k)        # reads that reach the disks, per group
        self._reported: set[tuple[str, int]] = set()
        self.missed = Missed()          # what disks away during this mount missed (``catch_up``)
        self.catching_up: set[int] = set()     # disks back in use, what they missed still being put right
        # What the open catalog transaction changed on the disks, to undo if it fails.
        self._pending_new: list[BlockRow] = []
        self._pending_refs: set[int] = set()
        self._pending_removals: list[BlockRow] = []     # files to remove once the commit holds
        self._removing: list[BlockRow] = []             # committed as gone, files not yet removed
        # The JOURNAL: ``take()`` under the catalog lock at each commit, ``append(data)`` after.
        self.journal = None
        self._journal_lock = lockorder.lock("journal append")      # appends in commit order
        # Removals and parity flushes after a commit; a worker thread with ``background``.
        self.background = Background("webfs-removal", inline=not background)
        self._flush_asked = 0.0
        self.intents = Intents(os.path.join(archive.first_volume.root, INTENTS_FILE))
        self._inflight = 0
        self._refs_due: dict[int, None] = {}   # blocks whose Refs header follows the next commit
        self.writers = BlockWriters(archive)    # a chunk's new block files, side by side
        self.headers = headers_writer(catalog, self.mirror_refs)     # writes Refs headers after commits

    def close(self) -> None:
        with self.catalog.lock:
            due, self._refs_due = list(self._refs_due), {}
        if due:
            self.background.submit(lambda: self._write_refs(due))
        self.background.close()
        self.headers.close()
        self.writers.close()
        self.protection.close()
        self.catalog.close()
        self.intents.close()
        for vol in self.archive.volumes.values():
            vol.backend.close(consistent_copy)      # an S3 disk copies its meta/ to the bucket
        self.archive.unlock()

    def use_journal(self, journal) -> None:
        """Append each commit's changes to ``journal`` (a ``manifest.Journal``;
        None: stop), as the namespace of a mount or an import is opened."""
        self.journal = journal

    def commit(self, here: bool = False) -> None:
        """Make the catalog's changes durable and append them to the JOURNAL; if
        the commit fails (a full catalog disk), undo them on the disks too, so the
        archive stays as it was at the last commit. Removing released blocks and
        flushing parity written behind follow in the background worker; the Refs
        headers it made due too, or ``here`` (``GroupCommit.commit_here``) by the
        caller if the worker is idle (``Background.submit``)."""
        with self.catalog.lock:
            removals = self._pending_removals
            self.heat.save_if_due()
            try:
                self.catalog.commit()
            except BaseException:
                self.catalog.rollback()
                self._undo_pending()
                raise
            finally:
                self._pending_new, self._pending_refs, self._pending_removals = [], set(), []
            testkill.point("commit-after-catalog")
            self.protection.committed()
            self.headers.committed()
            self._removing.extend(removals)
            refs_due, self._refs_due = list(self._refs_due), {}
            data = self.journal.take() if self.journal is not None else b""
            # Taken in the order of commits, appended in the same order.
            self._journal_lock.acquire()
        try:
            if data:
                self.journal.append(data)
        finally:
            self._journal_lock.release()
        testkill.point("commit-after-journal")
        if refs_due:
            self.background.submit(lambda: self._write_refs(refs_due), here=here)
        if removals:
            self.background.submit(lambda: self._remove_blocks(removals))
        now = time.monotonic()
        if self.background.inline or now - self._flush_asked >= FLUSH_EVERY:
            # Not at every commit: waking the worker costs the committer the GIL.
            self._flush_asked = now
            self.background.submit(self.protection.flush_due)

    def sync(self) -> None:
        """Make everything committed durable on the disks (fsync, checkpoint the WAL)."""
        self.heat.save()
        self.background.drain()
        self.protection.flush()
        # One hold of the lock for both: between a commit and the checkpoint
        # another thread could open a transaction on the shared connection,
        # and a checkpoint inside a transaction fails ("database table is locked").
        with self.catalog.lock:
            self.commit()
            self.catalog.checkpoint()
        self.background.drain()         # the Refs headers that commit made due
        with self.catalog.lock:
            self.commit()
            self.trim_intents()
        self.archive.sync_disks(consistent_copy)

    def _remove_blocks(self, rows: list[BlockRow]) -> None:
        """Take released blocks out of their stripes and off their disks.
        A crash before this leaves orphans, which fsck removes."""
        try:
            for row in rows:
                self.protection.block_removed(row, self._payload_or_none(row))
                vol = self.archive.volumes.get(row.disk)
                if vol is None:
                    if row.disk in self.archive.lost:
                        self.missed.released(row.disk, row.sig, row.overflow)
                    continue
                try:
                    vol.remove_block(row.sig, row.overflow)
                except OSError:
                    if vol.backend.known_present():
                        raise
                    self.missed.released(row.disk, row.sig, row.overflow)   # its endpoint is down
        finally:
            with self.catalog.lock:
                gone = {id(r) for r in rows}
                self._removing = [r for r in self._removing if id(r) not in gone]
                self.catalog.commit()       # the stripes made clean again

    def _undo_pending(self) -> None:
        # With other machines mounted a new block's file stays: one may be storing
        # the same document under that name now (fsck --repair removes an orphan).
        shared = sharedrefs.others_mounted(self.catalog)
        for row in self._pending_new:
            vol = self.archive.volumes.get(row.disk)
            if vol is not None and not shared:
                vol.remove_block(row.sig, row.overflow)
        self.protection.rolled_back(self._pending_new)
        self.headers.write(list(self._pending_refs))

    # -- store ---------------------------------------------------------------

    def store(self, data: bytes, name: bytes = b"", mode: Optional[str] = None,
              pin: bool = False, sig: Optional[str] = None,
              encoded: Optional[tuple[str, bytes]] = None, same: Optional[int] = None,
              sha256: Optional[bytes] = None, here: bool = False) -> BlockRow:
        """Store a document (or add a reference to its twin); the caller commits.
        ``sig``, ``encoded`` (what ``encode`` gives), ``same`` (what ``twins``
        gives) and ``sha256`` may be computed ahead, by threads that hold no
        lock of the store. ``here``: see ``Protection.blocks_added``."""
        outcome = self.store_many([Piece(data, sig, encoded, same, sha256)], [name], mode, pin, here)[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def store_many(self, pieces: list[Piece], names: list[bytes], mode: Optional[str] = None,
                   pin: bool = False, here: bool = False,
                   walk_on: Callable[[], None] = lambda: None) -> list[Union[BlockRow, Exception]]:
        """Store documents (each named for its block header) as ``store``
        stores one, in order; for each, its block's row or the error. New
        blocks are written together: their intents in one write, their parity
        placed at once, XOR-ed once per stripe; a repeat of an earlier one is
        compared in memory. An import stores a chunk so, walking on while the
        files are written (``walk_on``: it takes no signature lock, raises nothing)."""
        mode = mode or self.conf.store_mode
        if mode not in STORE_MODES:
            raise ValueError(f"unknown store mode {mode!r}")
        pieces = [p.signed(self.signature_fn) for p in pieces]
        out: list[Union[BlockRow, Exception, None]] = [None] * len(pieces)
        sigs = {p.sig for p in pieces}
        with self._sig_locks.many(sigs):
            found = self.catalog.blocks_with_sigs(list(sigs))
            new: dict[str, list[tuple[int, int]]] = {}      # sig -> (index, overflow) of new blocks
            twin: dict[int, Union[BlockRow, int]] = {}      # index -> a row, or an index in new
            for i, p in enumerate(pieces):
                rows, made = found.get(p.sig, []), new.get(p.sig, [])
                if mode != "force-new":
                    row = next((r for r in rows if r.size == len(p.data) and (
                        mode == "regular" or self._holds(r, p))), None)
                    j = row if row is not None else next((j for j, _ in made if len(pieces[j].data) == len(p.data) and (
                        mode == "regular" or pieces[j].data == p.data)), None)
                    if j is not None:
                        twin[i] = j
                        continue
                with self.catalog.lock:     # a released block keeps its file until the commit
                    taken = [r.overflow for r in rows + self._pending_removals + self._removing
                             if r.sig == p.sig] + [n for _, n in made]
                new.setdefault(p.sig, []).append((i, max(taken) + 1 if taken else 0))
            made = sorted(x for per_sig in new.values() for x in per_sig)
            for (i, _), outcome in zip(made, self._store_new(
                    [(pieces[i], names[i], overflow) for i, overflow in made], pin, here, walk_on)):
                out[i] = outcome
            again = self._count_twins(twin, out, pin)
            if again:       # their blocks released by another machine meanwhile
                for i, outcome in zip(again, self._store_new(sharedrefs.anew(
                        self, [(pieces[i], names[i], twin[i]) for i in again]), pin)):
                    out[i] = outcome
        return out

    def _count_twins(self, twin: dict[int, Union[BlockRow, int]],
                     out: list[Union[BlockRow, Exception, None]], pin: bool) -> list[int]:
        """One more reference for each duplicate (index -> the row of its block,
        or the index of the new block it repeats), counted in one catalog
        statement; each outcome a row of its own, with the count the block
        had then. Returns the duplicates whose block another machine's
        release removed meanwhile (``sharedrefs.vanished``), to store anew."""
        counted: dict[int, tuple[BlockRow, int]] = {}      # id -> (its row, references added)
        for i, j in twin.items():
            row = j if isinstance(j, BlockRow) else out[j]
            if not isinstance(row, BlockRow):
                out[i] = row                # the same error as the twin it would have had
                continue
            mine, added = counted.get(row.id, (row.copy(), 0))
            mine.refs += 1
            mine.pins += int(pin)
            counted[row.id] = (mine, added + 1)
            out[i] = mine.copy()
        try:
            if counted:
                self._set_refs([(r, n, n * int(pin)) for r, n in counted.values()])
            gone = sharedrefs.vanished(self.catalog, list(counted))
        except Exception as exc:            # (the catalog's disk is full: the commit fails too)
            for i in twin:
                if isinstance(out[i], BlockRow):
                    out[i] = exc
            return []
        return [i for i in twin if isinstance(out[i], BlockRow) and out[i].id in gone]

    def encode(self, data: bytes) -> tuple[str, bytes]:
        """(codec, payload) of a document, as a new block of it would hold it."""
        return codecs.encode(data, self.conf.codec, self.conf.level)

    def twins(self, pieces: list[Piece]) -> list[tuple[Optional[int], bool]]:
        """For documents about to be stored, signed (``Piece.signed``), found in
        one query: (the id of a block that holds the very bytes or None,
        whether any block has the signature). A bulk import asks ahead of
        ``store``, from threads that hold no lock, so that ``store`` need not
        read back a duplicate of a block without a digest (``same``) nor the
        import encode one. Blocks never change their bytes, so a block found
        to hold them still does when it is used."""
        rows = self.catalog.blocks_with_sigs(list({p.sig for p in pieces}))
        out = []
        for p in pieces:
            same = None
            if self.conf.store_mode == "compare":
                same = next((r.id for r in rows.get(p.sig, ())
                             if r.size == len(p.data) and self._holds(r, p)), None)
            out.append((same, p.sig in rows))
        return out

    def _store_new(self, new: list[tuple[Piece, bytes, int]], pin: bool, here: bool = False,
                   walk_on: Callable[[], None] = lambda: None) -> list[Union[BlockRow, Exception]]:
        """New blocks (piece, name, overflow): their intents in one write, then
        their files and rows, then their parity, all at once."""
        out: list[Union[BlockRow, Exception]] = []
        if not new:
            return out
        blocks = []
        grps = [sigmod.group_of(p.sig, self.conf.depth) for p, _, _ in new]
        encoded = [p.encoded or self.encode(p.data) for p, _, _ in new]
        with self.catalog.lock:         # their open stripes asked with their groups: one wait
            self.protection.read_ahead([len(payload) for _, payload in encoded])
            self.catalog.read_groups(set(grps))
        maps: dict[str, int] = {}       # groups this chunk maps, written in one statement
        for (p, name, overflow), grp, (codec, payload) in zip(new, grps, encoded):
            header = BlockHeader(p.sig, len(p.data), len(payload), codec, 1, utc_timestamp(),
                                 percent_encode(name), p.sha256)
            disks = self.home_disks(grp, maps)
            # Its room is asked as it is written, after the chunk's blocks before
            # it (asking here too would count each block twice); a block that
            # goes to another disk after all has an intent line of its own.
            first = disks[0] if disks else None
            blocks.append((p.data, header, payload, overflow, grp, disks, first))
        self.catalog.set_group_disks([(grp, disk, None) for grp, disk in maps.items()])
        with self.catalog.lock:
            self._inflight += len(new)
        try:
            self._intend("".join(f"{h.signature}~{overflow} {first}\n"
                                 for _, h, _, overflow, _, _, first in blocks if first is not None))
            written = self.writers.write_all([(h, payload, overflow, first)  # an import walks on meanwhile
                                              for _, h, payload, overflow, _, _, first in blocks],
                                             self.fsync, walk_on)
            staged = []                     # (its place in out, row not yet inserted, payload)
            for (data, header, payload, overflow, grp, disks, first), disk in zip(blocks, written):
                try:
                    if disk is None:        # not written by the writers: here, on any disk with room
                        disk = self._write_new(header, payload, overflow, disks, first)
                except Exception as exc:
                    out.append(exc)
                    continue
                staged.append((len(out), BlockRow(0, header.signature, overflow, disk, header.size, header.stored,
                                                  header.codec, 1, int(pin), header.created, header.name, grp,
                                                  None, header.sha256), payload))
                out.append(None)            # (its row or error, below)
            added, placing, elsewhere = blockrows.insert_new(self.catalog, self.protection, self.archive.volumes,
                                                             staged, out, self._pending_new)
            self.protection.blocks_added(added, placing, here)
            for i, row in elsewhere:    # (after: no stripe's lock is held)
                try:
                    out[i] = sharedrefs.made_elsewhere(self, row, pin)
                except Exception as exc:
                    out[i] = exc
        finally:
            with self.catalog.lock:
                self._inflight -= len(new)
        return out

    def add_ref(self, row: BlockRow, pin: bool = False) -> BlockRow:
        """One more reference to a stored block (a hard link's new file, a copy)."""
        with self._sig_locks(row.sig):
            fresh = self.catalog.block_again(row)
            if fresh is None:
                raise NoSuchBlock(f"block {row.block_name} is gone")
            return self.add_counted(fresh, pin)

    def add_counted(self, row: BlockRow, pin: bool) -> BlockRow:
        """One more reference to a block whose row was just read (its signature lock held)."""
        row.refs += 1
        row.pins += int(pin)
        self._set_refs([(row, 1, int(pin))])
        return row

    def _set_refs(self, changes: list[tuple[BlockRow, int, int]]) -> None:
        """(row, references added, pins added): counted in the catalog by the
        engine (committed later); the blocks' headers
        follow after the commit (``_write_refs``, in the background), each
        once however often its count changed. A kill before a header is
        written leaves it behind the catalog (or, the commit lost, as it
        was): the intent line ``refs SIG~N DISK``, written with the first
        change and kept until the header is written (``_inflight``), so a
        checkpoint's trim cannot drop it early, lets the next open set the
        header to what the catalog kept."""
        with self.catalog.lock:
            self.catalog.add_refs_of([(r.id, n, p) for r, n, p in changes])
            self.headers_due([r for r, _, _ in changes])

    def headers_due(self, rows: list[BlockRow]) -> None:
        """These blocks' counts changed in the open transaction: their headers follow its commit."""
        with self.catalog.lock:
            self.headers.changed(rows)
            lines = []
            for row in rows:
                self._pending_refs.add(row.id)
                if row.id not in self._refs_due:
                    self._refs_due[row.id] = None
                    lines.append(f"{REFS_INTENT} {row.block_name} {row.disk}\n")
            self._inflight += len(lines)
            self._intend("".join(lines))

    def removal_due(self, row: BlockRow) -> None:
        """A block deleted from the catalog: its file goes once the commit holds."""
        self._pending_removals.append(row)

    def leaving_blocks(self) -> list[BlockRow]:
        """Blocks released whose files are not yet removed (under the catalog lock)."""
        return self._pending_removals + self._removing

    def _write_refs(self, ids: list[int]) -> None:
        """Write these blocks' Refs headers as the catalog has them now (a
        count that changes again is due again, written by a later job)."""
        try:
            self.headers.write(ids)
        finally:
            with self.catalog.lock:
                self._inflight -= len(ids)

    def _holds(self, row: BlockRow, piece: Piece) -> bool:
        """Does a block of the piece's signature and size hold its very bytes?
        Its digest says; a block without one (written before digests) is read
        back and compared, and the digest so proven goes to the catalog."""
        if row.sha256 is not None:
            return row.sha256 == piece.sha256
        if row.id == piece.same:
            return True
        try:
            same = self.read(row) == piece.data
        except WebfsError as exc:
            log.warning("cannot compare with block %s (%s); storing a new block", row.block_name, exc)
            return False
        if same:
            with self.catalog.lock:
                self.catalog.set_sha256(row, piece.sha256)
            row.sha256 = piece.sha256
        return same

    def home_disks(self, grp: str, maps: dict[str, int]) -> list[int]:
        """Disks for a new block of a group, best first (``placement.home_disks``)."""
        return home_disks(grp, [(d.index, d.uuid, d.weight) for d in self.conf.disks],
                          self.catalog.group_disk(grp), self.archive.volumes, maps)

    def has_room(self, disk: int, needed: int) -> bool:
        """Can a disk take this many more bytes of blocks (``Archive.has_room``)?"""
        return self.archive.has_room(disk, needed)

    def _write_new(self, header: BlockHeader, payload: bytes, overflow: int, disks: list[int],
                   intended: Optional[int]) -> int:
        """Write a new block on the first of these disks with room; its intent
        line is written first (already, for the disk ``intended``)."""
        needed = len(payload) + HEADER_SIZE
        for disk in disks:
            vol = self.archive.volumes.get(disk)
            if vol is None or not self.has_room(disk, needed):
                continue                # gone since, or full (a vanished disk has no room)
            if disk != intended:
                self._intend(f"{header.signature}~{overflow} {disk}\n")
            try:
                vol.write_block(header, payload, overflow, fsync=self.fsync)
                return disk
            except OSError as exc:
                if not vol.backend.present():
                    self.archive.lose(disk, f"{exc.strerror or exc} while writing")
                    continue
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                log.warning("disk %d is full; trying the next disk", disk)
        raise NoSpace("no disk has room for a block of %d bytes" % needed)

    def _intend(self, lines: str) -> None:
        if lines:
            with self.catalog.lock:
                self.intents.append(lines)

    def forget_unfinished_writes(self) -> list[str]:
        """Remove block files that were written but never made it into the
        catalog, and set Refs headers written ahead of a lost commit back to
        the catalog's count."""
        said = []
        for line in self.intents.lines():
            if line.startswith(REFS_INTENT + " "):
                self._refs_from_catalog(line[len(REFS_INTENT) + 1:])
                continue
            key, _, disk = line.partition(" ")
            if not disk.isdigit():
                continue
            ck = ContentKey.parse(key)
            row = self.catalog.block(ck.sig, ck.overflow)
            vol = self.archive.volumes.get(int(disk))
            if vol is not None:
                for leftover in vol.backend.remove_leftovers(vol.block_path(ck.sig, ck.overflow)):
                    said.append(f"removed {leftover} on disk {disk}, left by an interrupted write")
            if vol is not None and (row is None or row.disk != int(disk)) and vol.has_block(ck.sig, ck.overflow):
                vol.remove_block(ck.sig, ck.overflow)
                said.append(f"removed unfinished block {ck.block_name} on disk {disk}")
        self.trim_intents()
        return said

    def _refs_from_catalog(self, intent: str) -> None:
        """A header whose Refs may have been written ahead of a commit that
        never came: write what the catalog kept (silently: nothing was lost)."""
        key, _, disk = intent.partition(" ")
        if not disk.isdigit():
            return
        ck = ContentKey.parse(key)
        row = self.catalog.block(ck.sig, ck.overflow)
        if row is not None and row.disk == int(disk):
            self.mirror_refs(row)

    def trim_intents(self) -> None:
        """Forget the intents once every write they name is committed."""
        with self.catalog.lock:
            if self._inflight == 0:
                self.intents.clear()

    # -- retrieve ------------------------------------------------------------

    def lookup(self, key: ContentKey) -> BlockRow:
        row = self.catalog.block(key.sig, key.overflow)
        if row is None:
            raise NoSuchBlock(f"no block {key.block_name} in the archive")
        return row

    def retrieve(self, key: ContentKey) -> bytes:
        return self.read(self.lookup(key))

    def read(self, row: BlockRow) -> bytes:
        """The document of a block, checked against its signature."""
        try:
            return self.decode_checked(row, self.read_payload(row))
        except CorruptBlock as exc:
            self._report(row, str(exc))
        try:
            return self.decode_checked(row, self.protection.reconstruct(row))
        except CorruptBlock as exc:
            raise DataLost(f"block {row.block_name} on disk {row.disk} is damaged, and what its "
                           f"parity stripe gives is not it either ({exc})") from None

    def read_payload(self, row: BlockRow) -> bytes:
        """The payload of a block as its disk holds it, or from the other disks
        (an interrupted move), or from its stripe. Raises CorruptBlock when the
        payload that was found does not decode to the signed document."""
        for vol in search_order(self.archive.volumes, row.disk):
            disk = vol.index
            try:
                header, payload = vol.read_block(row.sig, row.overflow)
            except FileNotFoundError:
                if not vol.backend.present():
                    self.archive.lose(disk, "its root directory is gone")
                continue
            except (OSError, CorruptBlock) as exc:
                if isinstance(exc, OSError) and not vol.backend.known_present():
                    self.archive.lose(disk, f"{exc.strerror or exc}")     # an outage, not damage
                    continue
                self._report(row, f"disk {disk}: {exc}")
                continue
            if header.codec == row.codec and header.stored == row.stored:
                if disk != row.disk:
                    log.info("block %s found on disk %d, not %d", row.block_name, disk, row.disk)
                self.heat.record(row.grp)
                return payload
            self._report(row, f"disk {disk}: header disagrees with the catalog")
        if row.disk in self.archive.missing and row.disk not in self.archive.lost:
            self._report(row, f"disk {row.disk} is missing")
        return self.protection.reconstruct(row)

    def copy_of(self, row: BlockRow) -> bytes:
        """The whole block file (header and payload) of a block, byte for byte as
        a disk holds it and checked against its signature: from its disk, else
        another (an interrupted move); else rebuilt from the catalog row and the
        protection. For moving a block; not counted as a read."""
        for vol in search_order(self.archive.volumes, row.disk):
            disk = vol.index
            try:
                raw = vol.read_raw(row.sig, row.overflow)
                header = BlockHeader.parse(raw[:HEADER_SIZE], f"disk {disk}")
                if (header.codec, header.stored, len(raw) - HEADER_SIZE) != (row.codec, row.stored, row.stored):
                    raise CorruptBlock("header disagrees with the catalog")
                self.decode_checked(row, raw[HEADER_SIZE:])
                return raw
            except FileNotFoundError:
                continue
            except (OSError, WebfsError) as exc:
                self._report(row, f"disk {disk}: {exc}")
        payload = self.protection.reconstruct(row)
        self.decode_checked(row, payload)
        return header_of(row).encode() + payload

    def block_lock(self, sig: str):
        """The lock that serialises everything done to one signature: storing,
        adding and dropping references, moving its blocks."""
        return self._sig_locks(sig)

    def decode_checked(self, row: BlockRow, payload: bytes) -> bytes:
        """A block's document from its payload, checked against its signature."""
        try:
            return codecs.decode_checked(row.codec, payload, row.size, row.sig, self.signature_fn)
        except CorruptBlock as exc:
            raise CorruptBlock(f"block {row.block_name} on disk {row.disk}: {exc}") from None

    def _report(self, row: BlockRow, why: str) -> None:
        """Log a damaged block once per process, not on every read."""
        if (row.sig, row.overflow) not in self._reported:
            self._reported.add((row.sig, row.overflow))
            log.warning("block %s: %s; reading it from redundancy", row.block_name, why)

    def forget_damage(self, row: BlockRow) -> None:
        """A block just proven good (restored, rebuilt, or read back clean by a
        scrub): status no longer lists it as damaged."""
        self._reported.discard((row.sig, row.overflow))

    # -- delete --------------------------------------------------------------

    def release(self, row: BlockRow, pin: bool = False) -> int:
        """Drop one reference; the last one removes the block. Returns refs left.
        Whether it was the last is decided by the engine's count, read back
        under the row's lock that the decrement took (held until the commit),
        not by a count read before: with other machines' mounts (a PostgreSQL
        catalog), a reference one adds at that moment waits for the commit and
        then finds the row gone (``sharedrefs.vanished``), or comes first and
        the block stays. The row is deleted only if its count is 0 then."""
        cat = self.catalog
        with self._sig_locks(row.sig), cat.lock:
            cat.drop_ref(row.id, pin)
            fresh = cat.block_by_id(row.id)
            if fresh is not None and (fresh.refs < 0 or fresh.pins < 0):
                cat.add_refs_of([(row.id, 1, int(pin))])
                if fresh.refs >= 0:
                    raise NoSuchBlock(f"block {row.block_name} was not stored with 'webfs put'")
                fresh = None
            if fresh is None:
                raise NoSuchBlock(f"block {row.block_name} has no reference left to drop")
            if fresh.refs:
                self.headers_due([fresh])
                return fresh.refs
            cat.delete_unused_block(row.id)
            self._pending_removals.append(fresh)
        return 0

    def correct_refs(self, row: BlockRow, refs: int, mirror: bool = True) -> None:
        """Make a block's count what really exists (fsck, crash recovery): the
        catalog and, with ``mirror``, its header; none left releases the block."""
        if refs:
            self.catalog.set_refs(row.id, refs, row.pins)
            row.refs = refs
            if mirror:
                self.mirror_refs(row)
        else:
            self.catalog.set_refs(row.id, 1, row.pins)
            self.release(row)

    def _payload_or_none(self, row: BlockRow) -> Optional[bytes]:
        try:
            return self.read_payload(row)
        except WebfsError:
            return None

    damaged = property(lambda self: self._reported, doc="(signature, overflow) of the blocks found damaged "
                                                         "during this mount.")

    @property
    def refs_in_flight(self) -> bool:
        """Is a count set in the catalog on its way to a block header (or a new
        block to its disk)? Then a header may lag the catalog for a moment."""
        return self._inflight > 0

    def mirror_refs(self, row: BlockRow) -> bool:
        """Write the catalog's count into the block's Refs header; False if its
        disk cannot take it now (a disk that is away remembers it: ``catch_up``)."""
        return mirror_refs(self, row)

def key_of(row: BlockRow) -> ContentKey:
    return ContentKey(row.sig, row.overflow, row.disk)


def header_of(row: BlockRow) -> BlockHeader:
    """The header a block of this catalog row has (a rebuilt block gets it; its
    name hint as its stripe's Member line gave it to the row: reconstruct)."""
    return BlockHeader(row.sig, row.size, row.stored, row.codec, row.refs, row.created, row.name or "", row.sha256)


__all__ = ["Piece", "Store", "header_of", "key_of"]
