"""The mount daemon, the running mount: open (recovery is ``webfs.recovery``'s),
the periodic tasks of a mount (parity flush, checkpoint, cooling:
``run_every``), the control socket, and unmount. Starting it (the checks,
the fork that detaches) is ``webfs.mountstart``; its options are
``webfs.mountoptions``.

``Daemon.open`` opens and locks the archive and recovers from an unclean
stop; ``Daemon.main`` serves the mount until it is unmounted. While mounted, a Unix
socket (named by the root's ``user.webfs.control`` xattr) runs admin
commands inside the daemon, so ``webfs scrub MOUNTPOINT`` works on the
live archive. Unmounting commits everything, writes the MANIFEST on every
disk, and marks the catalog clean.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import signal
import socketserver
import stat
import threading
import time
from typing import Optional

import pyfuse3
import trio

from . import admin, catalogfile, changes, heapmemory, indexer, machines, outages, recovery, testkill
from .commands.cooling import background_step
from .errors import ArchiveError, WebfsError, os_error_text
from .fs import Operations, count_request, work_answered
from .groupcommit import away
from .manifest import manifest_chunks
from .mountoptions import MountOptions
from .namespace import ROOT_INODE, Namespace
from .assembly import KernelHooks, OpenArchive, open_archive
from .backends import BackendOptions
from .files import write_file
from .control import CONTROL_XATTR, control_socket_path, report_path
from .store import Store
from . import lockorder

log = logging.getLogger(__name__)

INDEX_BUSY_INTERVAL = 30.0        # seconds a mount at work may leave its index behind
SHARED_COMMIT_PERIOD = 0.2        # seconds pending name changes wait with other machines mounted


def invalidate_entries(names) -> None:
    """The kernel forgets these (parent, name) entries, misses included; one it
    no longer has is no error."""
    for parent, name in names:
        try:
            pyfuse3.invalidate_entry(parent, name)
        except OSError:
            pass


class Daemon:
    """One mounted archive."""

    def __init__(self, disk: str, mountpoint: str, opts: MountOptions,
                 admin_commands: dict[str, admin.AdminCommand],
                 backend_options: Optional[BackendOptions] = None):
        self.disk = disk
        self.backend_options = backend_options      # S3 disks and their leases (webfs.backends.options)
        self.admin_commands = admin_commands    # what the control socket runs, by name
        self.mountpoint = os.path.abspath(mountpoint)
        self.opts = opts
        self.store: Optional[Store] = None
        self.fs: Optional[Operations] = None         # the FUSE request handlers
        self.archive: Optional[OpenArchive] = None   # what admin commands are given
        self.index_keeper: Optional[indexer.Keeper] = None
        self.ns: Optional[Namespace] = None
        self.server: Optional[socketserver.UnixStreamServer] = None
        self.socket_path = ""
        self.trio_token = None
        self._snapshots = 0                 # memory snapshots written (WEBFS_TRACEMALLOC)
        self._checkpoint_lock = lockorder.lock("checkpoint")          # one checkpoint at a time
        self._checkpoint_asked = lockorder.lock("checkpoint asked")    # held while one asked by the JOURNAL waits or runs
        self._checkpoint_again = False
        self.lease: Optional[machines.MachineLease] = None     # this machine's row (a PostgreSQL catalog)
        self.listener: Optional[changes.Listener] = None        # the other machines' changes, heard

    def open(self) -> None:
        testkill.arm()
        store = open_archive(self.disk, holder=f"webfs mount on {self.mountpoint}", fsync=self.opts.sync,
                           delays=self.opts.disk_delay, heat_k=self.opts.heat_k, background=True,
                           private=True, options=self.backend_options, shared=True)
        self.store = store
        if store.catalog.engine.name == "sqlite":
            catalogfile.prefetch(store.catalog.path)
        self.lease = machines.lease_for(store.catalog, (self.backend_options or BackendOptions()).state_base(),
                                        self.opts.machine_renew)
        self.log_path = log_path = _log_to_disk(store)
        if lockorder.checked() is not None:
            log.info("the order in which threads take locks is checked (WEBFS_LOCK_ORDER)")
        # Another machine's mount at work left the catalog marked in use: not a crash.
        others = self.lease.others() if self.lease is not None else []
        ns, journal, said = recovery.open_namespace(store, self.opts.journal_limit, others_mounted=bool(others))
        self.journal = journal
        self.ns = ns
        stripes = list(store.protection.recovered)
        for stripe_id, done in stripes:
            log.info("recovery: stripe %s: %s (an interrupted update)", stripe_id, done)
        if said is not None:
            # The catalog is the truth now; a new MANIFEST on every disk also holds
            # what a commit made just before the crash but did not journal.
            self.checkpoint()
            log.warning("%s", recovery.recovery_summary(said, stripes, log_path))
        elif stripes:
            log.warning("%s", recovery.recovery_summary([], stripes, log_path, rewrote=False))
        if journal.stale:
            # The records are not where the rule puts them (disks written with a
            # copy on every disk, or a record disk that was missing): move them.
            self.checkpoint()
        journal.on_full = self._checkpoint_soon
        if self.lease is not None:      # what this mount changes is told to the others at each commit
            told = changes.ChangeLog(self.lease.machine)
            ns.memo.changes = told
            store.catalog.db.notice = told.notice
        recovery.mark_in_use(store)
        self.fs = Operations(store, ns, read_only=self.opts.read_only, store_mode=self.opts.store_mode,
                             cache_bytes=self.opts.piece_cache)
        # Admin commands that make names (webfs import) use the mount's namespace
        # and journal, and tell the kernel what changed under it.
        # The query index is kept up to date in the background (webfs.indexer).
        self.index_keeper = None if self.opts.read_only else indexer.Keeper(store)
        self.archive = OpenArchive(store, namespace=ns, journal=journal, read_only=self.opts.read_only,
                                   kernel=KernelHooks(pyfuse3.invalidate_inode, pyfuse3.invalidate_entry,
                                                      self.forget_misses, self.free_unused),
                                   after_import=self.index_keeper and self.index_keeper.poke,
                                   warc_views=self.fs.control.warc)

    def forget_misses(self, parents) -> None:
        """The kernel forgets the misses (negative entries) the mount answered in
        these directories: an admin operation made names in them. Call it after
        the commit, without the catalog lock, from a thread other than the loop's."""
        lockorder.holding_none("the event loop")
        # A miss is recorded on the loop in the lookup that found nothing, so
        # one before the commit is seen here: none in these parents, no hop
        # to the loop (one an import batch).
        if not any(parent in self.fs.misses for parent in parents):
            return
        missed = trio.from_thread.run_sync(self.fs.take_misses, list(parents),
                                           trio_token=self.trio_token)
        invalidate_entries(missed)

    def free_unused(self, ino: int) -> None:
        """Free an inode that lost its last name to an admin operation, unless it is
        open (its last close frees it then). Run on the event loop, where files are
        opened, so no open slips in between; call it without the catalog lock."""
        def free():
            try:
                self.fs.free_if_unused(self.ns.get(ino))
            except WebfsError:
                return
            self.store.commit()
        lockorder.holding_none("the event loop")
        trio.from_thread.run_sync(free, trio_token=self.trio_token)

    def fuse_options(self) -> set[str]:
        opts = set(pyfuse3.default_options)
        opts |= {"fsname=" + self.store.archive.opened_from, "subtype=webfs", "default_permissions"}
        if self.opts.allow_other:
            opts.add("allow_other")
        if self.opts.read_only:
            opts.add("ro")
        if self.opts.fuse_debug:
            opts.add("debug")
        return opts

    def start_control(self) -> None:
        self.socket_path = control_socket_path(self.store.conf.uuid, self.lease.machine if self.lease else None)
        run_dir = os.path.dirname(self.socket_path)
        os.makedirs(run_dir, mode=0o700, exist_ok=True)
        st = os.lstat(run_dir)
        # The socket and the unmount report are made there: nobody else may plant anything in it.
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise ArchiveError(f"{run_dir}: not a directory of this user's that only it can write "
                               f"(owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}); "
                               "remove it, and the mount makes it anew")
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        daemon = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                daemon.serve_request(self.rfile, self.wfile)

        try:
            os.unlink(report_path(self.socket_path))
        except FileNotFoundError:
            pass
        self.server = socketserver.ThreadingUnixStreamServer(self.socket_path, Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="control", daemon=True).start()
        info = {CONTROL_XATTR.encode(): self.socket_path.encode(),
                b"user.webfs.pid": str(os.getpid()).encode(),
                b"user.webfs.archive": self.store.conf.uuid.encode(),
                b"user.webfs.log": self.log_path.encode(),
                b"user.webfs.disks": "\n".join(v.backend.location for v in self.store.archive.volumes.values()).encode()}
        self.fs.root_xattrs.update(info)

    def serve_request(self, rfile, wfile) -> None:
        """One admin operation, asked as a JSON line, answered with JSON lines."""
        def send(obj):
            wfile.write((json.dumps(obj) + "\n").encode())
            wfile.flush()
        name = None
        try:
            req = json.loads(rfile.readline() or b"{}")
            name = req.get("op")
            if name == "sync":
                lockorder.holding_none("the event loop")
                trio.from_thread.run(self.flush_all, trio_token=self.trio_token)
                result = admin.Result(["synced"])
            else:
                fn = self.admin_commands.get(name)
                if fn is None:
                    raise WebfsError(f"the daemon knows no operation {name!r}")
                with away():     # run here, in the control thread
                    result = self._admin(fn, req, send)
            send({"result": result.to_json()})
        except WebfsError as exc:
            send({"error": str(exc)})
        except BrokenPipeError:
            pass
        except OSError as exc:          # a disk's failure (an outage, a full disk), not a bug
            said = os_error_text(exc)
            log.error("%s failed: %s", name or "an admin operation", said)
            send({"error": said})
        except Exception as exc:        # keep the daemon up; the caller hears what broke
            log.exception("admin operation failed")
            send({"error": f"internal error: {exc}"})

    def _admin(self, fn, req: dict, send) -> admin.Result:
        progress = admin.Progress(lambda kind, n, total, what: send(
            {"progress": kind, "n": n, "total": total, "what": what}))
        result = fn(self.archive, progress, **req.get("options", {}))
        self.store.commit()
        return result

    async def flush_all(self) -> None:
        """Store every open file's buffer, commit, write the MANIFEST. A file that
        cannot be stored now (a full disk) does not keep the others from it: it
        stays open and dirty for its writer, and the sync fails naming it."""
        failed = await self.fs.files.commit_all()
        with away():
            await trio.to_thread.run_sync(self._disks_back)
            await trio.to_thread.run_sync(self._stale_parity)
            await trio.to_thread.run_sync(self.checkpoint)
        if failed:
            raise WebfsError(f"synced, except {len(failed)} open file(s) that could not be stored: "
                             + ", ".join(failed[:10]) + (" ..." if len(failed) > 10 else ""))

    def _stale_parity(self) -> None:
        """Stripes whose parity could not be written (its disk was full, say)
        are tried again at a sync and at the unmount: their blocks are not
        protected until then (webfs status counts them). Not while other
        machines are mounted: one may hold the parity of such a stripe to
        write behind, and would write it after this one dropped the stripe;
        the last one out does it."""
        if self.lease is not None and self.lease.others():
            return
        if self.store.protection.out_of_date():
            self.store.protection.reconcile_stale()
            self.store.commit()

    def _disks_back(self) -> None:
        """Before a sync's or the unmount's writes: a disk given up a moment ago
        (a read not answered in time) that answers now is taken back, so that
        its MANIFEST, catalog copy and lease are not left behind."""
        try:
            outages.ask_again(self.store)
        except Exception:
            log.exception("cannot take back the disks that answer again")

    def _flush_parity(self) -> None:
        from .parity import WRITE_BEHIND
        outages.check_disks(self.store)
        self.store.protection.flush(older_than=WRITE_BEHIND)

    def _checkpoint_soon(self) -> None:
        """A checkpoint in a thread of its own, now: the JOURNAL passed its size
        bound (or a record disk left). Called from whatever thread appended,
        maybe under the catalog lock, so it only starts the thread."""
        self._checkpoint_again = True
        if not self._checkpoint_asked.acquire(blocking=False):
            return                      # the one running looks again when it ends

        def run():
            # Asked again while it ran (a disk rebuilt as it staged): once more.
            while True:
                try:
                    while self._checkpoint_again:
                        self._checkpoint_again = False
                        with away():
                            if self.journal.wants_checkpoint():     # not done meanwhile by another
                                self.checkpoint()
                except Exception:
                    log.exception("checkpoint (the JOURNAL passed its size bound) failed")
                finally:
                    self._checkpoint_asked.release()
                if not self._checkpoint_again or not self._checkpoint_asked.acquire(blocking=False):
                    return
        threading.Thread(target=run, name="checkpoint", daemon=True).start()

    def checkpoint(self) -> None:
        """Write the MANIFEST on the record disks without stopping the mount: the
        names are read from a snapshot of the catalog, and the JOURNAL keeps only
        the changes made after that snapshot."""
        with self._checkpoint_lock:
            self._checkpoint()

    def _checkpoint(self) -> None:
        cat = self.store.catalog
        with cat.lock:
            n = self.journal.next_checkpoint(cat)
            self.store.commit()                 # also appends the journal's lines
            covered = self.journal.mark(n)      # what the snapshot holds ends at the marker
            snapshot = cat.snapshot()
            self.store.trim_intents()
        try:
            # Written as it is read, in chunks, outside the catalog lock.
            staged = self.journal.stage(manifest_chunks(Namespace(self.store, catalog=snapshot)), n)
        finally:
            snapshot.db.close()
        with cat.lock:
            self.journal.install(staged, covered, n)
        self.store.sync()
        heapmemory.trim()

    async def main(self, ready) -> None:
        self.trio_token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self.fs.running(nursery)
            nursery.start_soon(self._signals, nursery)
            # Parity of open stripes waits in memory at most about a second.
            nursery.start_soon(self.run_every, 0.5, self._flush_parity, "parity flush")
            # Changes of names and attributes alone are committed within a second.
            nursery.start_soon(self._commit_changes)
            if self.opts.manifest_interval > 0:
                nursery.start_soon(self.run_every, self.opts.manifest_interval, self.checkpoint, "checkpoint")
            if os.environ.get("WEBFS_TRACEMALLOC"):
                nursery.start_soon(self.run_every, 10.0, self._trace_memory, "memory trace")
            if self.opts.cool_interval > 0 and not self.opts.read_only:
                nursery.start_soon(self.run_every, self.opts.cool_interval, self.cool, "background cooling")
            if self.index_keeper is not None:
                nursery.start_soon(self._index_when_quiet)
            if self.lease is not None:
                nursery.start_soon(self.run_every, self.lease.renew, self._after_renewals, "taking over")
                self.listener = changes.Listener(self.store.catalog.engine, self.lease.machine,
                                                 self.others_changed)
            ready()
            await pyfuse3.main()
            nursery.cancel_scope.cancel()

    def _trace_memory(self) -> None:
        """With WEBFS_TRACEMALLOC=FILE in the environment: every 10 s, append to
        FILE the RSS, the bytes Python allocated, those SQLite holds (its page
        caches, outside Python), and the 15 lines of code that hold most of
        Python's; and the snapshot itself as FILE.N (N counts from 1), for
        Snapshot.load and compare_to."""
        import tracemalloc
        if not tracemalloc.is_tracing():
            tracemalloc.start(1)
            return
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        self._snapshots += 1
        snap.dump(f"{os.environ['WEBFS_TRACEMALLOC']}.{self._snapshots}")
        stats = snap.statistics("lineno")
        rss = next((line.split()[1] for line in open("/proc/self/status") if line.startswith("VmRSS")), "?")
        with open(os.environ["WEBFS_TRACEMALLOC"], "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} rss {rss} kB, traced {sum(s.size for s in stats) >> 10} kB, "
                    f"SQLite's {heapmemory.sqlite_bytes() >> 10} kB, "
                    f"inodes known to the kernel {len(self.fs.lookups)}\n")
            f.write("".join(f"  {s.size >> 10:8d} kB {s.count:8d} {s.traceback}\n" for s in stats[:15]))

    def others_changed(self, inodes: set[int], names: set[tuple[int, bytes]], everything: bool) -> None:
        """Another machine's mount committed changes of these inodes and names
        (webfs.changes; called in the listener's thread): the namespace memo
        and the kernel forget them (attributes, pages, entries, misses).
        Only what the kernel may hold is told to it: the root or an inode it
        looked up, an entry (or miss) in one of those directories; another
        machine's work in directories this mount never showed costs no call
        into the kernel and no hand-off to the loop."""
        self.ns.forget_others(inodes, names, everything)

        def known(ino: int) -> bool:
            return ino == ROOT_INODE or bool(self.fs.lookups.get(ino))
        names = {(parent, name) for parent, name in names if known(parent)}
        inodes = list(self.fs.lookups) if everything else [ino for ino in inodes if known(ino)]
        count_request("others-invalidated", len(names) + len(inodes))
        invalidate_entries(names)
        for ino in inodes:
            try:
                pyfuse3.invalidate_inode(ino)
            except OSError:
                pass
        parents = list({parent for parent, _ in names})
        if not inodes and not parents:
            return

        def on_loop() -> list[tuple[int, bytes]]:
            # A file's size the kernel keeps as its own (the writeback cache): it must let go of the inode.
            self.fs.others_changed(inodes)
            return self.fs.take_misses(parents)
        # One hand-off to the loop per notice (two wake-ups on a busy host), not one for each.
        invalidate_entries(trio.from_thread.run_sync(on_loop, trio_token=self.trio_token))

    def _after_renewals(self, last: bool = False) -> None:
        """What the lease's renewals (a thread of its own: webfs.machines) found.
        This mount's row taken over (it was not renewed in time) makes it
        read-only. The stripes of machines whose rows they took over (those
        died) get their parity rewritten from the blocks on the disks.
        ``last``: the unmount's, after which nothing more is taken over."""
        if self.lease.lost:
            self.fs.read_only = True
            return
        taken = self.lease.taken_over(last)
        if taken:
            self.store.archive.forget_machines(taken)
            done = self.store.protection.reconcile_stale()
            self.store.commit()
            log.warning("took over %d machine(s)' mounts: %d parity stripe(s) brought up to date",
                        len(taken), done)

    def cool(self) -> None:
        """One step of disk cooling (the cool_interval option)."""
        background_step(self.store)

    async def _signals(self, nursery) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for _ in signals:
                log.info("signal received; unmounting")
                pyfuse3.terminate()
                return

    async def _commit_changes(self) -> None:
        # Other machines see a name once it is committed: sooner when there may be any.
        period = 1.0 if self.lease is None else SHARED_COMMIT_PERIOD
        while True:
            await trio.sleep(period)
            if self.store.catalog.uncommitted:
                try:
                    await self.fs.commits.commit()
                except Exception:
                    log.exception("periodic commit failed")

    async def run_every(self, seconds: float, fn, what: str) -> None:
        """Run ``fn`` in a worker thread every ``seconds`` while mounted. Whatever
        one run raises is logged and the next period runs it again: a periodic
        task never ends the mount. A webfs error (a missing disk) says what is
        wrong in one line; anything else (an sqlite3 error, a bug) is logged
        with its traceback."""
        while True:
            await trio.sleep(seconds)
            await self._run_once(fn, what, seconds)

    async def _run_once(self, fn, what: str, seconds: float) -> None:
        try:
            with away():
                await trio.to_thread.run_sync(fn)
        except WebfsError as exc:
            log.warning("%s failed: %s; it runs again in %g s", what, exc, seconds)
        except Exception:
            log.exception("%s failed; it runs again in %g s", what, seconds)

    async def _index_when_quiet(self) -> None:
        """The index keeper's passes: every ``KEEP_INTERVAL`` in which no
        program read or wrote the mount's files (``fs.WORK``), at most every
        ``INDEX_BUSY_INTERVAL`` while they do. A pass parses every new page on
        the CPU a copy into the mount (or a reader after it) needs, and
        compares the whole catalog with the index; one in a quiet moment does
        the same parsing once. ``webfs search`` catches up by itself, so its
        answers never wait for this."""
        seen, last = work_answered(), trio.current_time()
        while True:
            await trio.sleep(indexer.KEEP_INTERVAL)
            work = work_answered()
            busy, seen = work != seen, work
            if busy and trio.current_time() - last < INDEX_BUSY_INTERVAL:
                continue
            last = trio.current_time()
            await self._run_once(self._index_pass, "indexing", indexer.KEEP_INTERVAL)

    def _index_pass(self) -> None:
        """One pass of the index keeper, in a worker. Its reads of new pages are
        no program's: they do not heat groups (a window for every group it
        read, and cooling would see them all read once). Its parsing and
        SQLite memory is freed at its end, in this worker's malloc arena:
        given back to the system, so the daemon's RSS does not keep the
        largest pass's (webfs-internals(7), CONCURRENCY MODEL)."""
        try:
            with self.store.heat.unrecorded():
                self.index_keeper.step()
        finally:
            heapmemory.trim()

    def close(self) -> None:
        """Write everything out; what could not be (files whose changes were
        dropped during the mount, a MANIFEST, parity left out of date) goes in
        the report that ``webfs umount`` prints before it exits non-zero."""
        problems = list(self.fs.files.failures) if self.fs is not None else []
        testkill.point("unmount-after-loop")
        try:
            self._write_out(problems)
        finally:
            if self.store is not None:
                if self.lease is not None:
                    self.lease.release()
                self._write_report(problems)

    def _write_out(self, problems: list[str]) -> None:
        """The unmount's writes, then the store closed (an S3 disk copies its records)."""
        if self.fs is not None:
            from .fs import HANDOFFS, REQUESTS
            for what, counts in (("FUSE requests answered", REQUESTS), ("hand-offs to worker threads", HANDOFFS)):
                log.info("%s: %s", what, ", ".join(
                    f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "none")
        if self.listener is not None:
            self.listener.close()
        if getattr(self, "journal", None) is not None:
            self.journal.on_full = None         # the checkpoint below is the last
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass
        if self.store is None:
            return
        try:
            self._last_writes(problems)
        except Exception as exc:
            log.exception("unmount did not finish")
            problems.append(f"unmount did not finish: {exc}")
            raise
        finally:
            if self.index_keeper is not None:
                self.index_keeper.close()   # the catalog's last connection then removes its WAL
            self.store.close()

    def _last_writes(self, problems: list[str]) -> None:
        """The unmount's writes: orphans freed, MANIFEST, parity, the last commit."""
        # Inodes with no name that the kernel knew until the unmount
        # (and so were kept) go now; they are no one's any more.
        if self.ns is not None and not self.opts.read_only:
            for ino in self.ns.orphans():
                self.ns.free(ino)
        if self.lease is not None:
            try:
                self._after_renewals(last=True)
            except Exception as exc:
                log.exception("cannot see to the stripes of the machines taken over")
                problems.append(f"cannot bring the parity of the machines taken over up to date: {exc}")
        self._disks_back()
        try:
            self.checkpoint()
        except Exception as exc:
            log.exception("cannot write the MANIFEST at unmount")
            problems.append(f"cannot write the MANIFEST and JOURNAL: {exc}")
        try:
            self.store.protection.flush()
            self._stale_parity()
        except Exception as exc:
            log.exception("cannot write parity at unmount")
            problems.append(f"cannot write parity: {exc}")
        stale = self.store.protection.out_of_date()
        if stale:
            problems.append(f"{stale} parity stripe(s) out of date (the blocks are intact; "
                            "run 'webfs scrub --repair' or 'webfs fsck --repair')")
        if self.lease is None or not self.lease.others():     # the last mount out marks it clean
            self.store.catalog.set_meta("clean", "1")
        self.store.commit()

    def _write_report(self, problems: list[str]) -> None:
        if not self.socket_path:
            return
        path = report_path(self.socket_path)
        try:
            write_file(path, "".join(line.replace("\n", " ") + "\n" for line in problems).encode())
        except OSError as exc:
            log.error("cannot write the unmount report %s: %s", path, exc)


def _log_to_disk(store: Store) -> str:
    """The daemon's log goes to meta/webfs.log on the first disk (and stderr in the
    foreground, at the level the command was given: details stay in the file)."""
    path = os.path.join(store.archive.first_volume.root, "meta", "webfs.log")
    try:
        handler = _OwnLog(path)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EINVAL):
            what = "a symlink" if exc.errno == errno.ELOOP else "not a regular file"
            raise ArchiveError(f"{path}: {what} where the mount writes its log; refusing to write "
                               "through it (remove it, and the mount starts a new log)") from None
        raise
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for h in root.handlers:
        if h.level == logging.NOTSET:
            h.setLevel(root.level or logging.WARNING)
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    return path


class _OwnLog(logging.FileHandler):
    """The log file itself, never what a symlink planted at its name points
    at (O_NOFOLLOW: ELOOP), nor a FIFO or device (EINVAL)."""
    def _open(self):
        return open(self.baseFilename, self.mode, encoding=self.encoding, errors=self.errors,
                    opener=_open_regular)


def _open_regular(path: str, flags: int) -> int:
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    os.set_blocking(fd, True)
    return fd
