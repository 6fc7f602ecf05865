"""What the checking and mending commands share: findings, the report that
collects them, the exit codes, and the one way a block is put back from
redundancy.

``fsck``, ``scrub`` and ``rebuild_disk`` build on this module and on nothing
of each other's. Exit codes follow e2fsck: 0 clean, 1 problems found and all
repaired, 4 problems left, 8 could not check.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional

from .. import codecs
from ..catalog import BlockRow
from ..errors import CorruptBlock, WebfsError
from ..signature import content_digest
from ..store import Store, header_of

log = logging.getLogger(__name__)

EXIT_CLEAN, EXIT_REPAIRED, EXIT_LEFT, EXIT_FAILED = 0, 1, 4, 8
FILES_SHOWN = 10                # files named after a check that leaves content damaged


@dataclass
class Finding:
    kind: str
    where: str
    what: str
    repaired: bool = False
    dry_run: bool = False           # found by a read-only check: --repair would try

    def __str__(self) -> str:
        mark = ("repaired" if self.repaired else
                "NOT repaired: read-only check, --repair would mend it" if self.dry_run else
                "NOT repaired")
        return f"{self.kind}: {self.where}: {self.what} [{mark}]"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    blocks_checked: int = 0
    read_only: bool = False
    degraded: dict[int, int] = field(default_factory=dict)     # missing disk -> blocks read through parity
    damaged: set[tuple[str, int, int]] = field(default_factory=set)   # (sig, overflow, disk) reported corrupt
    hit: set[int] = field(default_factory=set)      # ids of blocks whose content is left damaged or lost

    def add(self, kind: str, where: str, what: str, repaired: bool = False,
            fixable: bool = True, block: Optional[int] = None) -> Finding:
        """A problem; ``fixable``: one --repair would mend (said so in a read-only
        check); ``block``: the id of the block whose content it spoils, if any."""
        f = Finding(kind, where, what, repaired, self.read_only and fixable and not repaired)
        self.findings.append(f)
        if block is not None and not repaired:
            self.hit.add(block)
        log.info("%s", f)
        return f

    def files_hit(self, store: Store, shown: int = FILES_SHOWN) -> tuple[int, list[str]]:
        """The files whose content is in the blocks left damaged or lost (what
        a user has to restore, not block names): how many, and the paths of up
        to ``shown`` of them."""
        if not self.hit:
            return 0, []
        from ..indexer import Paths
        inodes = sorted({ino for ino, in store.catalog.query_in(
            "SELECT DISTINCT inode FROM contents WHERE block IN ({})", sorted(self.hit))})
        paths, named = Paths(store.catalog), []
        for ino in inodes:
            path = paths(ino)
            if path is not None:
                named.append("/" + path)
            if len(named) == shown:
                break
        return len(inodes), sorted(named)

    @property
    def exit_code(self) -> int:
        if not self.findings:
            return EXIT_CLEAN
        return EXIT_REPAIRED if all(f.repaired for f in self.findings) else EXIT_LEFT


def files_hit_lines(count: int, named: list[str]) -> list[str]:
    """``Report.files_hit`` as the lines fsck and scrub print after their findings."""
    if not count:
        return []
    lines = [f"{count} file(s) hold content in those blocks (left damaged or lost):"]
    lines += [f"  {name}" for name in named]
    if count > len(named):
        lines.append(f"  ... and {count - len(named)} more")
    return lines


def payload_from_redundancy(store: Store, row: BlockRow, gate=None) -> bytes:
    """A block's payload rebuilt from redundancy and checked against its
    signature and its digest (if it has one); raise why it cannot be.
    ``gate`` bounds the reads per disk (see ``Parity.reconstruct``)."""
    payload = store.protection.reconstruct(row, gate=gate) if gate else store.protection.reconstruct(row)
    data = codecs.get(row.codec).decode(payload)
    if len(data) != row.size or store.signature_fn(data) != row.sig or \
            (row.sha256 is not None and content_digest(data) != row.sha256):
        raise CorruptBlock(f"block {row.block_name}: what its stripe gives does not match its signature")
    return payload


def restore_block(store: Store, row: BlockRow, gate=None) -> None:
    """Write a damaged or lost block back on its disk from redundancy, byte for
    byte as it was (its header from the catalog row); raise why if it cannot be."""
    payload = payload_from_redundancy(store, row, gate)
    header = header_of(row)
    store.archive.volumes[row.disk].write_block(header, payload, row.overflow, fsync=store.fsync)
    store.forget_damage(row)


def restored(store: Store, row: BlockRow) -> bool:
    """``restore_block``, for a repair that reports the outcome as a finding:
    whether it worked; why not goes to the log."""
    try:
        restore_block(store, row)
    except (OSError, WebfsError) as exc:
        log.warning("block %s on disk %d: not restored from redundancy: %s", row.block_name, row.disk, exc)
        return False
    return True
