"""Checking an archive against itself, and mending what can be mended.

``check`` reads every block file on every present disk and every catalog
row, and reports each problem as a ``Finding``: a header that does not
parse, content that does not match its signature, a catalog row whose
block is missing, a block no row knows (an orphan), reference counts that
disagree (catalog against namespace and pins, header against catalog),
and leftovers of interrupted writes; and (``webfs.scrub.check_parity``)
parity files that do not parse or list other blocks than the catalog,
stripes left dirty by an interrupted update, and orphan parity files. With
``repair`` it fixes what it can (refs, orphans, leftovers, blocks found on
another disk, parity brought up to date; damaged blocks through the store's
protection) and says what it could not.

Exit codes follow e2fsck: 0 clean, 1 problems found and all repaired,
4 problems left, 8 could not check.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Optional

from . import codecs
from .backends.local import TMP_SUFFIX
from .block import BlockHeader
from .catalog import BlockRow
from .errors import CorruptBlock, WebfsError
from .store import Store

log = logging.getLogger(__name__)

EXIT_CLEAN, EXIT_REPAIRED, EXIT_LEFT, EXIT_FAILED = 0, 1, 4, 8


@dataclass
class Finding:
    kind: str
    where: str
    what: str
    repaired: bool = False

    def __str__(self) -> str:
        mark = "repaired" if self.repaired else "NOT repaired"
        return f"{self.kind}: {self.where}: {self.what} [{mark}]"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    blocks_checked: int = 0

    def add(self, kind: str, where: str, what: str, repaired: bool = False) -> Finding:
        f = Finding(kind, where, what, repaired)
        self.findings.append(f)
        log.info("%s", f)
        return f

    @property
    def exit_code(self) -> int:
        if not self.findings:
            return EXIT_CLEAN
        return EXIT_REPAIRED if all(f.repaired for f in self.findings) else EXIT_LEFT


def check(store: Store, repair: bool = False,
          progress: Optional[Callable[[int], None]] = None) -> Report:
    from .scrub import check_parity     # scrub builds on this module's Report
    report = Report()
    store.protection.flush()
    check_parity(store, report, repair)
    seen = _check_files(store, repair, report, progress)
    _check_rows(store, repair, report, seen)
    if repair:
        store.commit()
    return report


def _check_files(store: Store, repair: bool, report: Report,
                 progress: Optional[Callable[[int], None]]) -> dict[tuple[str, int], list[int]]:
    """Read every block file; return (sig, overflow) -> disks holding a good copy."""
    seen: dict[tuple[str, int], list[int]] = {}
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
                header, payload = vol.read_block(sig, overflow)
                data = codecs.get(header.codec).decode(payload)
                if len(data) != header.size or store.signature_fn(data) != sig:
                    raise CorruptBlock("content does not match its signature")
            except (CorruptBlock, OSError, WebfsError) as exc:
                fixed = repair and row is not None and row.disk == disk and _rewrite_from_redundancy(store, row)
                report.add("corrupt", where, str(exc).removeprefix(where + ": "), fixed)
                if fixed:
                    seen.setdefault((sig, overflow), []).append(disk)
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
    return seen


def _rewrite_from_redundancy(store: Store, row: BlockRow) -> bool:
    """Put a good copy of a damaged block back on its disk, if redundancy has one."""
    try:
        restore_block(store, row)
    except WebfsError:
        return False
    return True


def restore_block(store: Store, row: BlockRow) -> None:
    """Write a damaged or lost block back on its disk from redundancy, byte for
    byte as it was (its header from the catalog row); raise why if it cannot be."""
    payload = store.protection.reconstruct(row)
    data = codecs.get(row.codec).decode(payload)
    if len(data) != row.size or store.signature_fn(data) != row.sig:
        raise CorruptBlock(f"block {row.block_name}: what its stripe gives does not match its signature")
    header = BlockHeader(row.sig, row.size, row.stored, row.codec, row.refs, row.created, row.name)
    store.archive.volumes[row.disk].write_block(header, payload, row.overflow, fsync=store.fsync)


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
                report.add("unavailable", where, f"on missing disk {row.disk}", False)
            else:
                fixed = repair and _rewrite_from_redundancy(store, row)
                report.add("missing", where, f"not on disk {row.disk}", fixed)
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

