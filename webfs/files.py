"""Files webfs writes outside the archive's disks (an export's OUT, pywb's
config.yaml and CDXJ index, a mount's unmount report): how each is made.

The rule (webfs-format(5), FILES OUTSIDE THE ARCHIVE): such a file is created
new, never opened through a name that is already there. ``create_new`` opens
with O_CREAT|O_EXCL|O_NOFOLLOW, so a symlink planted at the name (or at a
predictable temporary name) makes the create fail instead of writing through
the link, as root, into whatever it points at. A finished file takes its
final name by rename(2), which replaces a symlink at that name itself, never
its target; or, when an existing file must not be replaced, by link(2),
which replaces nothing.
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets

NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS)   # vfat, some FUSE


def create_new(path: str, replace_leftover: bool = False) -> int:
    """A new, empty file at ``path``, open for writing (its descriptor; the mode
    is 0666 less the umask, as for any new file). FileExistsError if the name
    is taken; with ``replace_leftover`` the name is removed first (a symlink
    itself, never what it points at) and the create tried once more, so a name
    taken again meanwhile (another process writes there) is still refused."""
    try:
        return os.open(path, NEW, 0o666)
    except FileExistsError:
        if not replace_leftover:
            raise
    os.unlink(path)
    return os.open(path, NEW, 0o666)


def create_beside(path: str) -> tuple[str, int]:
    """A new file with an unpredictable name in ``path``'s directory: (name, descriptor)."""
    folder, base = os.path.split(path)
    for _ in range(100):
        tmp = os.path.join(folder, f".{base}.{secrets.token_hex(6)}.tmp")
        try:
            return tmp, create_new(tmp)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", path)


def publish(tmp: str, path: str, replace: bool) -> None:
    """Give a finished file its name. With ``replace``, rename over whatever
    has it; without, FileExistsError if anything has it (link(2), then the
    temporary name goes; a filesystem without hard links: checked, then renamed)."""
    if replace:
        os.rename(tmp, path)
    else:
        try:
            os.link(tmp, path, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in NO_HARD_LINKS:
                raise
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path) from None
            os.rename(tmp, path)
        else:
            os.unlink(tmp)
    sync_directory(os.path.dirname(path) or ".")


def sync_directory(folder: str) -> None:
    """fsync a directory, so that a rename in it outlives a crash (where the
    filesystem lets a directory be synced)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file(path: str, data: bytes, replace: bool = True) -> None:
    """``path`` holds ``data``: written under a new temporary name beside it,
    fsynced, then given its name (``publish``). A failure leaves no temporary file."""
    tmp, fd = create_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        publish(tmp, path, replace)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
