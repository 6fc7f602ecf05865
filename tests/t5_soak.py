"""Concurrency soak against a real mount, checked against a model.

Writers (create, overwrite with O_TRUNC, rewrite in place, patch a range,
shared contents that dedup), an appender (O_APPEND), a renamer (within and
across directories, over existing targets) and a deleter run at once, with
readers reading whole files and page-cache drops (`drop_caches`, and
posix_fadvise DONTNEED per file) sending reads back to the daemon.

The model never needs a global order. Each mutating thread owns a disjoint set
of names, and every name has a generation counter used like a seqlock: the
owner makes it odd (with the content the name is about to have) before it
touches the name and even (with the content it has) after. A reader takes the
generation before opening and after closing:

- unchanged and even: the name was at rest, so the read must be exactly the
  model's content (or ENOENT if the model has no file);
- otherwise: every byte read must be the byte at that offset of one of the
  contents the name had in that window, and the length no longer than the
  longest of them (a read racing a write may see a mix, never a foreign byte).

Contents are text lines that name their own version and offset
(``w1.000042 @00004096 ...``), so a wrong page says where it came from.
At the end: every name matches the model exactly, before and after a
remount; the daemon is alive; its log has no error; fsck is clean.
"""
from __future__ import annotations

import errno
import os
import random
import signal
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import pytest

from conftest import webfs
from fault_helpers import LONG, SmallPieceMount, daemon_alive, drop_caches, log_problems

DURATION = 300.0 if LONG else 20.0
DIRS = ("d0", "d1", "d2")
LINE = 32
KEEP_GENERATIONS = 64            # history per name; a reader whose window is older skips the check


def content(tag: str, size: int) -> bytes:
    """``size`` bytes of 32-byte lines, each naming its version and its offset."""
    lines = [f"{tag} @{off:08d}".ljust(LINE - 1, ".").encode() + b"\n" for off in range(0, size, LINE)]
    return b"".join(lines)[:size]


def pick_size(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.05:
        return 0
    if r < 0.45:
        return rng.randrange(1, 4096)
    if r < 0.85:
        return rng.randrange(4096, 100_000)
    return rng.randrange(100_000, 300_000)          # several 64 KiB pieces


class Model:
    """Per name: a generation counter and the contents of recent generations
    (None: no file). Odd generations carry the content an operation in
    progress is making."""

    def __init__(self, names):
        self.gen = {n: 0 for n in names}
        self.hist = {n: {0: None} for n in names}
        self.via = {n: {} for n in names}       # odd generation -> a state passed through on the way

    def current(self, name):
        return self.hist[name][self.gen[name]]

    def _step(self, name, value):
        g = self.gen[name] + 1
        h = self.hist[name]
        h[g] = value
        self.gen[name] = g
        h.pop(g - KEEP_GENERATIONS, None)

    def begin(self, changes: dict, via=None) -> None:
        for name, value in changes.items():
            assert self.gen[name] % 2 == 0
            if via is not None:
                self.via[name][self.gen[name] + 1] = via
                self.via[name].pop(self.gen[name] + 1 - KEEP_GENERATIONS, None)
            self._step(name, value)

    def end(self, changes: dict) -> None:
        for name, value in changes.items():
            self._step(name, value)


class Soak:
    def __init__(self, mnt: Path, seed: int, daemon_pid: int):
        self.mnt = mnt
        self.daemon_pid = daemon_pid
        self.seed = seed
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.owned: dict[str, list[str]] = {}
        for role, per_dir in (("w0", 2), ("w1", 2), ("w2", 2), ("ren", 3), ("app", 1), ("del", 2)):
            self.owned[role] = [f"{d}/{role}-{i}" for d in DIRS for i in range(per_dir)]
        self.names = [n for names in self.owned.values() for n in names]
        self.model = Model(self.names)
        self.shared = [content(f"shared{k}", s) for k, s in enumerate((5000, 70000, 200000))]
        self.serial = 0

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def new_tag(self, owner: str) -> str:
        with self.lock:
            self.serial += 1
            return f"{owner}.{self.serial:06d}"

    def fail(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)
        self.stop.set()

    def path(self, name: str) -> Path:
        return self.mnt / name

    def run_thread(self, fn, *args):
        try:
            fn(*args)
        except Exception:
            self.fail(f"{fn.__name__}{args}: {traceback.format_exc()}")

    # -- mutating threads, each on its own names ----------------------------------------

    def change(self, changes: dict, action, via=None) -> None:
        self.model.begin(changes, via)
        action()
        self.model.end(changes)

    def writer(self, owner: str) -> None:
        rng = random.Random(f"{self.seed}-{owner}")
        names = self.owned[owner]
        while not self.stop.is_set():
            name = rng.choice(names)
            old = self.model.current(name)
            p = self.path(name)
            op = rng.random()
            if old is None or op < 0.35:                        # create / overwrite with O_TRUNC
                new = rng.choice(self.shared) if rng.random() < 0.15 else content(self.new_tag(owner), pick_size(rng))
                chunks = rng.choice((1, 1, 3))

                def act():
                    with open(p, "wb") as f:
                        step = max(1, len(new) // chunks)
                        for i in range(0, len(new), step):
                            f.write(new[i:i + step])
                        if rng.random() < 0.1:
                            f.flush()
                            os.fsync(f.fileno())
                self.change({name: new}, act, via=b"")          # O_TRUNC passes through empty
                self.count("write O_TRUNC")
            elif op < 0.6:                                      # rewrite in place, then truncate
                new = content(self.new_tag(owner), pick_size(rng))

                def act():
                    with open(p, "r+b") as f:
                        f.write(new)
                        f.truncate(len(new))
                self.change({name: new}, act)
                self.count("rewrite in place")
            elif op < 0.8 and old:                              # patch a range (maybe past the end)
                off = rng.randrange(0, len(old) + 2000)
                patch = content(self.new_tag(owner), rng.randrange(1, 20000))
                new = bytearray(old)
                if off > len(new):
                    new.extend(bytes(off - len(new)))
                new[off:off + len(patch)] = patch
                new = bytes(new)

                def act():
                    fd = os.open(p, os.O_WRONLY)
                    try:
                        os.pwrite(fd, patch, off)
                    finally:
                        os.close(fd)
                self.change({name: new}, act)
                self.count("pwrite patch")
            else:                                               # truncate by path, down or up
                size = rng.randrange(0, len(old) + 5000)
                new = old[:size] + bytes(max(0, size - len(old)))
                self.change({name: new}, lambda: os.truncate(p, size))
                self.count("truncate")
            time.sleep(rng.random() * 0.005)

    def appender(self, owner: str = "app") -> None:
        rng = random.Random(f"{self.seed}-{owner}")
        names = self.owned[owner]
        while not self.stop.is_set():
            name = rng.choice(names)
            old = self.model.current(name) or b""
            p = self.path(name)
            if len(old) > 250_000:
                self.change({name: b""}, lambda: open(p, "wb").close(), via=b"")
                self.count("append reset")
                continue
            record = content(self.new_tag(owner), rng.randrange(1, 12000))
            new = old + record

            def act():
                fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    half = rng.randrange(0, len(record) + 1)
                    os.write(fd, record[:half])
                    os.write(fd, record[half:])
                finally:
                    os.close(fd)
            self.change({name: new}, act)
            self.count("append")
            time.sleep(rng.random() * 0.005)

    def renamer(self, owner: str = "ren") -> None:
        rng = random.Random(f"{self.seed}-{owner}")
        names = self.owned[owner]
        while not self.stop.is_set():
            present = [n for n in names if self.model.current(n) is not None]
            if len(present) < 4:
                name = rng.choice([n for n in names if self.model.current(n) is None])
                new = content(self.new_tag(owner), pick_size(rng))
                self.change({name: new}, lambda: self.path(name).write_bytes(new))
                self.count("rename: create")
                continue
            src = rng.choice(present)
            same_dir = [n for n in names if n != src and n.split("/")[0] == src.split("/")[0]]
            dst = rng.choice(same_dir if rng.random() < 0.4 else [n for n in names if n != src])
            over = self.model.current(dst) is not None
            moved = self.model.current(src)
            self.change({src: None, dst: moved}, lambda: os.rename(self.path(src), self.path(dst)))
            self.count("rename over a file" if over else "rename")
            time.sleep(rng.random() * 0.005)

    def deleter(self, owner: str = "del") -> None:
        rng = random.Random(f"{self.seed}-{owner}")
        names = self.owned[owner]
        while not self.stop.is_set():
            name = rng.choice(names)
            p = self.path(name)
            if self.model.current(name) is None:
                new = rng.choice(self.shared) if rng.random() < 0.3 else content(self.new_tag(owner), pick_size(rng))
                self.change({name: new}, lambda: p.write_bytes(new))
                self.count("delete: create")
            else:
                if rng.random() < 0.5:
                    p.read_bytes()                  # its pieces are in the daemon's cache when it goes
                self.change({name: None}, lambda: os.unlink(p))
                self.count("delete")
            time.sleep(rng.random() * 0.005)

    # -- readers and cache droppers ----------------------------------------------------

    def read_once(self, name: str, rng: random.Random):
        p = self.path(name)
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            if rng.random() < 0.3:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            out = []
            if rng.random() < 0.5:
                while True:
                    chunk = os.read(fd, rng.choice((4096, 65536, 1 << 20)))
                    if not chunk:
                        break
                    out.append(chunk)
            else:                                            # random-sized preads, in order
                off = 0
                while True:
                    chunk = os.pread(fd, rng.randrange(1, 100_000), off)
                    if not chunk:
                        break
                    out.append(chunk)
                    off += len(chunk)
            if rng.random() < 0.3:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            return b"".join(out)
        finally:
            os.close(fd)

    def reader(self, index: int) -> None:
        rng = random.Random(f"{self.seed}-reader{index}")
        while not self.stop.is_set():
            name = rng.choice(self.names)
            g1 = self.model.gen[name]
            data = self.read_once(name, rng)
            g2 = self.model.gen[name]
            hist = dict(self.model.hist[name])
            via = dict(self.model.via[name])
            self.check(name, g1, g2, hist, data, via)

    def check(self, name, g1, g2, hist, data, via=None) -> None:
        if g1 == g2 and g1 % 2 == 0:
            if g1 not in hist:
                return self.count("read: history gone")
            expect = hist[g1]
            self.count("read at rest")
            if data != expect:
                self.fail(f"{name} at rest (generation {g1}): {describe(data, expect)}")
            return
        window = range(g1 - (g1 % 2), g2 + 1)
        if any(g not in hist for g in window):
            return self.count("read: history gone")
        self.count("read racing a change")
        cands = [hist[g] for g in window] + [via[g] for g in window if g in (via or {})]
        if data is None:
            if None not in cands:
                self.fail(f"{name}: ENOENT, but the name existed throughout generations {g1}..{g2}")
            return
        files = [c for c in cands if c is not None]
        if not files:
            self.fail(f"{name}: read {len(data)} bytes, but no file was there in generations {g1}..{g2}")
            return
        if len(data) > max(len(c) for c in files):
            self.fail(f"{name}: read {len(data)} bytes, longer than any content of generations {g1}..{g2}")
            return
        got = np.frombuffer(data, dtype=np.uint8)
        ok = np.zeros(len(got), dtype=bool)
        # A read racing a truncation can see zeros where the cut bytes were:
        # with the writeback cache the kernel zero-fills a short read up to
        # the size it still believes (fuse_short_read), and the daemon can
        # only answer with the truncated file.
        shortest = min(len(c) for c in files)
        ok[shortest:] |= got[shortest:] == 0
        for c in files:
            arr = np.frombuffer(c[:len(data)], dtype=np.uint8)
            ok[:len(arr)] |= got[:len(arr)] == arr
        if not ok.all():
            bad = int(np.argmin(ok))
            self.fail(f"{name}: byte {bad} of a read racing generations {g1}..{g2} is in none of their "
                      f"contents: got {data[bad - bad % LINE:bad - bad % LINE + LINE]!r}; "
                      + "; ".join(describe(data, c) for c in files))

    def dropper(self) -> None:
        rng = random.Random(f"{self.seed}-dropper")
        while not self.stop.wait(0.5 + rng.random()):
            drop_caches()
            self.count("drop_caches")

    def run(self, duration: float) -> None:
        threads = [threading.Thread(target=self.run_thread, args=(self.writer, w)) for w in ("w0", "w1", "w2")]
        threads += [threading.Thread(target=self.run_thread, args=(fn,))
                    for fn in (self.appender, self.renamer, self.deleter, self.dropper)]
        threads += [threading.Thread(target=self.run_thread, args=(self.reader, i)) for i in range(3)]
        for t in threads:
            t.start()
        self.stop.wait(duration)
        self.stop.set()
        deadline = time.monotonic() + 60
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        hung = [t.name for t in threads if t.is_alive()]
        if hung:
            # A deadlocked daemon: kill it so the threads' requests fail and the test ends.
            self.errors.insert(0, f"threads {hung} still in a request 60 s after the stop: the daemon "
                                  "hangs (killed with SIGKILL to end the test)")
            os.kill(self.daemon_pid, signal.SIGKILL)
            for t in threads:
                t.join(30)

    def verify_tree(self) -> list[str]:
        """Every name exactly as the model says, and nothing else in the directories."""
        problems = []
        want = {n: self.model.current(n) for n in self.names}
        found = {f"{d}/{f}" for d in DIRS for f in os.listdir(self.mnt / d)}
        for extra in sorted(found - {n for n, c in want.items() if c is not None}):
            problems.append(f"{extra}: exists, the model has no such file")
        for name, expect in sorted(want.items()):
            if expect is None:
                continue
            try:
                data = self.path(name).read_bytes()
            except OSError as exc:
                problems.append(f"{name}: {exc}")
                continue
            if data != expect:
                problems.append(f"{name}: {describe(data, expect)}")
        return problems


def describe(got, expect) -> str:
    if got is None or expect is None:
        return f"got {'ENOENT' if got is None else f'{len(got)} bytes'}, expected " \
               f"{'ENOENT' if expect is None else f'{len(expect)} bytes'}"
    n = min(len(got), len(expect))
    diff = next((i for i in range(0, n, 4096) if got[i:min(i + 4096, n)] != expect[i:min(i + 4096, n)]), None)
    if diff is not None:
        diff = next(i for i in range(diff, min(diff + 4096, n)) if got[i] != expect[i])
        line = diff - diff % LINE
        return (f"{len(got)} bytes, expected {len(expect)}; first difference at byte {diff} "
                f"(page {diff // 4096}): got {got[line:line + LINE]!r}, expected {expect[line:line + LINE]!r}")
    return f"{len(got)} bytes, expected {len(expect)}; the common prefix agrees"


@pytest.fixture
def soak_mount(tmp_path):
    m = SmallPieceMount(tmp_path)
    yield m
    m.umount()


@pytest.mark.soak
@pytest.mark.timeout(DURATION + 240)
def test_concurrent_writers_readers_renamers_appenders_deleters_match_the_model(soak_mount):
    m = soak_mount
    seed = int(os.environ.get("WEBFS_SOAK_SEED") or random.randrange(1 << 30))
    print(f"soak seed {seed} (replay the same schedule of choices with WEBFS_SOAK_SEED={seed}), "
          f"{DURATION:.0f} s")
    for d in DIRS:
        (m.mnt / d).mkdir()
    pid = m.pid()
    soak = Soak(m.mnt, seed, pid)
    started = time.monotonic()
    soak.run(DURATION)
    print(f"ran {time.monotonic() - started:.1f} s: {dict(sorted(soak.counts.items()))}")
    assert not soak.errors, f"seed {seed}:\n" + "\n".join(soak.errors[:10])
    assert soak.counts.get("read at rest", 0) >= 200           # the exact check ran, often
    assert soak.counts.get("drop_caches", 0) >= 5
    problems = soak.verify_tree()
    assert not problems, f"seed {seed}, after the soak:\n" + "\n".join(problems[:20])
    assert daemon_alive(pid), "the daemon died during the soak"
    m.remount()
    problems = soak.verify_tree()
    assert not problems, f"seed {seed}, after a remount:\n" + "\n".join(problems[:20])
    bad = log_problems(m.log_path)
    assert not bad, "the daemon's log has errors:\n" + "\n".join(bad[:20])
    m.umount()
    proc = webfs("fsck", m.disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
