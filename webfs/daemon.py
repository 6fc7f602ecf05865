"""The mount daemon: mounting, unmounting, crash recovery, the periodic tasks
of a mount (parity flush, checkpoint, cooling: ``run_every``), and the
control socket.

``mount`` opens and locks the archive, recovers from an unclean stop,
mounts the filesystem and (unless in the foreground) detaches, reporting
success or the error to the command that started it. While mounted, a Unix
socket (named by the root's ``user.webfs.control`` xattr) runs admin
commands inside the daemon, so ``webfs scrub MOUNTPOINT`` works on the
live archive. Unmounting commits everything, writes the MANIFEST on every
disk, and marks the catalog clean.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socketserver
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

import pyfuse3
import trio

from . import admin, recovery, testkill
from .commands.cooling import background_step
from .errors import ArchiveError, WebfsError
from .fs import Operations
from .heat import DEFAULT_K
from .locks import TAKE_ENV
from .manifest import JOURNAL_LIMIT, manifest_chunks
from .namespace import Namespace
from .assembly import KernelHooks, OpenArchive, open_archive
from .backends.s3 import ENV as S3_OPTIONS, configure as configure_s3
from .files import write_file
from .control import CONTROL_XATTR, check_not_gone, control_socket_path, report_path
from .store import Store
from . import lockorder

log = logging.getLogger(__name__)



@dataclass
class MountOptions:
    read_only: bool = False
    allow_other: bool = False
    store_mode: Optional[str] = None
    sync: bool = False
    max_block: Optional[int] = None
    manifest_interval: float = 300.0
    journal_limit: int = JOURNAL_LIMIT           # JOURNAL bytes that start a checkpoint (at least)
    cool_interval: float = 0.0
    piece_cache: int = 128 << 20                 # bytes of decoded pieces kept for readers
    read_ahead_kb: int = 0                       # the kernel's read-ahead on the mount (0: its default, 128)
    heat_k: int = DEFAULT_K                      # reads per group in the heat estimate
    disk_delay: dict[int, float] = field(default_factory=dict)   # simulated service time per I/O
    fuse_debug: bool = False
    take_lease: bool = False                     # S3 disks: take over a stale lease (webfs.locks)
    extra: list[str] = field(default_factory=list)
    backend: dict[str, str] = field(default_factory=dict)   # S3 disks: s3_credentials, state_dir, ...

    @classmethod
    def parse(cls, text: str) -> "MountOptions":
        """Options as mount(8) gives them: comma-separated, key or key=value."""
        from .archive import STORE_MODES
        opts = cls()
        last = ""
        for item in filter(None, (text or "").split(",")):
            key, sep, value = item.partition("=")
            if last == "disk_delay" and not sep and ":" in key:
                key, value = "disk_delay", item          # disk_delay=0:0.01,1:0.01 goes on
            last = key
            if key == "ro":
                opts.read_only = True
            elif key == "rw":
                opts.read_only = False
            elif key == "allow_other":
                opts.allow_other = True
            elif key == "sync":
                opts.sync = True
            elif key == "store_mode":
                if value not in STORE_MODES:
                    raise ArchiveError(f"store_mode must be one of {', '.join(STORE_MODES)}, not {value!r}")
                opts.store_mode = value
            elif key in ("manifest_interval", "cool_interval"):
                try:
                    setattr(opts, key, float(value))
                except ValueError:
                    raise ArchiveError(f"{key} takes a number of seconds, not {value!r}") from None
            elif key in ("piece_cache", "heat_k", "read_ahead_kb", "journal_limit"):
                try:
                    setattr(opts, key, int(value))
                except ValueError:
                    raise ArchiveError(f"{key} takes a whole number, not {value!r}") from None
                if opts.heat_k < 2 or opts.piece_cache < 0 or opts.read_ahead_kb < 0:
                    raise ArchiveError("heat_k must be 2 or more, piece_cache and read_ahead_kb 0 or more")
            elif key == "disk_delay":
                try:
                    index, seconds = value.split(":")
                    opts.disk_delay[int(index)] = float(seconds)
                except ValueError:
                    raise ArchiveError(f"disk_delay takes INDEX:SECONDS[,INDEX:SECONDS...], not {value!r}") from None
            elif key == "debug":
                opts.fuse_debug = True
            elif key == "take_lease":
                opts.take_lease = True
            elif key in S3_OPTIONS:
                opts.backend[key] = value
            elif key in ("defaults", "auto", "noauto", "user", "nouser", "nofail", "_netdev",
                         "exec", "noexec", "suid", "nosuid", "dev", "nodev", "atime", "noatime",
                         "relatime", "async"):
                pass                     # mount(8) and fstab words that are not ours
            elif key.startswith("x-"):
                pass
            else:
                raise ArchiveError(f"unknown mount option {item!r}")
        return opts


class Daemon:
    """One mounted archive."""

    def __init__(self, disk: str, mountpoint: str, opts: MountOptions,
                 admin_commands: dict[str, admin.AdminCommand]):
        self.disk = disk
        self.admin_commands = admin_commands    # what the control socket runs, by name
        self.mountpoint = os.path.abspath(mountpoint)
        self.opts = opts
        self.store: Optional[Store] = None
        self.fs: Optional[Operations] = None         # the FUSE request handlers
        self.archive: Optional[OpenArchive] = None   # what admin commands are given
        self.ns: Optional[Namespace] = None
        self.server: Optional[socketserver.UnixStreamServer] = None
        self.socket_path = ""
        self.trio_token = None
        self._checkpoint_lock = lockorder.lock("checkpoint")          # one checkpoint at a time
        self._checkpoint_asked = lockorder.lock("checkpoint asked")    # held while one asked by the JOURNAL waits or runs

    def open(self) -> None:
        testkill.arm()
        store = open_archive(self.disk, holder=f"webfs mount on {self.mountpoint}", fsync=self.opts.sync,
                           delays=self.opts.disk_delay, heat_k=self.opts.heat_k, background=True,
                           private=True)
        self.store = store
        log_path = _log_to_disk(store)
        if lockorder.checked() is not None:
            log.info("the order in which threads take locks is checked (WEBFS_LOCK_ORDER)")
        ns, journal, said = recovery.open_namespace(store, self.opts.journal_limit)
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
        recovery.mark_in_use(store)
        self.fs = Operations(store, ns, read_only=self.opts.read_only, store_mode=self.opts.store_mode,
                             cache_bytes=self.opts.piece_cache)
        # Admin commands that make names (webfs import) use the mount's namespace
        # and journal, and tell the kernel what changed under it.
        self.archive = OpenArchive(store, namespace=ns, journal=journal, read_only=self.opts.read_only,
                                   kernel=KernelHooks(pyfuse3.invalidate_inode, pyfuse3.invalidate_entry,
                                                      self.forget_misses, self.free_unused))

    def forget_misses(self, parents) -> None:
        """The kernel forgets the misses (negative entries) the mount answered in
        these directories: an admin operation made names in them. Call it after
        the commit, without the catalog lock, from a thread other than the loop's."""
        lockorder.holding_none("the event loop")
        missed = trio.from_thread.run_sync(self.fs.take_misses, list(parents),
                                           trio_token=self.trio_token)
        for parent, name in missed:
            try:
                pyfuse3.invalidate_entry(parent, name)
            except OSError:
                pass            # the kernel no longer has it

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
        self.socket_path = control_socket_path(self.store.conf.uuid)
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
                b"user.webfs.disks": "\n".join(v.backend.location for v in self.store.archive.volumes.values()).encode()}
        self.fs.root_xattrs.update(info)

    def serve_request(self, rfile, wfile) -> None:
        """One admin operation, asked as a JSON line, answered with JSON lines."""
        def send(obj):
            wfile.write((json.dumps(obj) + "\n").encode())
            wfile.flush()
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
                progress = admin.Progress(lambda kind, n, total, what: send(
                    {"progress": kind, "n": n, "total": total, "what": what}))
                result = fn(self.archive, progress, **req.get("options", {}))
                self.store.commit()
            send({"result": result.to_json()})
        except WebfsError as exc:
            send({"error": str(exc)})
        except BrokenPipeError:
            pass
        except Exception as exc:        # keep the daemon up; the caller hears what broke
            log.exception("admin operation failed")
            send({"error": f"internal error: {exc}"})

    async def flush_all(self) -> None:
        """Store every open file's buffer, commit, write the MANIFEST. A file that
        cannot be stored now (a full disk) does not keep the others from it: it
        stays open and dirty for its writer, and the sync fails naming it."""
        failed = await self.fs.files.commit_all()
        await trio.to_thread.run_sync(self.checkpoint)
        if failed:
            raise WebfsError(f"synced, except {len(failed)} open file(s) that could not be stored: "
                             + ", ".join(failed[:10]) + (" ..." if len(failed) > 10 else ""))

    def _flush_parity(self) -> None:
        from .parity import WRITE_BEHIND
        self.store.check_disks()
        self.store.protection.flush(older_than=WRITE_BEHIND)

    def _checkpoint_soon(self) -> None:
        """A checkpoint in a thread of its own, now: the JOURNAL passed its size
        bound (or a record disk left). Called from whatever thread appended,
        maybe under the catalog lock, so it only starts the thread."""
        if not self._checkpoint_asked.acquire(blocking=False):
            return

        def run():
            try:
                if self.journal.wants_checkpoint():     # not done meanwhile by another
                    self.checkpoint()
            except Exception:
                log.exception("checkpoint (the JOURNAL passed its size bound) failed")
            finally:
                self._checkpoint_asked.release()
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
        _trim_heap()

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
            ready()
            await pyfuse3.main()
            nursery.cancel_scope.cancel()

    def _trace_memory(self) -> None:
        """With WEBFS_TRACEMALLOC=FILE in the environment: every 10 s, append to
        FILE the RSS, the bytes Python allocated and the 15 lines of code that
        hold most of them (SQLite's page cache is outside Python: it shows as
        RSS that the traced total does not explain)."""
        import tracemalloc
        if not tracemalloc.is_tracing():
            tracemalloc.start(1)
            return
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        stats = snap.statistics("lineno")
        rss = next((line.split()[1] for line in open("/proc/self/status") if line.startswith("VmRSS")), "?")
        with open(os.environ["WEBFS_TRACEMALLOC"], "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} rss {rss} kB, traced {sum(s.size for s in stats) >> 10} kB, "
                    f"inodes known to the kernel {len(self.fs.lookups)}\n")
            f.write("".join(f"  {s.size >> 10:8d} kB {s.count:8d} {s.traceback}\n" for s in stats[:15]))

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
        while True:
            await trio.sleep(1.0)
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
            try:
                await trio.to_thread.run_sync(fn)
            except WebfsError as exc:
                log.warning("%s failed: %s; it runs again in %g s", what, exc, seconds)
            except Exception:
                log.exception("%s failed; it runs again in %g s", what, seconds)

    def close(self) -> None:
        """Write everything out; what could not be (files whose changes were
        dropped during the mount, a MANIFEST, parity left out of date) goes in
        the report that ``webfs umount`` prints before it exits non-zero."""
        problems = list(self.fs.files.failures) if self.fs is not None else []
        if self.fs is not None:
            from .fs import HANDOFFS, REQUESTS
            for what, counts in (("FUSE requests answered", REQUESTS), ("hand-offs to worker threads", HANDOFFS)):
                log.info("%s: %s", what, ", ".join(
                    f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "none")
        if getattr(self, "journal", None) is not None:
            self.journal.on_full = None         # the checkpoint below is the last
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass
        if self.store is not None:
            try:
                # Inodes with no name that the kernel knew until the unmount
                # (and so were kept) go now; they are no one's any more.
                if self.ns is not None and not self.opts.read_only:
                    for ino in self.ns.orphans():
                        self.ns.free(ino)
                try:
                    self.checkpoint()
                except Exception as exc:
                    log.exception("cannot write the MANIFEST at unmount")
                    problems.append(f"cannot write the MANIFEST and JOURNAL: {exc}")
                try:
                    self.store.protection.flush()
                except Exception as exc:
                    log.exception("cannot write parity at unmount")
                    problems.append(f"cannot write parity: {exc}")
                stale = self.store.protection.out_of_date()
                if stale:
                    problems.append(f"{stale} parity stripe(s) out of date (the blocks are intact; "
                                    "run 'webfs scrub --repair' or 'webfs fsck --repair')")
                self.store.catalog.set_meta("clean", "1")
                self.store.commit()
            except Exception as exc:
                log.exception("unmount did not finish")
                problems.append(f"unmount did not finish: {exc}")
                raise
            finally:
                try:
                    self.store.close()
                finally:
                    self._write_report(problems)

    def _write_report(self, problems: list[str]) -> None:
        if not self.socket_path:
            return
        path = report_path(self.socket_path)
        try:
            write_file(path, "".join(line.replace("\n", " ") + "\n" for line in problems).encode())
        except OSError as exc:
            log.error("cannot write the unmount report %s: %s", path, exc)


def mount(disk: str, mountpoint: str, opts: MountOptions, admin_commands: dict[str, admin.AdminCommand],
          foreground: bool = False) -> None:
    """Mount an archive; returns when unmounted (foreground) or once mounted
    (background). ``admin_commands`` (``webfs.admincommands.ADMIN_COMMANDS``, given by the
    command line, which knows every command) are what its control socket runs."""
    mnt = os.path.abspath(mountpoint)
    try:
        configure_s3(opts.backend)
    except ValueError as exc:
        raise ArchiveError(str(exc)) from None
    if opts.take_lease:
        os.environ[TAKE_ENV] = "1"
    if not os.path.isdir(mnt):
        check_not_gone(mnt)
        raise ArchiveError(f"{mountpoint}: mount point is not a directory")
    if os.path.ismount(mnt):
        raise ArchiveError(f"{mountpoint}: something is already mounted there")
    if foreground:
        _run(disk, mnt, opts, admin_commands, lambda: None)
        return
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(wfd)
        with os.fdopen(rfd, "rb") as r:
            msg = r.read().decode("utf-8", "replace")
        if msg != "ok":
            os.waitpid(pid, 0)
            raise WebfsError(msg or "the mount daemon died while starting; see its log")
        return
    os.close(rfd)
    os.setsid()
    status = 0
    started = False
    try:
        def ready():
            nonlocal started
            started = True
            os.write(wfd, b"ok")
            os.close(wfd)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
        _run(disk, mnt, opts, admin_commands, ready)
    except BaseException as exc:     # tell the parent, whatever it was
        status = 1
        # After ready() nobody reads the pipe and stderr is /dev/null: the log
        # is the only place a dying daemon can say why. Before it, a refusal
        # (WebfsError: a bad conf, a busy archive) is the parent's one line.
        if started or not isinstance(exc, WebfsError):
            log.critical("the daemon stopped: %s", exc, exc_info=True)
        try:
            os.write(wfd, str(exc).encode() or type(exc).__name__.encode())
            os.close(wfd)
        except OSError:
            pass
    finally:
        logging.shutdown()
        os._exit(status)


def _return_big_buffers_to_the_system() -> None:
    """Make glibc give every buffer of 1 MiB or more its own mapping, returned
    to the system when freed. By default the threshold rises to the size of the
    largest buffer freed (4 MiB pieces), after which pieces are carved from
    per-thread heaps that keep their pages: writing and reading back one 1 GiB
    file left the daemon at 366 MB resident instead of 187 MB."""
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        M_MMAP_THRESHOLD = -3
        libc.mallopt(M_MMAP_THRESHOLD, 1 << 20)
        # Every thread that mallocs (trio's workers, the checkpoint thread)
        # otherwise gets an arena of its own, up to 8 per core, each keeping
        # the pages it once held: SQLite's page cache, used from one thread
        # and another, spread over four arenas that kept ~25 MB between them
        # after 20,000 files. Two arenas keep contention low on two cores.
        M_ARENA_MAX = -8
        libc.mallopt(M_ARENA_MAX, 2)
    except (OSError, AttributeError):
        pass                    # not glibc: its allocator has its own ideas


def set_read_ahead(real_mnt: str, kb: int) -> None:
    """Let the kernel read ahead ``kb`` KiB on this mount (its FUSE default is
    128): at 1024 a sequential reader of a large file sends 1 MiB reads, a
    quarter of the requests (not the default: on 2 cores it did not make a
    cold read of a 250 MB file measurably faster). Only root may (/sys/class/bdi); anyone else keeps the
    default. ``real_mnt`` is the mount point's real path, resolved before the
    mount (from the loop's thread, a stat of it would wait for itself); the
    device comes from mountinfo. Run it in a thread of its own once mounted:
    its stat returns once the kernel has the answer to INIT, which would
    otherwise set the read-ahead back."""
    try:
        os.stat(real_mnt)
        with open("/proc/self/mountinfo") as f:
            devs = [line.split()[2] for line in f if line.split()[4] == real_mnt]
        if devs:
            with open(f"/sys/class/bdi/{devs[-1]}/read_ahead_kb", "w") as f:
                f.write(str(kb))
    except OSError as exc:
        log.debug("read-ahead of %s left at the kernel's default: %s", real_mnt, exc)


def _trim_heap() -> None:
    """Give the free pages of every malloc arena back to the system (after a
    checkpoint, which builds the MANIFEST in memory)."""
    try:
        import ctypes
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _run(disk: str, mnt: str, opts: MountOptions, admin_commands: dict[str, admin.AdminCommand],
         ready) -> None:
    _return_big_buffers_to_the_system()
    daemon = Daemon(disk, mnt, opts, admin_commands)
    daemon.open()
    real_mnt = os.path.realpath(mnt)
    try:
        pyfuse3.init(daemon.fs, mnt, daemon.fuse_options())
    except RuntimeError as exc:
        daemon.close()
        raise WebfsError(f"cannot mount on {mnt}: {exc}") from None
    if opts.read_ahead_kb:
        # The kernel sets the read-ahead from the daemon's answer to INIT, which
        # comes once the loop runs: a thread waits for the mount to answer a stat.
        threading.Thread(target=set_read_ahead, args=(real_mnt, opts.read_ahead_kb),
                         name="read-ahead", daemon=True).start()
    try:
        daemon.start_control()
        trio.run(daemon.main, ready)
    finally:
        try:
            pyfuse3.close(unmount=True)
        finally:
            daemon.close()


def _log_to_disk(store: Store) -> str:
    """The daemon's log goes to meta/webfs.log on the first disk (and stderr in the
    foreground, at the level the command was given: details stay in the file)."""
    path = os.path.join(store.archive.first_volume.root, "meta", "webfs.log")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for h in root.handlers:
        if h.level == logging.NOTSET:
            h.setLevel(root.level or logging.WARNING)
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    return path
