"""Keeping the query index in step with the catalog: catch-up passes.

This module owns deciding what to (re)index and doing it. The catalog is
the record of what changed: every file whose inode's ctime is past the
index's watermark (less a slack, for commits that land out of ctime order)
is read again if its ctime differs from the one indexed; when the number
of files differs between the two, inode numbers are compared in full, which
finds removals and files made with an old ctime (a rebuilt catalog). No
hook in the write path, no queue to lose: a pass after a kill -9 finds what
the last one missed. A document is read and parsed once per signature.

The mount runs a pass in the background every few seconds while the catalog
changes (``PRAGMA data_version``); ``webfs import`` and ``import-warc`` run
them as they commit and a last one when they finish (``Alongside``), not
waited for when it is long;
``webfs reindex`` runs one on an empty index. The passes of a mount and of
an import run in a process of their own (``Apart``), which opens the
archive read-only: reading and parsing pages then uses another core instead
of the interpreter the import or the mount's requests run in.
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import mimetypes
import os
import sqlite3
import threading
import time
import weakref
from typing import Optional

from . import indexengine, indexprocess, lockorder, query, testkill, urlpath
from .catalog import Catalog
from .errors import WebfsError
from .extract import extract, key_and_host
from .index import INDEX_DIR_META, Index, index_dir, pass_lock
from .indexprocess import NOTHING_DONE, Apart, IndexerGone, IndexingFailed

log = logging.getLogger(__name__)

SLACK_NS = 120 * 10**9          # files this much older than the watermark are looked at again
BATCH = 500                     # files indexed per index transaction
KEEP_DIR = "@warc"              # a collection's raw WARC records (webfs.warc): not pages
FACT_XATTRS = (b"user.warc.target-uri", b"user.warc.date", b"user.http.content-type", b"user.http.status")
ROOT = 1
MAX_DEPTH = 1 << 20             # names walked up before an inode counts as unreachable (a loop)
SNIFFED = {"html": "text/html", "text": "text/plain"}     # the MIME type of a file that names none


def location(store) -> str:
    """The directory of the archive's index."""
    return index_dir(store.catalog.path, store.catalog.get_meta(INDEX_DIR_META))


def open_catalog_reader(store, cache_kib: int = 0) -> Catalog:
    return Catalog.reader(store.catalog.path, store.catalog.engine, cache_kib=cache_kib)


def open_for_queries(store) -> Index:
    """The archive's index, read-only, checking phrases against the documents'
    blocks; FileNotFoundError while there is none (a first pass makes it)."""
    index = indexengine.open_index(store, location(store), read_only=True)
    index.phrases = query.phrase_check(lambda doc: document_texts(store, index, doc))
    return index


def document_texts(store, index: Index, doc: int) -> Optional[tuple[str, str]]:
    """(title, text) of an indexed document, read and parsed again from its block;
    None if it is gone or unreadable (its phrase then does not match)."""
    row = index.doc_key(doc)
    if row is None:
        return None
    sig, _, overflow = row[0].partition("~")
    block = store.catalog.block(sig, int(overflow or 0))
    if block is None:
        return None
    try:
        got = extract(store.read(block), SNIFFED.get(row[1], ""))
    except WebfsError as exc:
        log.warning("index: block %s not read to check a phrase (%s)", row[0], exc)
        return None
    return got.title, got.text


class Paths:
    """Paths of inodes from a catalog connection, the directories' remembered."""

    def __init__(self, cat: Catalog):
        self.cat = cat
        self.dirs: dict[int, Optional[str]] = {ROOT: ""}
        self.names: dict[int, tuple[int, bytes]] = {}     # (parent, name) of files, read in batches

    def __call__(self, ino: int) -> Optional[str]:
        """The path of an inode from the root ('a/b/c'), None if unreachable.
        Walked up without recursion: URL paths can be thousands of levels deep."""
        names: list[str] = []
        chain: list[int] = []
        here = ino
        while here not in self.dirs:
            row = self.names.pop(here, None) or self.cat.a_name_of(here)
            if row is None or len(chain) > MAX_DEPTH:
                above = None
                break
            chain.append(row[0])
            names.append(os.fsdecode(row[1]))
            here = row[0]
        else:
            above = self.dirs[here]
        # Remember the directories on the way (every entry of chain but the last is one).
        for i in range(len(chain) - 1, 0, -1):
            self.dirs[chain[i - 1]] = None if above is None else "/".join(
                [above] * bool(above) + names[i:][::-1])
        if above is None:
            return None
        return "/".join([above] * bool(above) + names[::-1])


class Pass:
    """One catch-up pass of the index over the catalog."""

    def __init__(self, store, index: Index, progress=None):
        self.store, self.index, self.progress = store, index, progress
        self.cat = store.catalog.snapshot()     # one view of the catalog for the whole pass
        self.path = Paths(self.cat)
        self.counts = {"indexed": 0, "documents": 0, "dropped": 0}

    def run(self) -> dict:
        try:
            todo, watermark = self._changed()
            if self.progress is not None and todo:
                self.progress.set_total(len(todo), "indexing")
            for start in range(0, len(todo), BATCH):
                batch = todo[start:start + BATCH]
                rows = self.cat.index_batch([ino for ino, _ in batch], FACT_XATTRS)
                self.path.names.update((ino, row[2]) for ino, row in rows.items() if row[2] is not None)
                for ino, ctime in batch:
                    self._file(ino, ctime, rows[ino])
                    testkill.point("index-after-file")
                    if self.progress is not None:
                        self.progress.advance(1)
                if len(batch) == BATCH:
                    self.index.commit()
            self.counts["dropped_documents"] = self.index.drop_unused_docs() if self.counts["dropped"] else 0
            if todo or self.counts["dropped"] or str(watermark) != self.index.get_meta("watermark"):
                # A pass that found nothing (most searches) writes nothing: no commit, no fsync.
                self.index.set_meta("watermark", str(watermark))
                self.index.commit()
            return self.counts
        finally:
            self.cat.close()

    def _changed(self) -> tuple[list[tuple[int, int]], int]:
        """(inode, ctime) of the files to index again, and the new watermark."""
        watermark = int(self.index.get_meta("watermark") or 0)
        in_catalog, top = self.cat.file_totals()
        if in_catalog != self.index.file_count() or watermark == 0:
            rows = self.cat.file_stamps()
            known = self.index.stamps()
            gone = [ino for ino in known if ino not in rows]
            self.index.drop_files(gone)
            self.counts["dropped"] = len(gone)
        else:
            # A file changed since its pass has a newer ctime than its stamp, so
            # the stamps this recent are all that can match a row of the window.
            rows = self.cat.file_stamps(watermark - SLACK_NS)
            known = self.index.stamps(watermark - SLACK_NS)
        todo = sorted(rows.items() - known.items())
        return todo, max(watermark, top)

    def _file(self, ino: int, ctime: int, row: tuple) -> None:
        """Index a file from its row of ``Catalog.index_batch``."""
        path = self.path(ino)
        if path is None or "/" not in path or path.split("/")[1] == KEEP_DIR:
            # Not a page (a collection's raw records, a file at the top, a name
            # gone since the snapshot): kept as a row of no collection, which no
            # query finds, so that the counts of files still agree.
            self.index.put_file(ino, ctime, None, {"collection": "", "size": 0})
            return
        size, mtime, _, xattrs, block = row
        facts = file_facts(path, xattrs, size, mtime)
        doc, kind = self._doc(block, facts) if block is not None else (None, "")
        if not facts["mime"] and kind in SNIFFED:
            facts["mime"] = SNIFFED[kind]
        self.index.put_file(ino, ctime, doc, facts)
        self.counts["indexed"] += 1

    def _doc(self, block, facts: dict) -> tuple[Optional[int], str]:
        """(id, kind) of the document of a one-block file, indexed the first time
        its signature is seen."""
        key = f"{block.sig}~{block.overflow}" if block.overflow else block.sig
        known = self.index.doc(key)
        if known is not None:
            return known
        try:
            data = self.store.read(block)       # by the snapshot's row: a block moved since is still found
        except WebfsError as exc:
            if self.store.catalog.block_by_id(block.id) is None:
                return None, ""                 # removed since the snapshot: the next pass sees its file go
            # A damaged block is scrub's to report; index what is left.
            log.warning("index: block %s not read (%s); its file is indexed by name only", key, exc)
            return None, ""
        got = extract(data, facts.get("content_type", ""), facts.get("url"))
        self.counts["documents"] += 1
        return self.index.add_doc(key, got.kind, got.title, got.text, got.links), got.kind


def file_facts(path: str, xattrs: dict, size: int, mtime_ns: int) -> dict:
    """What the index keeps of a file beside its document: from its WARC and HTTP
    xattrs where it has them, else from its path (a capture path names its URL
    and date) and its mtime."""
    collection, _, rest = path.partition("/")
    url = xattrs.get(b"user.warc.target-uri", b"").decode("utf-8", "surrogateescape").strip("<>") or None
    stamp = ""
    try:
        found, stamp = urlpath.split_capture_path(rest)
        url = url or found
    except ValueError:
        # A mirror's layout (wget -r, HTTrack): COLLECTION/HOST/PATH is http://HOST/PATH.
        if not url and "." in rest.split("/")[0]:
            url = "http://" + rest
    date = _digits(xattrs.get(b"user.warc.date", b"").decode("ascii", "replace")) or stamp[:14] or \
        datetime.datetime.fromtimestamp(mtime_ns / 1e9, datetime.timezone.utc).strftime("%Y%m%d%H%M%S")
    ctype = xattrs.get(b"user.http.content-type", b"").decode("latin-1").strip()
    mime = ctype.split(";")[0].strip().lower() or (mimetypes.guess_type(path.split("@")[0])[0] or "")
    status = xattrs.get(b"user.http.status", b"")
    key, host = key_and_host(url) if url else (None, None)
    return {"collection": collection, "url": url, "key": key, "host": host, "date": date, "mime": mime,
            "content_type": ctype or mime, "status": int(status) if status.isdigit() else None, "size": size}


def _digits(warc_date: str) -> str:
    digits = "".join(c for c in warc_date.split(".")[0] if c.isdigit())
    return digits[:14] if len(digits) >= 14 else ""


_one_pass = lockorder.lock("index pass")        # a search's pass and the mount's never overlap

# catalog -> (index location, its write count as the last pass here began, the
# index's files as that pass left them). A mount's daemon is the only writer of
# its catalog: while all three stay, the index is current and a search's pass
# has nothing to look at (it compared the stamps of an import's slack window,
# most of a search's time).
_current: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def catch_up(store, progress=None) -> dict:
    """One pass: index what changed in the catalog since the last (none, when
    this process is the archive's one writer, nothing was written through its
    catalog and the index's files are as the last pass here left them; a
    reader's own count never moves, so the indexing process and other readers
    always look)."""
    where = location(store)
    with _one_pass, pass_lock(where):
        writes = store.catalog.write_count() if store.archive.writer else None
        if writes is not None and _current.get(store.catalog) == (where, writes, indexengine.state(store, where)):
            return dict(NOTHING_DONE)
        counts = _pass(store, progress)
        if writes is not None:
            _current[store.catalog] = (where, writes, indexengine.state(store, where))
        return counts


def _pass(store, progress, compact: bool = False) -> dict:
    index = indexengine.open_index(store, location(store))
    try:
        counts = Pass(store, index, progress).run()
        if index.engine != "sqlite":
            return counts
        if compact:
            index.compact()
        elif counts["indexed"] or counts["dropped"]:
            index.free_pages_back()         # what its segment merges freed: a twentieth of an import's index
        return counts
    finally:
        index.close()


def rebuild(store, progress=None, directory: Optional[str] = None) -> dict:
    """Throw the index away and make it again from the catalog and blocks;
    ``directory``: keep it there from now on (recorded in the catalog). Under
    the pass locks of both places: a mount's keeper never writes into a file
    being removed."""
    indexengine.refuse_index_dir(store, directory)
    old = location(store)
    new = old if directory is None else os.path.abspath(directory)
    with _one_pass, pass_lock(old), pass_lock(new) if new != old else contextlib.nullcontext():
        _current.pop(store.catalog, None)
        if directory is not None:
            store.catalog.set_meta(INDEX_DIR_META, new)
            store.commit()
        for d in {old, location(store)}:
            indexengine.remove(store, d)
        return _pass(store, progress, compact=True)


_enabled = True


def turn_off() -> None:
    """No indexing in this process or a mount it starts (the CLI does it for
    WEBFS_INDEX=0: imports, the mount's keeper; measuring what indexing costs)."""
    global _enabled
    _enabled = False


def enabled() -> bool:
    return _enabled


def serve_apart() -> None:
    """The indexing process (``indexprocess.Apart``): its passes are this module's."""
    indexprocess.serve(catch_up, location)


KEEP_INTERVAL = 2.0             # seconds between the mount's looks at the catalog
APART_AFTER = 500               # files to index at once before a mount's passes move to a process of their own
IMPORT_BUSY_INTERVAL = 30.0     # seconds a mount's index may fall behind an import running in it
WATCH_CACHE_KIB = 128           # SQLite page cache of the keeper's catalog connection


class Imports:
    """How many imports run in this process (a mount's, through webfs import
    or import-warc on its mount point): its passes wait for them, as for a
    copy into the mount, so that parsing pages does not take the CPU the
    import needs; the import's end asks for a pass (``Keeper.poke``)."""

    def __init__(self):
        self._lock = lockorder.lock("imports running")
        self._running = 0

    def __enter__(self) -> None:
        with self._lock:
            self._running += 1

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._running -= 1

    def running(self) -> bool:
        return self._running > 0


imports_running = Imports()


class Keeper:
    """The mount's background indexing: a pass whenever the catalog changed
    (SQLite's ``data_version`` moves when another connection commits) or an
    import asked; the first step catches up what a crash left unindexed.
    Passes are made here until one has ``apart_after`` files to index (a
    copy or an import into the mount), then by an ``Apart`` process; while
    an import runs in the mount, at most every ``IMPORT_BUSY_INTERVAL`` (the
    start counts as a pass: an import into a fresh mount is not met by one
    at its first commit)."""

    def __init__(self, store, apart_after: int = APART_AFTER):
        self.store = store
        self.seen: Optional[int] = None
        self.poked = threading.Event()
        # It only counts the files, a scan of the inodes: SQLite's default cache
        # kept the table's pages, the daemon's RSS growing with the archive.
        self.watch = open_catalog_reader(store, WATCH_CACHE_KIB)
        self.apart_after = apart_after
        self.apart: Optional[Apart] = None
        self.nice = 0                               # of its indexing process
        self.files_seen: Optional[int] = None       # files in the catalog at the last pass
        self.last_pass = time.monotonic()           # of the last pass; the start counts as one

    def poke(self) -> None:
        self.poked.set()

    def close(self) -> None:
        """End the indexing process and close the watching connection: the
        catalog's WAL is removed at unmount only by its last connection (an
        8 MiB WAL was left in meta/)."""
        if self.apart is not None:
            self.apart.close()
            self.apart = None
        self.watch.close()

    def step(self) -> bool:
        """A pass if the catalog changed or one was asked for; whether it indexed or dropped any file."""
        if not enabled():
            return False
        version = self.watch.data_version()
        if version == self.seen and not self.poked.is_set():
            return False
        if imports_running.running() and time.monotonic() - self.last_pass < IMPORT_BUSY_INTERVAL:
            return False
        self.poked.clear()
        files = self.watch.file_totals()[0]
        before = self.files_seen if self.files_seen is not None else self._files_indexed()
        if files - before >= self.apart_after:
            self.apart_after = 0                # a copy or an import made many: apart from now on
        counts = self.catch_up()
        self.seen, self.files_seen, self.last_pass = version, files, time.monotonic()
        if counts["indexed"] or counts["dropped"]:
            log.info("index: %d files indexed (%d new documents), %d dropped",
                     counts["indexed"], counts["documents"], counts["dropped"])
            return True
        return False

    def _files_indexed(self) -> int:
        """Files in the index (0 while there is none): what the first pass
        compares the catalog with. The mount's first pass comes when a copy
        into it has gone on for ``INDEX_BUSY_INTERVAL``, thousands of files
        that would be parsed here, under the interpreter the copy needs."""
        try:
            index = indexengine.open_index(self.store, location(self.store), read_only=True)
        except FileNotFoundError:
            return 0
        try:
            return index.file_count()
        finally:
            index.close()

    def catch_up(self) -> dict:
        """One pass, in the indexing process once there is one; if that
        process ends, it is said and the pass made here (the next starts
        another); if its pass fails, it is made here too, which says why if
        it fails again (an archive the process could not open is indexed)."""
        try:
            if self.apart is None and self.apart_after <= 0:
                self.apart = Apart(self.store, self.nice)
            if self.apart is not None:
                return self.apart.run_pass()
        except IndexingFailed as exc:
            log.debug("the indexing process's pass failed (%s); made here", exc)
        except IndexerGone as exc:
            log.warning("%s; indexing in this process instead", exc)
            self.apart.close()
            self.apart = None
        except OSError as exc:                  # no process could be started
            log.warning("the indexing process did not start (%s); indexing in this process", exc)
        counts = catch_up(self.store)
        if counts["indexed"] >= self.apart_after:
            self.apart_after = 0
        return counts


ALONGSIDE_INTERVAL = 0.5       # seconds between an unmounted import's looks at its own commits
LEAVE_AFTER = 500               # files left to index when an import ends that it does not wait for
IMPORT_NICE = 5                 # the import's indexing process yields the CPU to the import (os.nice)


class Alongside:
    """Indexing beside an import on the disks: a thread that has a pass made
    (by an ``Apart`` process: the import's interpreter is left to it) each
    time the import commits a batch, so that when the import ends only its
    last batches are left to index; ``finish`` makes that last pass (here,
    if the import ended before the first look: a small one), or, with
    ``LEAVE_AFTER`` files or more left, hands it to the indexing process and
    does not wait: a pass of a search (or of anything) waits for it on
    ``index.lock``."""

    def __init__(self, store):
        self.keeper = Keeper(store, apart_after=1 << 62)
        self.keeper.nice = IMPORT_NICE
        self.done = threading.Event()
        self.left = False
        self.thread = threading.Thread(target=self._run, name="index alongside", daemon=True)

    def __enter__(self) -> "Alongside":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.left:
            return                              # the thread ends with the process; its pass is the other's
        self._stop()
        self.keeper.close()

    def _stop(self) -> None:
        self.done.set()
        self.thread.join()

    def finish(self) -> None:
        """The import ended: index the rest and wait for it, so that a search
        right after the import finds every page; or leave it to the
        indexing process where that is long."""
        self.done.set()
        try:
            if self._leave():
                return
        except (OSError, sqlite3.Error, WebfsError) as exc:
            log.debug("the last index pass not handed over (%s); made here", exc)
            self.left, self.keeper.apart = False, None      # it ends when its requests close
        self._stop()
        try:
            self.keeper.catch_up()
        except (OSError, sqlite3.Error, WebfsError) as exc:
            log.warning(indexprocess.NOT_UP_TO_DATE, exc)

    def _leave(self) -> bool:
        """Hand the last pass to the indexing process (started for it if the
        import was quick) if ``LEAVE_AFTER`` files or more are left to index."""
        keeper = self.keeper
        if not all(v.backend.bounded for v in keeper.store.archive.volumes.values()):
            # Object-store disks: a pass left running after the import broke the
            # next mount's MANIFEST writes (SQLite's "disk I/O error", t5_s3_faults).
            return False
        if keeper.store.catalog.file_totals()[0] - keeper._files_indexed() < LEAVE_AFTER:
            return False
        if keeper.apart is None:
            keeper.apart = Apart(keeper.store, keeper.nice)
        keeper.apart.leave()
        self.left = True
        return True

    def _run(self) -> None:
        if self.done.wait(ALONGSIDE_INTERVAL):
            return
        self.keeper.apart_after = 0             # an import that lasts: its passes apart
        while True:
            busy = False
            try:
                busy = self.keeper.step()
            except (OSError, sqlite3.Error, WebfsError) as exc:
                # The pass after the import tries again, and says so if it fails too.
                log.debug("index pass beside the import: %s", exc)
            # A pass that found work is followed at once: while the import is
            # ahead, a pause leaves the indexing process's core idle.
            if self.done.wait(0 if busy else ALONGSIDE_INTERVAL):
                return


def indexed(command):
    """An import (an admin command) that indexes what it made: on the disks,
    beside it as it commits, and the rest when it finishes; in a mount, in
    the keeper's background pass, which the import does not wait for."""
    def run(archive, progress, **options):
        if archive.after_import is not None:
            with imports_running:
                result = command(archive, progress, **options)
            archive.after_import()
            return result
        if not enabled():
            return command(archive, progress, **options)
        with Alongside(archive.store) as alongside:
            result = command(archive, progress, **options)
            alongside.finish()
        return result
    run.__doc__ = command.__doc__
    return run
