"""What admin commands are made of: one function per long-running command
(scrub, rebuild, rebalance, cool, ...), run in-process on an unmounted
archive, or inside the daemon of a mounted one, so a command given a mount
point and a command given a disk do exactly the same work.

An admin command is ``fn(archive, progress, **options) -> Result``
(``archive``: an ``assembly.OpenArchive``), named in ``webfs.admincommands``. It must be safe to run while the mount serves
readers and writers (the store is thread-safe). ``Progress`` reports work
done; the CLI draws it as a bar. ``Result`` carries the lines to print, the
exit status, and any figures for ``--json``. ``Pace``, ``parallel`` and
``DiskGates`` are what the commands that read every disk share.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, TypeVar

from . import lockorder

T = TypeVar("T")
R = TypeVar("R")

@dataclass
class Result:
    lines: list[str] = field(default_factory=list)
    exit_code: int = 0
    figures: dict[str, Any] = field(default_factory=dict)

    def say(self, line: str) -> None:
        self.lines.append(line)

    def to_json(self) -> dict:
        return {"lines": self.lines, "exit_code": self.exit_code, "figures": self.figures}

    @classmethod
    def from_json(cls, d: dict) -> "Result":
        return cls(d.get("lines", []), d.get("exit_code", 0), d.get("figures", {}))


AdminCommand = Callable[..., Result]       # fn(archive, progress, **options)


class Progress:
    """Work done so far; listeners (a tqdm bar, a socket) are told of each step.
    ``stop_requested`` lets a caller ask a long operation to stop at a safe point."""

    def __init__(self, listener: Optional[Callable[[str, int, Optional[int], str], None]] = None):
        self.done = 0
        self.total: Optional[int] = None
        self.listener = listener
        self.stop_requested = threading.Event()

    def set_total(self, total: Optional[int], what: str = "") -> None:
        self.total = total
        self._tell("total", what)

    def advance(self, n: int = 1, what: str = "") -> None:
        self.done += n
        self._tell("advance", what, n)

    def note(self, text: str) -> None:
        self._tell("note", text)

    def _tell(self, kind: str, what: str, n: int = 0) -> None:
        if self.listener:
            self.listener(kind, n if kind == "advance" else self.done, self.total, what)

    @property
    def stopping(self) -> bool:
        return self.stop_requested.is_set()


def human(n: Optional[float]) -> str:
    """A byte count as people read it: 512 B, 3.4 MiB."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def status(store, progress: Progress) -> Result:
    """The archive's figures (what `webfs status` prints), from inside a daemon."""
    from .figures import archive_figures
    return Result(figures=archive_figures(store))


class Pace:
    """Sleep as needed to keep the bytes handled under a rate (MB/s; None: no
    limit). Thread-safe: the workers of a parallel operation share one."""

    def __init__(self, mb_per_s: Optional[float]):
        self.rate = mb_per_s * 1e6 if mb_per_s else None
        self.started = time.monotonic()
        self.done = 0
        self._lock = lockorder.lock("pace")

    def wrote(self, n: int) -> None:
        with self._lock:
            self.done += n
            ahead = self.done / self.rate - (time.monotonic() - self.started) if self.rate else 0
        if ahead > 0:
            time.sleep(ahead)


def parallel(items: Iterable[T], work: Callable[[T], R], took: Callable[[T, R], None],
             progress: Progress, threads: int) -> None:
    """Run ``work`` on every item in ``threads`` worker threads, at most
    2 x ``threads`` items in flight; ``took(item, result)`` runs in the
    calling thread, in the order the items finish (a slow one holds back
    nothing behind it). Stops submitting when the progress is asked to stop;
    the items in flight finish. An exception from ``work`` is raised here."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait   # not for a command that only asks a mount
    with ThreadPoolExecutor(threads, thread_name_prefix="webfs-admin") as pool:
        pending: dict = {}

        def drain(until: int) -> None:
            while len(pending) > until:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    took(pending.pop(fut), fut.result())
        for item in items:
            if progress.stopping:
                break
            pending[pool.submit(work, item)] = item
            drain(2 * threads - 1)
        drain(0)


class DiskGates:
    """At most ``per_disk`` reads at once on each disk, so a slow disk holds
    back only the work that needs it, and the others are kept busy."""

    def __init__(self, per_disk: int):
        self.per_disk = per_disk
        self._gates: dict[int, threading.BoundedSemaphore] = {}
        self._lock = lockorder.lock("disk gates")

    def __call__(self, disk: int) -> threading.BoundedSemaphore:
        gate = self._gates.get(disk)
        if gate is None:
            with self._lock:
                gate = self._gates.setdefault(disk, lockorder.semaphore("disk gate", self.per_disk))
        return gate
