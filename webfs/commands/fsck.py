"""Checking an archive against itself, and mending what can be mended.

``check`` first checks the names against themselves
(``webfs.commands.names``: names of inodes that are not there, trees the
root does not reach, link counts), then reads every block file on every
present disk and every catalog row, and reports each problem as a ``Finding``: a header that does not
parse, content that does not match its signature, a catalog row whose
block is missing, a block no row knows (an orphan), reference counts that
disagree (catalog against namespace and pins, header against catalog),
and leftovers of interrupted writes; and (``webfs.commands.scrub.check_parity``)
parity files that do not parse or list other blocks than the catalog,
stripes left dirty by an interrupted update, and orphan parity files. With
``repair`` it fixes what it can (refs, orphans, leftovers, blocks found on
another disk, parity brought up to date; damaged blocks through the store's
protection) and says what it could not.

Without ``repair`` nothing on the disks is written, as ``e2fsck -n``:
``open_readonly`` takes the archive lock without writing the lock file,
checks a private copy of the catalog (its database and write-ahead log,
so what a killed process committed is seen but never checkpointed into the
original), does not reconcile stripes an interrupted process left behind
(it reports them), and every finding says what ``--repair`` would do.

Whether the catalog can be trusted at all comes first (``catalog_state``):
against an empty catalog or another archive's (its ``archive`` uuid, or not
one of the disks' blocks among its rows) every block would be an orphan, so
the check says that in one line instead. ``compare`` lists what replacing
the catalog by one rebuilt from the disks would change (names gained or
lost; type, size, mtime, owner, content or xattrs changed; hard links split;
blocks gained, lost or recounted), for ``fsck --rebuild-catalog``.

Findings, the report and its e2fsck exit codes are ``webfs.commands.report``'s.
"""
from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from typing import Callable, Iterator, Optional

from .. import codecs
from ..backends.local import TMP_SUFFIX
from ..archive import Archive
from ..backends import BackendOptions
from ..catalog import ARCHIVE_META, BlockRow, Catalog, catalog_path
from ..catalogengine import SQLITE, database_error
from ..catalogfile import check_catalog_file
from ..mkfs import catalog_engine
from ..errors import ArchiveError, CatalogUnreadable, CorruptBlock, WebfsError
from ..namespace import NamespaceRows
from ..signature import content_digest
from ..store import Store
from .names import check_names
from .report import Report, payload_from_redundancy, restored
from .scrub import check_parity

log = logging.getLogger(__name__)


class ReadOnlyStore(Store):
    """A Store over a private copy of the catalog, for a check that writes nothing."""

    def __init__(self, archive, catalog: Catalog, copy_dir: str, catalog_file: str, **kwargs):
        super().__init__(archive, catalog, **kwargs)
        self.copy_dir = copy_dir            # the private copy's directory, removed at close
        self.catalog_file = catalog_file    # the archive's catalog the copy was taken of

    def close(self) -> None:
        try:
            self.protection.close()         # its intent log is in the copy's directory
            self.catalog.close()
        finally:
            self.archive.unlock()
            shutil.rmtree(self.copy_dir, ignore_errors=True)


def open_readonly(disk: str, holder: str = "webfs fsck", options: Optional[BackendOptions] = None) -> Store:
    """Open the archive of ``disk`` for a check that writes nothing to any disk
    (S3 disks with ``options``)."""
    from ..parity import INTENT_FILE, Parity
    archive = Archive.open(disk, options=options)
    archive.lock(holder, write=False)
    copy_dir = ""
    try:
        primary = archive.volumes.get(archive.conf.catalog)
        engine = catalog_engine(archive.conf, options or archive.backend_options)
        if primary is None or (engine is SQLITE and not os.path.exists(catalog_path(primary.root))):
            raise ArchiveError(
                f"disk {archive.conf.catalog}, which holds the catalog, is missing or has lost it; "
                f"'webfs fsck --rebuild-catalog --repair {disk}' rebuilds it from the other disks")
        original = catalog_path(primary.root)
        copy_dir = tempfile.mkdtemp(prefix="webfs-fsck-")
        intents = os.path.join(primary.root, INTENT_FILE)
        if os.path.exists(intents):
            shutil.copyfile(intents, os.path.join(copy_dir, os.path.basename(INTENT_FILE)))
        if engine is SQLITE:
            catalog = Catalog(private_copy(original, copy_dir))
        else:       # PostgreSQL: one read-only snapshot of the database (files beside it: copy_dir)
            catalog = Catalog.reader(os.path.join(copy_dir, os.path.basename(original)), engine, snapshot=True)
        parity = Parity(archive, catalog, recover=False)
        return ReadOnlyStore(archive, catalog, copy_dir, original, protection=parity)
    except BaseException:
        archive.unlock()
        if copy_dir:
            shutil.rmtree(copy_dir, ignore_errors=True)
        raise


def check(store: Store, repair: bool = False,
          progress: Optional[Callable[[int], None]] = None) -> Report:
    """Check (and with ``repair`` mend) the archive against its catalog. A
    catalog that is empty or another archive's is refused (CatalogUnreadable):
    against it every block would be an orphan and every name a loss."""
    why = catalog_state(store.archive, store.catalog.path)
    if why is not None:
        disk = next(d.path for d in store.archive.conf.disks if d.index == store.archive.conf.catalog)
        raise CatalogUnreadable(f"{why}; 'webfs fsck --rebuild-catalog {disk}' says what a catalog "
                                "rebuilt from the disks would be, with --repair puts it in place")
    report = Report(read_only=not repair)
    if repair:      # block files an interrupted write left (meta/intents), before they count as damage
        for line in store.forget_unfinished_writes():
            report.add("unfinished-write", "meta/intents", line, repaired=True)
    check_names(store, report, repair)      # first: the block checks count references from the names
    store.protection.flush()
    check_parity(store, report, repair)
    seen = _check_files(store, repair, report, progress)
    _check_rows(store, repair, report, seen)
    for disk, why in sorted(store.archive.missing.items()):
        n = report.degraded.get(disk, 0)
        report.add("missing-disk", f"disk {disk}",
                   f"{why}; {n} block(s) on it read back through parity (degraded, not lost) "
                   f"until 'webfs rebuild --disk {disk} --to NEWDIR'", fixable=False)
    if repair:
        _prune_last_scrub(store)
        store.commit()
    return report


def _prune_last_scrub(store: Store) -> None:
    """Blocks the last scrub left damaged that read back good now (this repair
    mended them) are taken off the list status shows."""
    from ..parity import Member
    import json
    text = store.catalog.get_meta("last_scrub")
    if not text or not store.protection.has_parity:
        return
    last = json.loads(text)
    keep = []
    for where in last.get("damaged", []):
        parts = where.split()            # "block SIG[~N] on disk D"
        row = None
        if len(parts) == 5 and parts[0] == "block":
            sig, _, n = parts[1].partition("~")
            row = store.catalog.block(sig, int(n or 0))
        try:
            if row is not None and row.disk in store.archive.volumes:
                store.protection.read_member(Member.of(row), verify=True)
                continue
        except (OSError, WebfsError):
            pass                        # still damaged: it stays on the list
        keep.append(where)
    if keep != last.get("damaged", []):
        last["left"] = max(0, last.get("left", 0) - (len(last["damaged"]) - len(keep)))
        last["damaged"] = keep
        store.catalog.set_meta("last_scrub", json.dumps(last))


def _check_files(store: Store, repair: bool, report: Report,
                 progress: Optional[Callable[[int], None]]) -> dict[tuple[str, int], list[int]]:
    """Read every block file; return (sig, overflow) -> disks holding a good copy."""
    seen: dict[tuple[str, int], list[int]] = {}
    damaged = report.damaged
    for disk, vol in sorted(store.archive.volumes.items()):
        for rel in list(vol.stray_files()):
            where = f"disk {disk}: {rel}"
            if rel.endswith(TMP_SUFFIX):
                if repair:
                    vol.backend.remove(rel)
                report.add("leftover", where, "temporary file of an interrupted write", repair)
            else:
                report.add("stranger", where, "not a block file name; left alone")
        for sig, overflow, rel in vol.iter_blocks():
            report.blocks_checked += 1
            if progress:
                progress(1)
            where = f"disk {disk}: {rel}"
            row = store.catalog.block(sig, overflow)
            try:
                header, digest = _checked_block(store, vol, sig, overflow, row)
            except (CorruptBlock, OSError, WebfsError) as exc:
                fixed = repair and row is not None and row.disk == disk and restored(store, row)
                report.add("corrupt", where, str(exc).removeprefix(where + ": "), fixed,
                           block=row.id if row is not None and row.disk == disk else None)
                if fixed:
                    seen.setdefault((sig, overflow), []).append(disk)
                else:
                    damaged.add((sig, overflow, disk))
                continue
            seen.setdefault((sig, overflow), []).append(disk)
            if row is None:
                if repair:
                    vol.remove_block(sig, overflow)
                report.add("orphan", where, "block that no catalog entry knows", repair)
                continue
            if row.disk != disk:
                continue        # a second copy; _check_rows decides
            if header.refs != row.refs:
                if repair:
                    vol.set_refs(sig, overflow, row.refs)
                report.add("refs", where, f"header says Refs {header.refs}, catalog {row.refs}", repair)
            if row.sha256 is not None and row.sha256 != digest:
                # Only ever a missed duplicate, never a wrong one: the content says.
                if repair:
                    store.catalog.set_sha256(row, digest, replace=True)
                report.add("digest", where, "the catalog's digest is not the content's", repair)
    return seen


def _checked_block(store: Store, vol, sig: str, overflow: int, row: Optional[BlockRow]):
    """A block file's header and its document's digest, once the header agrees
    with the catalog row and the content with its signature and the header's
    digest; raise CorruptBlock (or OSError) if not."""
    header, payload = vol.read_block(sig, overflow)
    if row is not None and (header.size, header.stored, header.codec) != (row.size, row.stored, row.codec):
        raise CorruptBlock(f"header says Size {header.size}, Stored {header.stored}, "
                           f"Codec {header.codec}; the catalog {row.size}, {row.stored}, {row.codec}")
    data = codecs.get(header.codec).decode(payload)
    if len(data) != header.size or store.signature_fn(data) != sig:
        raise CorruptBlock("content does not match its signature")
    digest = content_digest(data)
    if header.sha256 is not None and header.sha256 != digest:
        raise CorruptBlock("content does not match its Digest")
    return header, digest


def _readable_through_parity(store: Store, row: BlockRow) -> Optional[str]:
    """None if the block's stripe rebuilds it (checked against its signature), else why not."""
    try:
        payload_from_redundancy(store, row)
    except (OSError, WebfsError) as exc:
        return f"its stripe cannot rebuild it ({exc})"
    return None


def _check_rows(store: Store, repair: bool, report: Report,
                seen: dict[tuple[str, int], list[int]]) -> None:
    cat = store.catalog
    used = cat.namespace_refs()
    for row in list(cat.blocks()):
        where = f"block {row.block_name}"
        holders = seen.get((row.sig, row.overflow), [])
        if row.disk not in holders:
            if holders:
                if repair:
                    cat.set_block_disk(row.id, holders[0])
                report.add("misplaced", where, f"catalog says disk {row.disk}, found on disk {holders[0]}", repair)
                row.disk = holders[0]
            elif row.disk in store.archive.missing:
                # Degraded, not lost, if its stripe gives it back: counted, not a finding
                # each (the missing disk is one finding); lost if not.
                why = _readable_through_parity(store, row)
                if why is None:
                    report.degraded[row.disk] = report.degraded.get(row.disk, 0) + 1
                else:
                    report.add("lost", where, f"on missing disk {row.disk}, and {why}", fixable=False,
                               block=row.id)
            elif (row.sig, row.overflow, row.disk) in report.damaged:
                pass            # its file is there but damaged: reported once, as corrupt
            else:
                fixed = repair and restored(store, row)
                report.add("missing", where, f"not on disk {row.disk}", fixed, block=row.id)
        for extra in holders:
            if extra != row.disk:
                if repair:
                    store.archive.volumes[extra].remove_block(row.sig, row.overflow)
                report.add("duplicate", where, f"second copy on disk {extra}", repair)
        expected = row.pins + used.get(row.id, 0)
        if row.refs != expected:
            counted = row.refs
            if repair:
                store.correct_refs(row, expected, mirror=row.disk in holders)
            report.add("refs", where, f"catalog counts {counted} references, "
                       f"{expected} exist", repair)


SHOWN = 5                       # examples printed of each kind of difference


def private_copy(original: str, into: str) -> str:
    """Copy a catalog and its write-ahead log into the directory ``into`` (the
    log as it is: a killed process's commits are in it, and opening the
    original would fold them in); return the copy's path."""
    copy = os.path.join(into, os.path.basename(original))
    for suffix in ("", "-wal"):
        if os.path.exists(original + suffix):
            shutil.copyfile(original + suffix, copy + suffix)
    return copy


def catalog_state(archive: Archive, copy: Optional[str]) -> Optional[str]:
    """Why the catalog in place is not usable as this archive's, or None when it
    opens, passes SQLite's quick_check and names this archive (catalogs made
    before they named it: knows one of the blocks on the disks, if they hold any).
    ``copy`` is a private copy of it (``private_copy``; None when there is no
    file): only the copy is opened, since even a read-only SQLite open of a
    WAL database makes files beside it."""
    vol = archive.volumes.get(archive.conf.catalog)
    if vol is None:
        return f"disk {archive.conf.catalog}, which holds the catalog, is missing"
    engine = catalog_engine(archive.conf, archive.backend_options)
    if engine is SQLITE:
        where = catalog_path(vol.root)
        if copy is None:
            return f"{where}: missing"
        try:
            check_catalog_file(copy)
        except CatalogUnreadable as exc:
            return str(exc).split(";")[0].replace(copy, where)
    else:
        where = f"the catalog in {engine.url}"
    cat = Catalog.reader(copy or "", engine, snapshot=engine is not SQLITE)
    try:
        owner = cat.get_meta(ARCHIVE_META)
        if owner and owner != archive.conf.uuid:
            return f"{where}: the catalog of another archive ({owner}), not of {archive.conf.uuid}"
        if cat.quick_check() != "ok":
            return f"{where}: damaged (SQLite's quick_check fails)"
        if owner:
            return None         # this archive's, maybe an older copy (S3: the bucket's)
        seen = False
        for sig, overflow in _blocks_on_disks(archive):
            if cat.block(sig, overflow) is not None:
                return None
            seen = True
        if not seen:
            return None
        if cat.block_count():
            return f"{where}: knows none of the blocks on the disks (not this archive's catalog)"
        return f"{where}: knows no block, but the disks hold blocks (an empty catalog)"
    except Exception as exc:
        if not database_error(exc):
            raise
        return f"{where}: damaged: {exc}"
    finally:
        cat.close()


def _blocks_on_disks(archive: Archive) -> Iterator[tuple[str, int]]:
    for vol in archive.volumes.values():
        for sig, overflow, _rel in vol.iter_blocks():
            yield sig, overflow


def _links(entries: dict[bytes, tuple]) -> set[frozenset]:
    by_inode: dict[int, set] = {}
    for p, e in entries.items():
        if not stat.S_ISDIR(e[1]):
            by_inode.setdefault(e[0], set()).add(p)
    return {frozenset(ps) for ps in by_inode.values() if len(ps) > 1}


FIELDS = ((1, "type or mode"), (2, "size"), (3, "mtime"), (4, "owner"), (5, "group"), (6, "content"),
          (7, "xattrs"))


def compare(current: str, rebuilt: str, archive: Archive) -> list[str]:
    """What replacing the catalog file ``current`` by ``rebuilt`` would change,
    one line per kind with a few examples; empty when nothing would. A
    symlink is compared by its target whichever way a catalog holds it: a
    rebuilt one knows it by its block only, read off ``archive``'s disks as
    readlink reads it (``NamespaceRows.target_in_block``), writing nothing."""
    old_cat, new_cat = Catalog.reader(current), Catalog.reader(rebuilt)
    reader = Store(archive, new_cat)        # its read only: no parity, no heat saved, no intents
    try:
        old, new = NamespaceRows(old_cat).listing(reader.read), NamespaceRows(new_cat).listing(reader.read)
        old_blocks, new_blocks = old_cat.block_refs(), new_cat.block_refs()
    finally:
        reader.writers.close()
        old_cat.close()
        new_cat.close()
    lines = list(_said("name(s) would be lost", sorted(set(old) - set(new))))
    lines += _said("name(s) would be added", sorted(set(new) - set(old)))
    both = sorted(set(old) & set(new))
    for index, what in FIELDS:
        lines += _said(f"name(s) would change {what}", [p for p in both if old[p][index] != new[p][index]])
    split = sorted(b" = ".join(sorted(g)) for g in _links(old) - _links(new))
    lines += _said("hard link(s) would come apart into copies", split)
    lines += _said("block(s) the catalog knows would be dropped",
                   [f"{s}~{o}".encode() for s, o in sorted(set(old_blocks) - set(new_blocks))])
    lines += _said("block(s) found on the disks would be added",
                   [f"{s}~{o}".encode() for s, o in sorted(set(new_blocks) - set(old_blocks))])
    lines += _said("block(s) would change references or pins",
                   [f"{s}~{o}".encode() for s, o in sorted(set(old_blocks) & set(new_blocks))
                    if old_blocks[(s, o)] != new_blocks[(s, o)]])
    return lines


def _said(what: str, items: list[bytes]) -> Iterator[str]:
    if items:
        shown = ", ".join(repr(i.decode("utf-8", "backslashreplace")) for i in items[:SHOWN])
        yield f"{len(items)} {what}: {shown}" + (" ..." if len(items) > SHOWN else "")
