"""Opening and closing an archive's namespace and journal, and crash recovery:
the one place that both a mount's daemon and an admin command on an
unmounted archive (``webfs import`` without a mount) go through, as borg's
``with_repository`` is for its commands.

``open_namespace`` makes the journal and namespace, recovers what an
unclean stop left (the catalog says ``clean = 0``; ``clean = rebuilt``: the
first open of a catalog ``fsck --rebuild-catalog`` wrote) and hands back what it
mended; ``mark_in_use`` marks the catalog unclean while names are being
made; ``close_namespace`` commits, checkpoints when the JOURNAL is past its
bound, syncs and marks the catalog clean. ``names`` is the namespace a
command makes names in: the mount's, or one opened and closed around it.
``records_where_they_belong`` writes the MANIFEST and JOURNAL on the disks
the rule names after a disk came or went.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator, Optional

from .assembly import OpenArchive
from .errors import WebfsError
from .manifest import JOURNAL_LIMIT, Journal, record_disks
from .namespace import Namespace
from .store import Store

log = logging.getLogger(__name__)


RECOVERY_KINDS = (("freed nameless inode", "nameless inode(s) freed"),
                  ("refs", "reference count(s) corrected"),
                  ("removed", "unfinished write(s) removed"),
                  ("put into a parity stripe", "block(s) put into parity"),
                  ("cannot be protected", "block(s) left without parity"))


# The clean mark ``fsck --rebuild-catalog`` leaves. Decided: a rebuilt catalog
# is not marked clean ("1"). Its names and counts agree, but blocks whose
# parity was lost are in no stripe and the MANIFEST on the disks is not yet
# written from it; the first open runs the recovery pass (which protects
# those blocks) and the mount rewrites the MANIFEST. Only what it is called
# changes: not an unclean stop, the first use of a rebuilt catalog.
REBUILT = "rebuilt"
REBUILT_SAID = "the catalog was rebuilt from the disks (webfs fsck --rebuild-catalog): first use of it"


def recovery_summary(said: list[str], stripes: list, log_path: str, rewrote: bool = True) -> str:
    """One line for the mount's recovery after an unclean stop (or its first
    open of a rebuilt catalog): counts by kind; the details (one line each)
    are in webfs.log."""
    counts = [f"{len(stripes)} stripe(s) reconciled"] if stripes else []
    for needle, what in RECOVERY_KINDS:
        n = sum(needle in line for line in said)
        if n:
            counts.append(f"{n} {what}")
    rebuilt = REBUILT_SAID in said
    other = len(said) - rebuilt - sum(any(k in line for k, _ in RECOVERY_KINDS) for line in said)
    if other:
        counts.append(f"{other} other repair(s)")
    return (("first mount after a rebuilt catalog: " if rebuilt else "recovered from an unclean stop: ")
            + (", ".join(counts) or "nothing to mend")
            + ("; MANIFEST rewritten" if rewrote else "") + f"; details in {log_path}")


def recover_after_crash(store: Store, ns: Namespace) -> list[str]:
    """Mend what an unclean stop can leave: nameless inodes, reference counts
    that committed halfway, blocks written but never committed."""
    said = []
    for ino in ns.orphans():
        ns.free(ino)
        said.append(f"freed nameless inode {ino}")
    used = store.catalog.namespace_refs()
    for row in list(store.catalog.blocks()):
        expected = row.pins + used.get(row.id, 0)
        if expected != row.refs:
            said.append(f"block {row.block_name}: refs {row.refs} -> {expected}")
            store.correct_refs(row, expected)
    said += store.forget_unfinished_writes()
    # Blocks whose parity was still in memory (written behind) when the daemon died.
    for row in list(store.catalog.blocks("stripe IS NULL")):
        try:
            if store.protection.protect(row, store.read_payload(row)):
                said.append(f"block {row.block_name}: put into a parity stripe")
        except WebfsError as exc:
            said.append(f"block {row.block_name}: cannot be protected now ({exc})")
    store.commit()
    return said


def open_namespace(store: Store, journal_limit: int = JOURNAL_LIMIT, others_mounted: bool = False
                   ) -> tuple[Namespace, Journal, Optional[list[str]]]:
    """The namespace and journal of an archive being opened, the store's
    commits journaled, and what recovery mended (None: it was stopped
    cleanly, or ``others_mounted``: other machines' mounts hold it now).
    The caller checkpoints as it sees fit, then ``mark_in_use``."""
    journal = Journal(store.archive, limit=journal_limit)
    ns = Namespace(store, journal=journal.record)
    journal.namespace = ns
    store.use_journal(journal)
    ns.ensure_root(os.getuid(), os.getgid())
    mark = store.catalog.get_meta("clean")
    if mark not in ("0", REBUILT) or others_mounted:
        return ns, journal, None
    said = ([REBUILT_SAID] if mark == REBUILT else []) + recover_after_crash(store, ns)
    for line in said:
        log.info("recovery: %s", line)
    return ns, journal, said


def mark_in_use(store: Store) -> None:
    """Marked unclean while names are being made: a stop before
    ``close_namespace`` is recovered at the next open."""
    store.catalog.set_meta("clean", "0")
    store.commit()


def close_namespace(store: Store, ns: Namespace, journal: Journal) -> None:
    """Commit, checkpoint only when the JOURNAL is past its bound, on the wrong
    disks or without a MANIFEST under it (so an import costs what it imports,
    not what the archive already holds), sync and mark the catalog clean."""
    with store.catalog.lock:
        store.commit()
        if journal.wants_checkpoint():
            journal.checkpoint(ns)
        store.trim_intents()
    store.sync()
    store.catalog.set_meta("clean", "1")
    store.commit()
    store.use_journal(None)
    journal.close()


@contextlib.contextmanager
def names(archive: OpenArchive) -> Iterator[Namespace]:
    """The namespace a command makes names in: the mount's, or (an unmounted
    archive) one opened for the command, recovered first if a mount or an
    import died, and closed after it."""
    if archive.read_only:
        raise WebfsError("the archive is mounted read-only")
    if archive.namespace is not None:
        yield archive.namespace
        return
    ns, journal, said = open_namespace(archive.store)
    if said is not None and REBUILT_SAID in said:
        log.info("first use of a rebuilt catalog: checked (%d repair(s))", len(said) - 1)
    elif said is not None:
        log.warning("the archive was not unmounted cleanly; recovered (%d repair(s))", len(said))
    mark_in_use(archive.store)
    try:
        yield ns
    finally:
        close_namespace(archive.store, ns, journal)


def records_where_they_belong(archive: OpenArchive) -> Optional[str]:
    """After a disk came (rebuilt, added) or went: the MANIFEST and JOURNAL
    written on the record disks the rule now names (webfs-format(5),
    RECORDS), when those do not hold the newest, so that losing any one disk
    still leaves a copy of every record (a rebuilt record disk had none until
    the next mount). In a mount its own checkpoint is asked for (it runs in
    a thread of the mount); unmounted, the namespace is opened and closed,
    which checkpoints. What was done, in a line, or None."""
    if archive.read_only:
        return None
    journal = archive.journal or Journal(archive.store.archive)
    disks = ", ".join(str(d) for d in record_disks(archive.store.archive))
    if archive.journal is not None:
        if not journal.ask_checkpoint():
            return None
        return f"the MANIFEST and JOURNAL are being written on the record disks ({disks}): a checkpoint"
    if not journal.wants_checkpoint():
        return None
    with names(archive):
        pass                        # close_namespace checkpoints: the records are not where the rule puts them
    return f"the MANIFEST and JOURNAL written on the record disks ({disks})"
