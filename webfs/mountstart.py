"""Starting a mount: the checks before it, the fork that detaches the daemon
(reporting success or the error to the command that started it through a
pipe), the process's allocator settings and the kernel's read-ahead, then
the ``Daemon`` run until unmounted. The daemon itself is the running mount
only (``webfs.daemon``).
"""
from __future__ import annotations

import logging
import os
import threading

import pyfuse3
import trio

from . import admin
from .backends.options import BackendOptions
from .control import check_not_gone
from .daemon import Daemon
from .errors import ArchiveError, WebfsError
from .mountoptions import MountOptions

log = logging.getLogger(__name__)


def mount(disk: str, mountpoint: str, opts: MountOptions, admin_commands: dict[str, admin.AdminCommand],
          backend_options: BackendOptions, foreground: bool = False) -> None:
    """Mount an archive; returns when unmounted (foreground) or once mounted
    (background). ``admin_commands`` (``webfs.admincommands.ADMIN_COMMANDS``, given by the
    command line, which knows every command) are what its control socket runs;
    ``backend_options``, what the command line read of S3 disks and leases,
    with the mount's ``-o`` options on top (its daemon gets them as an argument)."""
    mnt = os.path.abspath(mountpoint)
    try:
        backend_options = backend_options.with_settings(opts.backend)
    except ValueError as exc:
        raise ArchiveError(str(exc)) from None
    if opts.take_lease:
        backend_options = backend_options.taking_lease()
    if not os.path.isdir(mnt):
        check_not_gone(mnt)
        raise ArchiveError(f"{mountpoint}: mount point is not a directory")
    if os.path.ismount(mnt):
        raise ArchiveError(f"{mountpoint}: something is already mounted there")
    if foreground:
        _run(disk, mnt, opts, admin_commands, backend_options, lambda: None)
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
        _run(disk, mnt, opts, admin_commands, backend_options, ready)
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


def _run(disk: str, mnt: str, opts: MountOptions, admin_commands: dict[str, admin.AdminCommand],
         backend_options: BackendOptions, ready) -> None:
    _return_big_buffers_to_the_system()
    daemon = Daemon(disk, mnt, opts, admin_commands, backend_options)
    daemon.open()
    known = sorted(d.index for d in daemon.store.conf.disks)
    unknown = sorted(set(opts.disk_delay) - set(known))
    if unknown:             # -o disk_delay of a disk the archive has not: refused, as a bad option is
        daemon.close()
        raise ArchiveError(f"disk_delay names disk {unknown[0]}, which the archive does not have "
                           f"(its disks: {', '.join(map(str, known))})")
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
