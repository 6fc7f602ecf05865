"""Rebuild: put a dead disk's blocks and parity files on a replacement.

This module owns ``webfs rebuild --disk N --to NEWDIR``: it makes NEWDIR disk
N of the archive (the same disk uuid in ``WEBFS-DISK``, the new path in
``webfs.conf`` on every disk), then writes every block the catalog places on
disk N, byte-identical (payload from its stripe, header from the catalog
row), and recomputes every parity file whose stripe keeps its parity there.

It is resumable: ``meta/REBUILDING`` on the new disk says a rebuild has not
finished, and a second run into the same directory skips blocks that are
there and match their signature, and parity files that list their stripe's
members. ``max_rate`` (MB/s of rebuilt bytes) leaves the survivors room for
other work. The figures count the bytes read from each surviving disk, to
compare with the (G-1)/(C-1) share Golubchik & Muntz predict for declustered
parity (``measure`` runs a rebuild for the benchmark).
"""
from __future__ import annotations

import logging
import os
import time
from collections import Counter
from typing import Optional

from .. import admin
from ..admin import DiskGates, Pace, parallel
from ..archive import read_disk_id
from ..mkfs import disk_id_text, make_disk_root, make_private, not_empty, private_note
from ..backends import is_url, normalize, open_backend
from ..block import HEADER_SIZE, utc_timestamp
from ..catalog import BlockRow
from ..errors import ArchiveError, CorruptBlock, WebfsError
from ..parity import REBUILD_MARKER, Member, Parity
from ..assembly import open_archive
from ..store import Store
from ..volume import DISK_ID_FILE, Volume
from .report import EXIT_CLEAN, EXIT_LEFT, restore_block

READS_PER_DISK = 4              # reads at once on each surviving disk
MAX_THREADS = 16                # blocks (or parity files) rebuilt at once, at most

log = logging.getLogger(__name__)


def replacement(store: Store, index: int, to: str) -> Volume:
    """Make directory ``to`` disk ``index`` of the archive (or find that it
    already is, from an interrupted rebuild) and bring it into the archive."""
    archive = store.archive
    info = archive.conf.disk(index)
    to = normalize(to)
    present = archive.volumes.get(index)
    if present is not None and not present.backend.present():
        archive.lose(index, "it does not answer")      # dead, but nothing had asked it since
        present = None
    if present is not None:
        if present.backend.location != to and os.path.realpath(present.root) != os.path.realpath(to):
            raise ArchiveError(f"disk {index} is present at {present.root}; 'webfs rebuild' "
                               "replaces a missing disk")
        return present
    options = archive.backend_options
    if not_empty(to, options):
        try:
            ident = read_disk_id(to, options=options)
        except ArchiveError:
            ident = {}
        if ident.get("Archive") != archive.conf.uuid or ident.get("Disk") != info.uuid:
            raise ArchiveError(f"{to}: not empty, and not disk {index} of this archive; "
                               "refusing to rebuild into it")
        if not is_url(to):
            make_private(to)
    else:
        make_disk_root(to, options)
    backend = open_backend(to, options=options)
    backend.write_atomic(REBUILD_MARKER, f"rebuild of disk {index} started {utc_timestamp()}; "
                         f"run 'webfs rebuild --disk {index} --to {to}' again to finish it\n".encode())
    backend.write_atomic(DISK_ID_FILE, disk_id_text(archive.conf, info).encode(), fsync=True)
    info.path = to
    vol = Volume(backend, index, info.uuid, archive.conf.depth)
    # Replace the maps whole: readers in other threads iterate them.
    archive.volumes = {**archive.volumes, index: vol}
    archive.missing = {d: why for d, why in archive.missing.items() if d != index}
    archive.lost = {d: v for d, v in archive.lost.items() if d != index}    # replaced: never taken back
    archive.save_config()
    log.info("disk %d is now %s", index, to)
    return vol


def _present(parity: Parity, vol: Volume, row: BlockRow) -> bool:
    """Is the block on the new disk already, whole and matching its signature?"""
    try:
        header, payload = vol.read_block(row.sig, row.overflow)
    except (OSError, CorruptBlock):
        return False
    return header.refs == row.refs and parity.verified(Member.of(row), payload)


def rebuild(store: Store, progress: admin.Progress, disk: int, to: str,
            max_rate: Optional[float] = None) -> admin.Result:
    """Reconstruct every block and parity file of disk ``disk`` into ``to``."""
    parity = store.protection
    if not parity.has_parity:
        raise WebfsError("this archive is opened without parity; nothing to rebuild from")
    parity.flush()
    vol = replacement(store, disk, to)
    block_ids = store.catalog.block_ids(disk=disk)
    stripe_ids = parity.stripe_ids("parity_disk=?", (disk,))
    progress.set_total(len(block_ids) + len(stripe_ids), f"rebuilding disk {disk}")
    started = time.monotonic()
    reads_before = Counter(parity.reads)
    pace = Pace(max_rate)
    counts: Counter = Counter()
    lost: list[str] = []
    # Every block needs a read from each other disk of its stripe: many blocks
    # at once keep every survivor busy; a gate per disk bounds what waits on
    # one, so a slow disk queues only its own reads.
    gate = DiskGates(READS_PER_DISK)
    threads = min(MAX_THREADS, READS_PER_DISK * max(1, len(store.archive.volumes) - 1))

    def restore(block_id: int) -> tuple[str, str, int]:
        row = store.catalog.block_by_id(block_id)
        if row is None or row.disk != disk:
            return "gone", "", 0
        if _present(parity, vol, row):
            return "blocks_present", "", 0
        try:
            restore_block(store, row, gate=gate)
        except (OSError, WebfsError) as exc:
            return "lost", f"block {row.block_name}: {exc}", 0
        written = HEADER_SIZE + row.stored
        pace.wrote(written)             # in the worker: the pace holds back every thread
        return "blocks_rebuilt", "", written

    def restore_parity(stripe_id: str) -> tuple[str, str, int]:
        try:
            done = parity.rebuild_parity(stripe_id, gate=gate)
        except (OSError, WebfsError) as exc:
            return "lost", f"parity of stripe {stripe_id}: {exc}", 0
        if done is None:
            return "parity_present", "", 0
        try:
            written = vol.backend.size(vol.parity_path(stripe_id))
        except OSError:
            written = 0                 # a stripe emptied meanwhile: its file is gone
        pace.wrote(written)
        return "parity_rebuilt", "", written

    def took(_item, result: tuple[str, str, int]) -> None:
        what, why, written = result
        if what == "lost":
            lost.append(why)
        elif what != "gone":
            counts[what] += 1
        counts["bytes_written"] += written
        progress.advance(1)

    parallel(block_ids, restore, took, progress, threads)
    if not progress.stopping:
        parallel(stripe_ids, restore_parity, took, progress, threads)
    store.commit()
    stopped = progress.stopping
    if not stopped:
        vol.backend.remove(REBUILD_MARKER)
    return _rebuild_result(store, disk, vol, counts, lost, stopped,
                           time.monotonic() - started, parity.reads - reads_before)


def _rebuild_result(store: Store, disk: int, vol: Volume, counts: Counter, lost: list[str],
                    stopped: bool, seconds: float, reads: Counter) -> admin.Result:
    conf = store.archive.conf
    g, c = min(conf.group_size, len(conf.disks)), len(conf.disks)
    written = counts["bytes_written"]
    survivors = {str(d): reads.get(d, 0) for d in sorted(store.archive.volumes) if d != disk}
    result = admin.Result(exit_code=EXIT_LEFT if lost or stopped else EXIT_CLEAN)
    for line in lost:
        result.say(f"lost: {line}")
    result.say(f"{'interrupted (run again to resume): ' if stopped else ''}disk {disk} at {vol.backend.location} "
               f"({private_note(vol.backend.location)}): "
               f"{counts['blocks_rebuilt']} block(s) rebuilt, {counts['blocks_present']} already there, "
               f"{counts['parity_rebuilt']} parity file(s) rebuilt, {counts['parity_present']} already there, "
               f"{len(lost)} lost; {written / 1e6:.1f} MB written in {seconds:.1f} s "
               f"({written / 1e6 / seconds if seconds else 0:.1f} MB/s)")
    if written:
        shares = ", ".join(f"disk {d} {n / written:.2f}" for d, n in survivors.items())
        result.say(f"read from each survivor per byte rebuilt: {shares} "
                   f"(declustering predicts (G-1)/(C-1) = {(g - 1) / max(c - 1, 1):.2f})")
    result.figures = {
        **{k: counts[k] for k in ("blocks_rebuilt", "blocks_present", "parity_rebuilt", "parity_present")},
        "lost": lost, "interrupted": stopped, "seconds": round(seconds, 3), "bytes_written": written,
        "mb_per_s": round(written / 1e6 / seconds, 3) if seconds else None,
        "bytes_read_per_disk": survivors,
        "read_share_per_disk": {d: round(n / written, 4) if written else None for d, n in survivors.items()},
        "predicted_share": round((g - 1) / max(c - 1, 1), 4), "group_size": g, "disks": c,
    }
    return result


def measure(disk: str, index: int, to: str, max_rate: Optional[float] = None) -> dict:
    """Rebuild disk ``index`` of the (unmounted) archive that ``disk`` belongs
    to into ``to``, and return the figures: throughput and bytes read from each
    survivor. For tools/bench."""
    store = open_archive(disk, holder="webfs rebuild (benchmark)")
    try:
        return rebuild(store, admin.Progress(), disk=index, to=to, max_rate=max_rate).figures
    finally:
        store.close()
