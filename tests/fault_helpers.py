"""What the fault suite's randomized tests share: the long-run switch, page-cache
drops, a mount with small pieces, and the checks that the daemon is alive and
its log is clean."""
from __future__ import annotations

import os
import re
from pathlib import Path

from conftest import Mounted, make_archive

# `make test-long` sets this: soaks run longer, random tests do more operations.
LONG = os.environ.get("WEBFS_LONG_TESTS", "") not in ("", "0")


def drop_caches() -> None:
    """Empty the kernel's page cache (and dentries, inodes): the next reads go to the daemon."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fadvise_drop(path) -> None:
    """Drop one file's pages from the page cache (posix_fadvise DONTNEED)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class SmallPieceMount(Mounted):
    """A mounted archive whose files are split into small pieces (max_block), so
    modest files already span several blocks and piece boundaries get exercised."""

    def __init__(self, root: Path, disks: int = 4, max_block: int = 64 * 1024, options: str = "",
                 mount_kwargs: dict | None = None):
        self.root = root
        self.disks = make_archive(root, disks, max_block=max_block)
        self.mnt = root / "mnt"
        self.mnt.mkdir(exist_ok=True)
        self.options = options
        self.mount_kwargs = mount_kwargs or {}
        self.mount()

    def mount(self, options: str = None) -> None:
        from conftest import webfs
        opts = self.options if options is None else options
        webfs("mount", *(["-o", opts] if opts else []), self.disks[0], self.mnt, **self.mount_kwargs)

    @property
    def log_path(self) -> Path:
        return self.disks[0] / "meta" / "webfs.log"


def daemon_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def log_problems(log_path: Path, allow: tuple[str, ...] = ()) -> list[str]:
    """Lines of the daemon's log that no healthy run should write: tracebacks, errors."""
    if not log_path.exists():
        return []
    bad = []
    for line in log_path.read_text(errors="replace").splitlines():
        if re.search(r"Traceback|\b(ERROR|CRITICAL)\b", line) and not any(a in line for a in allow):
            bad.append(line)
    return bad
