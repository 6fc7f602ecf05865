"""The client side of a mount's control socket: no FUSE, no event loop.

It owns asking a mount's daemon to run an admin operation, answered as a
webfs.admin.Result (the wire, and the ``user.webfs.control`` xattr of the
mount's root that names the socket, are webfs.controlwire's), which mount a
path is in, and how ``webfs umount`` unmounts and waits for the daemon's
report. The daemon
itself (webfs.daemon) serves the socket; this module stays small so the
commands that only talk to a mount do not load pyfuse3 and trio (a third
of a second of every ``webfs import`` or ``webfs status``).
"""
from __future__ import annotations

import errno
import os
import re
import time
from typing import Optional

from . import admin
from .controlwire import CONTROL_XATTR, ask, is_mountpoint, mount_of  # noqa: F401 (its callers ask here)
from .errors import ArchiveError, WebfsError

RUN_DIR = "/run/webfs"


def control_socket_path(archive_uuid: str, machine: Optional[str] = None) -> str:
    """Where a mount's control socket is: /run/webfs for root, else
    ``webfs-UID`` in the temporary directory (the standard library's
    ``tempfile.gettempdir``: TMPDIR, else /tmp, as every command's temporary
    files; the daemon and the commands that call it see one environment).
    ``machine``: the mount's machine id where several machines share the
    archive's catalog, two of which may be on one host (one socket each)."""
    import tempfile
    base = RUN_DIR if os.access("/run", os.W_OK) else os.path.join(
        tempfile.gettempdir(), f"webfs-{os.getuid()}")
    return os.path.join(base, f"{archive_uuid}.{machine}.sock" if machine else f"{archive_uuid}.sock")


def report_path(socket_path: str) -> str:
    """Where the daemon leaves, as it exits, what it could not finish, for ``webfs umount``."""
    return socket_path + ".report"


def gone_mount(path: str) -> Optional[str]:
    """The mount point of the FUSE mount ``path`` is in, if its daemon died
    (statfs, which the kernel always asks the daemon, says ENOTCONN), else None."""
    here = os.path.abspath(path)
    best = None
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.split()
            fstype = fields[fields.index(b"-") + 1]
            point = os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4]))
            if fstype.startswith(b"fuse") and (here == point or here.startswith(point.rstrip("/") + "/")) \
                    and (best is None or len(point) > len(best)):
                best = point
    if best is None:
        return None
    try:
        os.statvfs(best)
    except OSError as exc:
        return best if exc.errno == errno.ENOTCONN else None
    return None


def check_not_gone(path: str) -> None:
    """ArchiveError when ``path`` is in a mount whose daemon died: it says so, and what to do."""
    mnt = gone_mount(path)
    if mnt is not None:
        raise ArchiveError(f"the mount at {mnt} is gone (its daemon died); remount it: "
                           f"'webfs umount {mnt}', then 'webfs mount DISK {mnt}'")


def umount(mountpoint: str, timeout: float = 600.0) -> None:
    """Unmount and wait until the daemon has written everything and exited."""
    import subprocess
    mnt = os.path.abspath(mountpoint)
    if gone_mount(mnt) == mnt:
        proc = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
        if proc.returncode != 0:
            raise WebfsError(f"cannot unmount {mountpoint}: {proc.stderr.strip()}")
        raise WebfsError(f"unmounted {mountpoint}, whose daemon had died: what it had not stored "
                         "is lost; mount the archive again (its crash recovery runs)")
    if not os.path.ismount(mnt):
        raise ArchiveError(f"{mountpoint}: not mounted")
    try:
        pid = int(os.getxattr(mnt, "user.webfs.pid"))
        report = report_path(os.getxattr(mnt, CONTROL_XATTR).decode())
        log_file = os.getxattr(mnt, "user.webfs.log").decode()     # an S3 disk's is in its state directory
    except OSError:
        raise ArchiveError(f"{mountpoint}: not a webfs mount") from None
    proc = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
    if proc.returncode != 0:
        raise WebfsError(f"cannot unmount {mountpoint}: {proc.stderr.strip()}")
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and _not_zombie(pid):
        if time.monotonic() > deadline:
            raise WebfsError(f"the daemon (pid {pid}) is still writing after {timeout:.0f} s")
        time.sleep(0.05)
    try:
        with open(report) as f:
            problems = f.read().splitlines()
        os.unlink(report)
    except FileNotFoundError:
        raise WebfsError(f"unmounted {mountpoint}, but the daemon (pid {pid}) ended without "
                         f"saying it finished; see {log_file}, then 'webfs fsck'") from None
    if problems:
        raise WebfsError(f"unmounted {mountpoint}, but not everything was kept "
                         f"(details in {log_file}):\n  " + "\n  ".join(problems))


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def call(mountpoint: str, op: str, options: dict, listener=None) -> admin.Result:
    """Run an admin operation inside the daemon of a mount point (webfs.controlwire.ask)."""
    return admin.Result.from_json(ask(mountpoint, op, options, listener))
