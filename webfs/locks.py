"""Locks: ``KeyedLocks`` gives one lock per key (a signature, a stripe) in a
process; ``BucketLease`` keeps two machines from writing one S3 disk; and
``Clock``, the time that leases and webfs's other timers go by.

The lease's renewals, parity written behind, staged uploads, an S3
endpoint's down periods and hedged reads, and a disk's counted-down free
space ask a ``Clock`` (``SYSTEM_CLOCK`` unless they are
given another) instead of the ``time`` module, and wait on it. A test gives
them a manual clock and moves it with ``advance``: it checks the timing
logic (a lease goes stale after five periods, an upload waits
``UPLOAD_AFTER``) without sleeping through it, so the check holds however
loaded the machine is. The mount's periodic tasks run under trio, whose
clock (``trio.testing.MockClock``) plays that part there.

flock in a state directory keeps two mounts of one machine apart, not two
machines: for an S3 disk, whoever writes (a mount, a command that changes
the archive) first creates a *lease*, the object ``meta/MOUNTED`` in the
bucket (host, pid, a random mount id, start, last renewal), with a
conditional PUT (``If-None-Match: *``), and reads it back. The holder renews
it every ``renew`` seconds (60; ``WEBFS_LEASE_RENEW``, read by the command
line and passed in, as whether to take over is) and removes it when
it closes. A lease held by anyone else refuses the writer with one line
naming the disk, the holder and the lease's age. A lease not renewed for
``STALE_RENEWALS`` of its holder's renewal periods (a machine that died) is
taken over only when asked (``webfs --take-lease``, ``-o take_lease``,
``WEBFS_TAKE_LEASE=1``), never silently. One exception is certain: a lease
made from this machine's very state directory, whose flock we now hold, was
left by a process that is gone (the kernel let go of its flock), so it is
taken over as flock's own lock would be.

**Several machines** (the mounts of an archive whose catalog is in
PostgreSQL, kept apart by their rows in the engine: ``webfs.machines``) each
hold a lease object of their own, ``meta/machines/MACHINE/MOUNTED``
(``BucketLease(machine=...)``), and no ``meta/MOUNTED``: a shared lease is
refused while an exclusive one is held, and an exclusive one while a shared
one is fresh. Each side writes its own object first and then looks for the
other's, so of two that start at once at least one sees the other (S3 reads
after writes are consistent) and backs off. A machine's shared lease that a
living mount took over (its row in the engine went stale) is removed by that
mount (``remove_shared``).
"""
from __future__ import annotations

import calendar
import logging
import os
import socket
import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from typing import Iterator, Optional

from .backends.base import LEASE as LEASE_PATH, MACHINES
from .backends.options import DEFAULT_LEASE_RENEW, MIN_LEASE_RENEW
from .errors import ArchiveBusy
from .lockorder import keyed_lock

log = logging.getLogger(__name__)

LEASE_MAGIC = "WEBFS-LEASE 1"
DEFAULT_RENEW = DEFAULT_LEASE_RENEW
STALE_RENEWALS = 5                      # renewals missed before a lease counts as stale


def shared_lease_path(machine: str) -> str:
    """The object of one machine's shared lease."""
    return f"{MACHINES}{machine}/MOUNTED"


class Clock:
    """The system's clocks, or (``Clock(start=...)``) a manual clock that
    stands still until ``advance`` moves it; both of its readings (monotonic
    and wall) are then ``start`` plus what was advanced."""

    def __init__(self, start: Optional[float] = None):
        self.manual = start is not None
        self._now = float(start or 0.0)
        self._lock = threading.Lock()
        self._waiting: dict[threading.Condition, int] = {}     # manual: conditions waited on

    def monotonic(self) -> float:
        return self._now if self.manual else time.monotonic()

    def time(self) -> float:
        """Wall time (seconds since the epoch): for stamps other machines read."""
        return self._now if self.manual else time.time()

    def wait(self, cond: threading.Condition, until: float) -> None:
        """With ``cond`` held: wait until it is notified or ``monotonic()``
        reaches ``until``. It may return early; callers check again."""
        if not self.manual:
            cond.wait(max(0.0, until - time.monotonic()))
            return
        with self._lock:
            if self._now >= until:
                return
            self._waiting[cond] = self._waiting.get(cond, 0) + 1
        try:
            cond.wait()
        finally:
            with self._lock:
                self._waiting[cond] -= 1
                if not self._waiting[cond]:
                    del self._waiting[cond]

    @property
    def waiters(self) -> int:
        """(Manual clock.) Threads in ``wait`` now: a test that advances the
        clock once a thread waits again knows the step reaches it."""
        with self._lock:
            return sum(self._waiting.values())

    def advance(self, seconds: float) -> None:
        """(Manual clock.) Move time forward and wake whoever waits on it."""
        if not self.manual:
            raise ValueError("only a manual clock is advanced")
        with self._lock:
            self._now += seconds
            waiting = list(self._waiting)
        for cond in waiting:
            with cond:
                cond.notify_all()


SYSTEM_CLOCK = Clock()


class KeyedLocks:
    """One lock per key, made on demand and dropped when nobody holds it; all
    of them are named ``name`` (webfs.lockorder)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._guard = threading.Lock()
        self._locks: dict[str, list] = {}

    @contextmanager
    def __call__(self, key: str, fresh: bool = False) -> Iterator[None]:
        """The lock of ``key``. ``fresh``: of a key nobody else can know yet
        (made under a lock still held), taken without waiting, so holding
        other locks orders nothing (webfs.lockorder)."""
        with self._guard:
            entry = self._locks.setdefault(key, [keyed_lock(self.name, key), 0])
            if fresh and entry[1]:
                raise RuntimeError(f"{self.name} lock {key}: already held, so not fresh")
            entry[1] += 1
        entry[0].acquire(blocking=not fresh)        # fresh: nobody holds it, it is free
        try:
            yield
        finally:
            entry[0].release()
            with self._guard:
                entry[1] -= 1
                if not entry[1]:
                    del self._locks[key]

    def users(self, key: str) -> int:
        """Threads that hold or wait for this key's lock now."""
        with self._guard:
            entry = self._locks.get(key)
            return entry[1] if entry else 0

    @contextmanager
    def many(self, keys) -> Iterator[None]:
        """The locks of all these keys, taken in sorted order, so that two
        threads taking several never wait for each other's."""
        with ExitStack() as stack:
            for key in sorted(keys):
                stack.enter_context(self(key))
            yield


def machine_id() -> str:
    """This machine, for telling our own leases apart: /etc/machine-id, else the host name."""
    try:
        with open("/etc/machine-id") as f:
            return f.read().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


def _parse(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines()[1:]:
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def _seconds(stamp: str) -> Optional[float]:
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, TypeError):
        return None


def remove_shared(backend, machine: str) -> None:
    """A dead machine's shared lease, gone (its mount was taken over by a living one)."""
    try:
        backend.remove(shared_lease_path(machine))
    except OSError as exc:
        log.warning("%s: cannot remove the lease of machine %s: %s", backend.location, machine,
                    exc.strerror or exc)


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class BucketLease:
    """The lease of one S3 disk (a backend with ``write_if_absent``), taken
    with ``take``, renewed every ``renew`` seconds by a thread of its own, let
    go with ``release``; a stale lease of another machine is taken over only
    with ``take_over``; its stamps, ages and renewals go by ``clock``.
    With ``machine`` (a mount of an archive whose catalog is in PostgreSQL)
    the lease is that machine's shared one (``shared_lease_path``)."""

    def __init__(self, backend, holder: str, renew: float = DEFAULT_RENEW, take_over: bool = False,
                 clock: Clock = SYSTEM_CLOCK, machine: Optional[str] = None):
        self.backend = backend
        self.machine = machine
        self.path = LEASE_PATH if machine is None else shared_lease_path(machine)
        self.holder = holder
        self.clock = clock
        self.mount_id = uuid.uuid4().hex
        self.renew = max(renew, MIN_LEASE_RENEW)
        self.take_over = take_over
        self.started = clock.time()
        self.lost = False
        self._wake = threading.Condition()      # notified by release
        self._stopping = False
        self._due = 0.0                         # the next renewal (clock.monotonic())
        self._thread: Optional[threading.Thread] = None

    def _text(self, now: float) -> bytes:
        return (f"{LEASE_MAGIC}\nHost: {socket.gethostname()}\nMachine: {machine_id()}\n"
                f"State: {self.backend.root}\nPid: {os.getpid()}\nHolder: {self.holder}\n"
                f"Mount: {self.mount_id}\nStarted: {_stamp(self.started)}\n"
                f"Renewed: {_stamp(now)}\nRenew-Every: {self.renew:g}\n").encode()

    def _current(self) -> Optional[dict[str, str]]:
        """The lease in the bucket now (its fields), or None when there is none."""
        return self._read(self.path)

    def _read(self, path: str) -> Optional[dict[str, str]]:
        """The fields of a lease object, or None when there is none."""
        try:
            return _parse(self.backend.read(path).decode("utf-8", "replace"))
        except FileNotFoundError:
            return None

    def take(self) -> None:
        """Create the lease, or take over one we may take; else ArchiveBusy."""
        where = self.backend.location
        try:
            if self.machine is None:
                self._create()
                self._refuse_shared()
            else:
                self._create_shared()
        except OSError as exc:
            raise ArchiveBusy(f"{where}: cannot take the mount lease: {exc.strerror or exc}") from None
        self.backend.lease = self
        self._due = self.clock.monotonic() + self.renew
        self._thread = threading.Thread(target=self._renew_loop, name="lease renewal", daemon=True)
        self._thread.start()

    def _create(self) -> None:
        for _ in range(3):          # a lease removed between our create and our read: again
            try:
                self.backend.write_if_absent(LEASE_PATH, self._text(self.clock.time()))
            except FileExistsError:
                other = self._current()
                if other is None:
                    continue
                self._take_over(other)
            # Read back: on a store that ignores If-None-Match, of two mounts
            # that wrote at once only the one whose lease is there goes on.
            now = self._current()
            if now is not None and now.get("Mount") == self.mount_id:
                return
            if now is not None:
                raise ArchiveBusy(self._refusal(now, "took it as we did"))
        raise ArchiveBusy(f"{self.backend.location}: the mount lease keeps vanishing; "
                          "is another machine taking it?")

    def _create_shared(self) -> None:
        """Write this machine's shared lease, then make sure no exclusive one is
        held (one of ours by flock, or stale and asked to take over, is removed)."""
        exclusive = self._read(LEASE_PATH)
        if exclusive is not None:
            self._may_replace(exclusive)
            self.backend.remove(LEASE_PATH)
        self.backend.write_atomic(self.path, self._text(self.clock.time()))
        exclusive = self._read(LEASE_PATH)
        if exclusive is not None:       # an exclusive taker started meanwhile: it goes on
            self.backend.remove(self.path)
            raise ArchiveBusy(self._refusal(exclusive, "took it as we did"))

    def _refuse_shared(self) -> None:
        """(Exclusive, our lease made.) Refuse while another machine's shared
        lease is fresh; a stale one goes only when asked to take over."""
        for path in self.backend.list(MACHINES.rstrip("/")):
            if not path.endswith("/MOUNTED"):
                continue
            other = self._read(path)
            if other is None:
                continue
            try:
                self._may_replace(other)
            except ArchiveBusy:
                self.backend.remove(LEASE_PATH)
                raise
            self.backend.remove(path)

    def _may_replace(self, other: dict[str, str]) -> None:
        """Another holder's lease may be replaced: ours by flock, or stale and asked to; else ArchiveBusy."""
        ours = other.get("Machine") == machine_id() and other.get("State") == self.backend.root
        if ours:
            log.info("%s: taking over the lease of a mount from this state directory that is gone (%s)",
                     self.backend.location, other.get("Holder", "?"))
        else:
            age = self._age(other)
            if age is None or age <= self._stale_after(other):
                raise ArchiveBusy(self._refusal(other))
            if not self.take_over:
                raise ArchiveBusy(self._refusal(other, stale=True))
            log.warning("%s: taking over the stale lease of %s on %s, not renewed for %.0f s",
                        self.backend.location, other.get("Holder", "?"), other.get("Host", "?"), age)

    def _take_over(self, other: dict[str, str]) -> None:
        """Replace another holder's lease, if it is ours by flock or stale and asked to; else refuse."""
        self._may_replace(other)
        self.backend.write_atomic(LEASE_PATH, self._text(self.clock.time()))

    def _age(self, fields: dict[str, str]) -> Optional[float]:
        renewed = _seconds(fields.get("Renewed", ""))
        return None if renewed is None else max(0.0, self.clock.time() - renewed)

    @staticmethod
    def _stale_after(fields: dict[str, str]) -> float:
        try:
            every = float(fields.get("Renew-Every", ""))
        except ValueError:
            every = DEFAULT_RENEW
        return STALE_RENEWALS * every

    def _refusal(self, other: dict[str, str], why: str = "", stale: bool = False) -> str:
        age = self._age(other)
        said = (f"{self.backend.location}: in use by {other.get('Holder', 'another webfs')} on "
                f"{other.get('Host', 'another machine')} (pid {other.get('Pid', '?')})"
                + (f", who {why}" if why else "")
                + (f"; its lease was renewed {age:.0f} s ago" if age is not None else "; its lease is unreadable"))
        if stale:
            return said + (" (stale: that machine stopped); if it is down for good, take the "
                           "lease over with 'webfs --take-lease' (-o take_lease for mount)")
        return said + (f"; unmount it there (a lease not renewed for {self._stale_after(other):.0f} s "
                       "can be taken over with 'webfs --take-lease')")

    def held(self) -> bool:
        """Is the lease in the bucket still ours (asked now)? A lost lease is said once."""
        if not self.lost:
            now = self._current()
            if now is None or now.get("Mount") != self.mount_id:
                self.lost = True
                log.error("%s: the mount lease is no longer ours (%s); stop this mount and check the "
                          "archive", self.backend.location,
                          "gone" if now is None else f"taken by {now.get('Holder', '?')} on {now.get('Host', '?')}")
        return not self.lost

    def _renew_loop(self) -> None:
        while self._sleep_until_due():
            self._due = self.clock.monotonic() + self.renew
            try:
                if not self.held():
                    return
                self.backend.write_atomic(self.path, self._text(self.clock.time()))
            except OSError as exc:
                log.warning("%s: cannot renew the mount lease: %s", self.backend.location,
                            exc.strerror or exc)

    def _sleep_until_due(self) -> bool:
        """Wait for the next renewal: False when the lease is being released."""
        with self._wake:
            while not self._stopping and self.clock.monotonic() < self._due:
                self.clock.wait(self._wake, self._due)
            return not self._stopping

    def release(self) -> None:
        """Stop renewing and remove the lease, if it is still ours."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()
        self.backend.lease = None
        try:
            if self.held():
                self.backend.remove(self.path)
        except OSError as exc:
            log.error("%s: cannot remove the mount lease: %s (the next mount from this state "
                      "directory takes it over)", self.backend.location, exc.strerror or exc)
