"""Scrub: read everything, check every block against its signature and every
stripe's parity against its members, and repair from redundancy.

This module owns the look at one stripe (``examine``) and what is done about
what it finds (``check_stripe``), at two depths: *deep* (scrub) reads every
member and compares the XOR of their payloads with the parity payload;
*shallow* (``check_parity``, which fsck runs) reads only the parity headers
and compares their member lists with the catalog. Both also find orphan
parity files. A stripe that looks wrong is looked at again under the
catalog lock before anything is said or done, so a running mount's updates
are not taken for damage.

A damaged block is rewritten byte-identical from its stripe; a parity file
that is unreadable, stale or wrong is recomputed from its members (each
checked against its signature first). Blocks in no stripe are checked too,
and with ``--repair`` put into one when another disk can take their parity.
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from .. import admin, testkill
from ..admin import DiskGates, Pace, parallel
from ..backends.local import TMP_SUFFIX
from ..block import HEADER_SIZE, utc_timestamp
from ..catalog import BlockRow
from ..errors import CorruptParity, WebfsError
from ..parity import Gate, Member, Parity, ParityHeader, parity_files, xor_payloads
from ..store import Store
from .report import EXIT_CLEAN, EXIT_LEFT, Report, files_hit_lines, restored

log = logging.getLogger(__name__)


@dataclass
class Exam:
    """What one look at a stripe found."""
    rows: list[BlockRow] = field(default_factory=list)
    parity_disk: Optional[int] = None
    parity_missing: bool = False        # its disk is missing: nothing to check here
    trouble: str = ""                   # why the parity file cannot be used
    stale: bool = False                 # it lists other blocks than the catalog
    dirty: bool = False                 # an update did not finish
    mismatch: bool = False              # its payload is not the XOR of the members
    bad: dict[int, str] = field(default_factory=dict)     # block id -> what is wrong
    unavailable: int = 0                # members on missing disks
    refs: dict[int, int] = field(default_factory=dict)    # block id -> its header's Refs, if not the catalog's

    @property
    def clean(self) -> bool:
        return not (self.trouble or self.stale or self.dirty or self.mismatch or self.bad or self.refs)


def examine(parity: Parity, stripe_id: str, deep: bool, gate: Optional[Gate] = None) -> Exam:
    """Look at a stripe: its parity file, and (deep) every member and the XOR.
    ``gate(disk)`` bounds the reads per disk (scrub runs many stripes at once)."""
    with parity.catalog.lock:
        stripe = parity.stripe(stripe_id)
        rows = parity.members(stripe_id)
    if stripe is None:
        return Exam()
    exam = Exam(rows, stripe.parity_disk, dirty=stripe.state != "ok")
    present = parity.archive.volumes
    header: Optional[ParityHeader] = None
    with parity.locked(stripe_id):
        if stripe.parity_disk not in present:
            exam.parity_missing = True
        else:
            try:
                header, payload = parity.read_parity(stripe_id, stripe.parity_disk, gate)
            except (OSError, CorruptParity) as exc:
                exam.trouble = f"parity file unreadable: {exc}"
        if header is not None:
            exam.stale = set(header.members) != {Member.of(r) for r in rows}
        if not deep:
            return exam
        payloads = []
        for r in rows:
            if r.disk not in present:
                exam.unavailable += 1
                continue
            try:
                payloads.append(parity.read_member(Member.of(r), verify=True, gate=gate))
            except (OSError, WebfsError) as exc:
                exam.bad[r.id] = str(exc)
                continue
            refs = header_refs(parity.archive, r)
            if refs is not None and refs != r.refs:
                exam.refs[r.id] = refs
        if header is not None and not (exam.stale or exam.bad or exam.unavailable):
            try:
                exam.mismatch = xor_payloads(payloads, header.length) != payload
            except OverflowError:
                exam.mismatch = True
    return exam


def check_stripe(store: Store, parity: Parity, stripe_id: str, report: Report,
                 repair: bool, deep: bool, gate: Optional[Gate] = None) -> Exam:
    """Examine a stripe; if it looks wrong, look again under the catalog lock,
    report what is wrong and (repair) mend it."""
    exam = examine(parity, stripe_id, deep, gate)
    if exam.clean:
        _proven_good(store, exam, deep)
        return exam
    with store.catalog.lock:
        if parity.busy(stripe_id):
            return exam                 # a new block's update is under way
        exam = examine(parity, stripe_id, deep)
        if exam.clean:
            _proven_good(store, exam, deep)
            return exam
        _proven_good(store, exam, deep)
        for row in exam.rows:
            if row.id in exam.bad:
                fixed = repair and restored(store, row)
                report.add("corrupt", f"block {row.block_name} on disk {row.disk}", exam.bad[row.id], fixed,
                           block=row.id)
            elif row.id in exam.refs:
                _refs_behind(store, row, exam.refs[row.id], report, repair)
        if exam.trouble or exam.stale or exam.dirty or exam.mismatch:
            what = exam.trouble or ("parity lists other blocks than the catalog" if exam.stale else
                                    "parity is not the XOR of its members" if exam.mismatch else
                                    "marked dirty: an update did not finish")
            fixed = False
            if repair:
                try:
                    parity.reconcile(stripe_id, force=deep or bool(exam.trouble))
                    fixed = True
                except (OSError, WebfsError) as exc:
                    what += f"; cannot recompute it: {exc}"
            report.add("parity", f"stripe {stripe_id} on disk {exam.parity_disk}", what, fixed)
    return exam


def header_refs(archive, row: BlockRow) -> Optional[int]:
    """The Refs count in a block's header on its disk (None if it cannot be read
    now: a read through its stripe has said what is wrong with it)."""
    vol = archive.volumes.get(row.disk)
    if vol is None:
        return None
    try:
        return vol.read_header(row.sig, row.overflow).refs
    except (OSError, WebfsError):
        return None


def _refs_behind(store: Store, row: BlockRow, header: int, report: Report, repair: bool) -> None:
    """(Under the catalog lock.) A Refs header that is not the catalog's count
    (a disk away while references came and went): reported, and with
    ``repair`` written from the catalog. Not while a count is being written."""
    if store.refs_in_flight:
        return
    fixed = repair and store.mirror_refs(row)
    report.add("refs", f"block {row.block_name} on disk {row.disk}",
               f"header says Refs {header}, catalog {row.refs}", fixed)


def _proven_good(store: Store, exam: Exam, deep: bool) -> None:
    """Members a deep look read back and checked against their signatures are
    no longer damaged, whatever an earlier read found."""
    if deep:
        for row in exam.rows:
            if row.id not in exam.bad and row.disk in store.archive.volumes:
                store.forget_damage(row)


def check_parity_files(store: Store, parity: Parity, report: Report, repair: bool,
                       temporaries: bool) -> int:
    """Find parity files that no stripe (or not this disk's) owns; with
    ``temporaries``, also leftovers of interrupted writes. Returns files seen."""
    owner = parity.parity_disks()
    seen = 0
    for disk, vol in sorted(store.archive.volumes.items()):
        for stripe_id, rel in parity_files(vol):
            seen += 1
            where = f"disk {disk}: {rel}"
            if stripe_id is None:
                if not rel.endswith(TMP_SUFFIX):
                    report.add("stranger", where, "not a parity file name; left alone")
                elif temporaries:
                    if repair:
                        vol.backend.remove(rel)
                    report.add("leftover", where, "temporary file of an interrupted write", repair)
                continue
            if owner.get(stripe_id) == disk:
                continue
            with store.catalog.lock:            # a stripe made since the list was read?
                stripe = parity.stripe(stripe_id)
                if stripe is not None and stripe.parity_disk == disk:
                    continue
                if repair:
                    vol.backend.remove(rel)
            what = ("parity file of a stripe the catalog does not know" if stripe is None else
                    f"parity file of a stripe whose parity is on disk {stripe.parity_disk}")
            report.add("orphan", where, what, repair)
    return seen


def check_parity(store: Store, report: Report, repair: bool) -> None:
    """fsck's share: what open-time recovery did, every parity header against
    the catalog, dirty stripes, orphan and leftover parity files."""
    parity = store.protection
    if not parity.has_parity:
        return
    for stripe_id, done in parity.recovered:
        report.add("parity", f"stripe {stripe_id}", f"{done} (found at open: an interrupted update)", True)
    if not repair:
        # A read-only open does not reconcile what an interrupted process left: say it.
        dirty = set(parity.stripe_ids("state != 'ok'"))
        for stripe_id in sorted(parity.interrupted() - dirty):
            report.add("parity", f"stripe {stripe_id}", "listed in meta/parity-intent: an update was "
                       "interrupted, its parity may not match; --repair (or a mount) recomputes it")
    for stripe_id in parity.stripe_ids():
        check_stripe(store, parity, stripe_id, report, repair, deep=False)
    check_parity_files(store, parity, report, repair, temporaries=True)
    if repair:
        store.commit()


READS_PER_DISK = 4              # reads at once on each disk
MAX_THREADS = 16                # stripes looked at once, at most


def scrub(store: Store, progress: admin.Progress, repair: bool = False,
          max_rate: Optional[float] = None) -> admin.Result:
    """Read every block and parity file; verify signatures and parity; repair
    from redundancy with ``repair``. Exit 0 when no damage is left, 4 when some is.
    Stripes are looked at many at once (a few reads at a time on each disk);
    ``max_rate`` (MB/s read) leaves the disks room for other work."""
    parity = store.protection
    if not parity.has_parity:
        raise WebfsError("this archive is opened without parity; nothing to scrub against")
    parity.flush()                  # parity written behind is checked as it is on the disks
    started = time.monotonic()
    reads_before = Counter(parity.reads)
    report = Report()
    counts = Counter()
    stripe_ids = parity.stripe_ids()
    loose = store.catalog.block_ids(unprotected=True)
    progress.set_total(len(stripe_ids) + len(loose), "scrubbing")
    pace = Pace(max_rate)
    gate = DiskGates(READS_PER_DISK)
    threads = min(MAX_THREADS, READS_PER_DISK * max(1, len(store.archive.volumes)))

    def look(stripe_id: str) -> Exam:
        exam = check_stripe(store, parity, stripe_id, report, repair, deep=True, gate=gate)
        pace.wrote(sum(r.stored + HEADER_SIZE for r in exam.rows) + max(
            (r.stored for r in exam.rows), default=0))      # about what was read
        return exam

    def took(_stripe_id: str, exam: Exam) -> None:
        counts["stripes"] += 1
        counts["blocks"] += len(exam.rows) - exam.unavailable
        counts["unavailable"] += exam.unavailable
        progress.advance(1)
    parallel(stripe_ids, look, took, progress, threads)
    for block_id in loose:
        if progress.stopping:
            break
        _scrub_loose(store, parity, block_id, report, repair, counts)
        progress.advance(1)
    counts["parity_files"] = check_parity_files(store, parity, report, repair, temporaries=False)
    for disk, why in sorted(store.archive.missing.items()):
        report.add("missing-disk", f"disk {disk}", f"{why}; its blocks are read from parity "
                   f"until 'webfs rebuild --disk {disk} --to NEWDIR'")
    if repair:
        store.commit()
    return _scrub_result(store, parity, report, counts, progress.stopping,
                         time.monotonic() - started, parity.reads - reads_before)


def _scrub_loose(store: Store, parity: Parity, block_id: int, report: Report, repair: bool,
                 counts: Counter) -> None:
    """Check a block in no stripe; with repair, put it into one."""
    row = store.catalog.block_by_id(block_id)
    if row is None or row.stripe is not None:
        return
    where = f"block {row.block_name} on disk {row.disk}"
    if row.disk not in store.archive.volumes:
        counts["unavailable"] += 1
        report.add("lost", where, "its disk is missing and it is in no parity stripe", block=row.id)
        return
    counts["blocks"] += 1
    try:
        payload = parity.read_member(Member.of(row), verify=True)
    except (OSError, WebfsError) as exc:
        report.add("corrupt", where, f"{exc}; it is in no parity stripe", block=row.id)
        return
    store.forget_damage(row)
    testkill.point("scrub-after-read")
    with store.catalog.lock:            # the count as it is now, not as it was listed
        row = store.catalog.block_again(row)     # None: freed since (its id maybe another block's now)
        refs = header_refs(store.archive, row) if row is not None else None
        if refs is not None and refs != row.refs:
            _refs_behind(store, row, refs, report, repair)
    if row is not None and repair and parity.protect(row, payload):
        counts["protected"] += 1


def _scrub_result(store: Store, parity: Parity, report: Report, counts: Counter, stopped: bool,
                  seconds: float, reads: Counter) -> admin.Result:
    left = [f for f in report.findings if not f.repaired]
    result = admin.Result(exit_code=EXIT_LEFT if left or stopped else EXIT_CLEAN)
    for f in report.findings:
        result.say(str(f))
    hit, named = report.files_hit(store)
    for line in files_hit_lines(hit, named):
        result.say(line)
    unprotected = store.catalog.block_count(unprotected=True)
    read = sum(reads.values())
    result.say(f"{'interrupted: ' if stopped else ''}scrubbed {counts['blocks']} block(s) in "
               f"{counts['stripes']} stripe(s) and {counts['parity_files']} parity file(s), "
               f"{read / 1e6:.1f} MB read in {seconds:.1f} s; {len(report.findings)} problem(s), "
               f"{len(report.findings) - len(left)} repaired, {len(left)} left")
    if counts["protected"]:
        result.say(f"put {counts['protected']} unprotected block(s) into parity stripes")
    if unprotected:
        result.say(f"{unprotected} block(s) are in no parity stripe"
                   + ("" if counts["protected"] else "; 'webfs scrub --repair' protects them if it can"))
    result.figures = {
        "blocks": counts["blocks"], "stripes": counts["stripes"], "parity_files": counts["parity_files"],
        "unavailable": counts["unavailable"], "protected": counts["protected"],
        "unprotected": unprotected, "problems": len(report.findings), "left": len(left),
        "findings": [vars(f) for f in report.findings], "interrupted": stopped,
        "files_hit": hit, "files_hit_shown": named,
        "seconds": round(seconds, 3), "bytes_read": read,
        "bytes_read_per_disk": {str(d): n for d, n in sorted(reads.items())},
    }
    with store.catalog.lock:
        store.catalog.set_meta("last_scrub", json.dumps({
            "finished": utc_timestamp(), "blocks": counts["blocks"], "problems": len(report.findings),
            "left": len(left), "interrupted": stopped,
            "damaged": [f.where for f in left if f.kind in ("corrupt", "lost")][:20]}))
        store.catalog.commit()
    return result
