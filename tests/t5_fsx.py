"""fsx-style random operations on one file, mirrored on a reference file.

Every operation runs on a file in the mount and on a reference file in a plain
temporary directory (ext4 here): read, write, truncate up and down, mmap read,
mmap write + msync, fsync, close and reopen, fadvise DONTNEED, page-cache drops
and remounts. After each one both files must agree: the same result or the
same errno, the same size, the same bytes. The run is seeded; a failure prints
the seed and the last operations, and the whole log is written next to the
test's files. Replay: WEBFS_FSX_SEED=<seed> [WEBFS_FSX_OPS=<n>].

A second test takes one file past 4 GiB and then to the sizes ext4 still
allows (1 TiB) and refuses (999999999999999), with huge seeks: webfs must
answer as the reference does, in time, and stay alive.
"""
from __future__ import annotations

import errno
import mmap
import os
import random
import resource
import signal
import threading
import time
from pathlib import Path

import pytest

from fault_helpers import LONG, SmallPieceMount, daemon_alive, drop_caches, log_problems

OPS = int(os.environ.get("WEBFS_FSX_OPS") or (50000 if LONG else 4000))
MAX_SIZE = 1 << 20                     # the random test's file stays below this (16 pieces of 64 KiB)
DAEMON_MEMORY = 6 << 30                # address-space limit of the daemon: a runaway allocation fails, not the machine


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (DAEMON_MEMORY, DAEMON_MEMORY))


def outcome(fn, *args):
    """('ok', value) or ('errno', name): what a caller of the operation sees."""
    try:
        return ("ok", fn(*args))
    except OSError as exc:
        return ("errno", errno.errorcode.get(exc.errno, exc.errno))
    except (ValueError, OverflowError) as exc:            # Python refuses before the kernel
        return ("python", type(exc).__name__)


class Pair:
    """The same file in the mount (a) and in a plain directory (b)."""

    def __init__(self, a: Path, b: Path):
        self.paths = (a, b)
        self.fds = [None, None]
        self.open()

    def open(self, flags=os.O_RDWR | os.O_CREAT):
        self.fds = [os.open(p, flags, 0o644) for p in self.paths]

    def close(self):
        for fd in self.fds:
            os.close(fd)

    def both(self, fn, *args):
        return [outcome(fn, fd, *args) for fd in self.fds]

    def size(self) -> int:
        return os.fstat(self.fds[1]).st_size


class Fsx:
    def __init__(self, m: SmallPieceMount, ref_dir: Path, seed: int, log_path: Path):
        self.m = m
        self.rng = random.Random(seed)
        self.seed = seed
        self.log: list[str] = []
        self.log_path = log_path
        self.pair = Pair(m.mnt / "fsx.bin", ref_dir / "fsx.bin")
        self.pattern = 0

    def data(self, n: int) -> bytes:
        """Bytes that say which operation wrote them (so a stale page names its writer)."""
        self.pattern += 1
        stamp = f"<op{len(self.log)}:{self.pattern}>".encode()
        return (stamp * (n // len(stamp) + 1))[:n]

    def say(self, text: str) -> None:
        self.log.append(text)

    def fail(self, text: str):
        self.log_path.write_text("\n".join(self.log) + "\n")
        tail = "\n".join(f"  {i}: {t}" for i, t in enumerate(self.log) if i >= len(self.log) - 30)
        pytest.fail(f"fsx seed {self.seed}, op {len(self.log) - 1}: {text}\nlast operations:\n{tail}\n"
                    f"whole log: {self.log_path}\nreplay: WEBFS_FSX_SEED={self.seed} WEBFS_FSX_OPS={OPS}",
                    pytrace=False)

    def agree(self, what: str, results) -> None:
        a, b = results
        if a != b:
            self.fail(f"{what}: webfs gave {short(a)}, the reference {short(b)}")

    def compare_all(self) -> None:
        sa, sb = (os.fstat(fd).st_size for fd in self.pair.fds)
        if sa != sb:
            self.fail(f"size: webfs {sa}, the reference {sb}")
        a, b = (os.pread(fd, sb + 1, 0) for fd in self.pair.fds)
        if a != b:
            at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            self.fail(f"content differs from byte {at} (page {at // 4096}): webfs {a[at:at + 40]!r}, "
                      f"the reference {b[at:at + 40]!r}")

    # -- the operations ------------------------------------------------------------

    def op_read(self):
        size = self.pair.size()
        off = self.rng.randrange(0, size + 5000)
        n = self.rng.randrange(0, 200_000)
        self.say(f"pread {n} at {off}")
        self.agree("pread", self.pair.both(os.pread, n, off))

    def op_write(self):
        size = self.pair.size()
        off = self.rng.randrange(0, min(size + 100_000, MAX_SIZE - 1))
        n = self.rng.randrange(1, min(150_000, MAX_SIZE - off) + 1)
        data = self.data(n)
        self.say(f"pwrite {n} at {off}")
        self.agree("pwrite", self.pair.both(os.pwrite, data, off))

    def op_append(self):
        n = self.rng.randrange(1, 20_000)
        if self.pair.size() + n >= MAX_SIZE:
            return self.op_truncate()
        data = self.data(n)
        self.say(f"append {n} (lseek SEEK_END + write)")
        self.agree("lseek", self.pair.both(os.lseek, 0, os.SEEK_END))
        self.agree("write", self.pair.both(os.write, data))

    def op_truncate(self):
        size = self.pair.size()
        new = self.rng.choice([0, self.rng.randrange(0, size + 1), self.rng.randrange(0, MAX_SIZE)])
        self.say(f"ftruncate {size} -> {new}")
        self.agree("ftruncate", self.pair.both(os.ftruncate, new))

    def op_mmap_read(self):
        size = self.pair.size()
        if size == 0:
            return self.op_write()
        off = self.rng.randrange(0, size)
        n = self.rng.randrange(1, size - off + 1)
        self.say(f"mmap read {n} at {off}")
        got = []
        for fd in self.pair.fds:
            with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mm:
                got.append(("ok", mm[off:off + n]))
        self.agree("mmap read", got)

    def op_mmap_write(self):
        size = self.pair.size()
        if size == 0:
            return self.op_write()
        off = self.rng.randrange(0, size)
        n = self.rng.randrange(1, min(size - off, 100_000) + 1)
        data = self.data(n)
        self.say(f"mmap write {n} at {off} + msync")
        for fd in self.pair.fds:
            with mmap.mmap(fd, size) as mm:
                mm[off:off + n] = data
                mm.flush()                            # msync(MS_SYNC)

    def op_fsync(self):
        self.say("fsync")
        self.agree("fsync", self.pair.both(os.fsync))

    def op_reopen(self):
        trunc = self.rng.random() < 0.1
        self.say("close, reopen" + (" with O_TRUNC" if trunc else ""))
        self.pair.close()
        self.pair.open(os.O_RDWR | os.O_CREAT | (os.O_TRUNC if trunc else 0))

    def op_fadvise(self):
        self.say("posix_fadvise DONTNEED")
        self.agree("fadvise", self.pair.both(os.posix_fadvise, 0, 0, os.POSIX_FADV_DONTNEED))

    def op_drop_caches(self):
        self.say("drop_caches")
        drop_caches()

    def op_remount(self):
        self.say("close, remount, reopen")
        self.pair.close()
        self.m.remount()
        self.pair.open()

    def run(self, ops: int) -> None:
        table = [(self.op_read, 20), (self.op_write, 20), (self.op_append, 6), (self.op_truncate, 8),
                 (self.op_mmap_read, 8), (self.op_mmap_write, 8), (self.op_fsync, 4), (self.op_reopen, 5),
                 (self.op_fadvise, 8), (self.op_drop_caches, 1)]
        fns = [f for f, _ in table]
        weights = [w for _, w in table]
        remounts = set(self.rng.sample(range(1, ops), 3 if not LONG else 20))
        for i in range(ops):
            if i in remounts:
                self.op_remount()
            else:
                self.rng.choices(fns, weights)[0]()
            self.compare_all()
        self.pair.close()


@pytest.mark.soak
@pytest.mark.timeout(3600 if LONG else 300)
def test_fsx_random_operations_with_mmap_match_a_reference_file(tmp_path):
    seed = int(os.environ.get("WEBFS_FSX_SEED") or random.randrange(1 << 30))
    print(f"fsx seed {seed}, {OPS} operations (replay: WEBFS_FSX_SEED={seed} WEBFS_FSX_OPS={OPS})")
    m = SmallPieceMount(tmp_path / "webfs", mount_kwargs={"preexec_fn": limit_memory})
    try:
        ref = tmp_path / "reference"
        ref.mkdir()
        fsx = Fsx(m, ref, seed, tmp_path / "fsx-ops.log")
        started = time.monotonic()
        fsx.run(OPS)
        print(f"{OPS} operations in {time.monotonic() - started:.1f} s")
        assert daemon_alive(m.pid())
        m.remount()
        assert (m.mnt / "fsx.bin").read_bytes() == (ref / "fsx.bin").read_bytes()
        bad = log_problems(m.log_path)
        assert not bad, "the daemon's log has errors:\n" + "\n".join(bad[:20])
    finally:
        m.umount()


def short(result) -> str:
    kind, value = result
    if kind == "ok" and isinstance(value, bytes):
        return f"{len(value)} bytes {value[:40]!r}{'...' if len(value) > 40 else ''}"
    return f"{kind} {value!r}"


HUGE_STEPS = [
    # (what, function of (fd) -> result); both files go through the same steps in order.
    ("ftruncate to 4 GiB + 12345 (sparse)", lambda fd: os.ftruncate(fd, (4 << 30) + 12345)),
    ("fstat size", lambda fd: os.fstat(fd).st_size),
    ("pread 100 at 4 GiB - 50 (a hole)", lambda fd: os.pread(fd, 100, (4 << 30) - 50)),
    ("pwrite at 4 GiB + 100", lambda fd: os.pwrite(fd, b"past four GiB", (4 << 30) + 100)),
    ("pread it back", lambda fd: os.pread(fd, 40, (4 << 30) + 90)),
    ("fsync", os.fsync),
    ("lseek SEEK_END", lambda fd: os.lseek(fd, 0, os.SEEK_END)),
    ("lseek to 2**40", lambda fd: os.lseek(fd, 1 << 40, os.SEEK_SET)),
    ("read at 2**40 (past the end)", lambda fd: os.read(fd, 10)),
    ("pread 20 at the last bytes", lambda fd: os.pread(fd, 20, (4 << 30) + 12345 - 10)),
    ("ftruncate down to 1000", lambda fd: os.ftruncate(fd, 1000)),
    ("pread all", lambda fd: os.pread(fd, 5000, 0)),
    ("ftruncate to 2**40 (1 TiB; ext4 allows it)", lambda fd: os.ftruncate(fd, 1 << 40)),
    ("fstat size", lambda fd: os.fstat(fd).st_size),
    ("pread 10 at 2**40 - 5", lambda fd: os.pread(fd, 10, (1 << 40) - 5)),
    ("ftruncate to 999999999999999 (issue 11 item 2)", lambda fd: os.ftruncate(fd, 999999999999999)),
    # With the writeback cache the kernel takes the write into its page cache;
    # the daemon sees it at fsync at the latest, and its refusal must come back.
    ("pwrite at 2**44 (past ext4's largest file), fsync", lambda fd: (os.pwrite(fd, b"x", 1 << 44), os.fsync(fd))),
    ("lseek to 2**62", lambda fd: os.lseek(fd, 1 << 62, os.SEEK_SET)),
    ("ftruncate to -1", lambda fd: os.ftruncate(fd, -1)),
    ("ftruncate down to 10", lambda fd: os.ftruncate(fd, 10)),
    ("fsync", os.fsync),
    ("pread all", lambda fd: os.pread(fd, 100, 0)),
]
STEP_SECONDS = 120.0
# Where no FUSE filesystem can answer as ext4 does, what else is right.
FUSE_ALSO = {
    # The kernel gives every FUSE mount the largest file size Linux has
    # (MAX_LFS_FILESIZE): a seek ext4 refuses is the kernel's to allow.
    "lseek to 2**62": [("ok", 1 << 62)],
}


@pytest.mark.timeout(600)
def test_huge_truncate_and_seek_answer_as_a_local_file_does(tmp_path):
    ref_dir = tmp_path / "reference"
    ref_dir.mkdir()
    ref = os.open(ref_dir / "huge", os.O_RDWR | os.O_CREAT, 0o644)
    expected = [outcome(fn, ref) for _, fn in HUGE_STEPS]
    os.close(ref)
    # The default piece size (4 MiB): a 4 GiB file is 1,025 pieces.
    m = SmallPieceMount(tmp_path / "webfs", max_block=4 << 20, mount_kwargs={"preexec_fn": limit_memory})
    pid = m.pid()
    problems = []
    try:
        fd = os.open(m.mnt / "huge", os.O_RDWR | os.O_CREAT, 0o644)
        for (what, fn), want in zip(HUGE_STEPS, expected):
            box = []
            started = time.monotonic()
            t = threading.Thread(target=lambda: box.append(outcome(fn, fd)), daemon=True)
            t.start()
            t.join(STEP_SECONDS)
            took = time.monotonic() - started
            if t.is_alive():
                problems.append(f"{what}: no answer in {STEP_SECONDS:.0f} s (daemon killed)")
                os.kill(pid, signal.SIGKILL)
                t.join(30)
                break
            got = box[0]
            if got in (("errno", "ENOTCONN"), ("errno", "ECONNABORTED")):
                problems.append(f"{what}: the mount is gone ({got[1]}): the daemon died")
                break
            if got != want and got not in FUSE_ALSO.get(what, []):
                problems.append(f"{what}: webfs gave {short(got)}, the reference {short(want)} ({took:.1f} s)")
            if not daemon_alive(pid):
                problems.append(f"{what}: the daemon died")
                break
        else:
            got = outcome(os.close, fd)
            if got != ("ok", None):
                problems.append(f"close: webfs gave {short(got)}")
        alive = daemon_alive(pid)
        # A refused size is the caller's mistake, not the daemon's: it may be logged.
        bad = log_problems(m.log_path, allow=("File too large",))
    finally:
        m.umount()
    assert alive and not problems, "\n".join(problems + (["log: " + b for b in bad[:5]]))
    assert not bad, "the daemon's log has errors:\n" + "\n".join(bad[:20])
