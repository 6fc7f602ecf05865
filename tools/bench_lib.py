"""Shared plumbing for tools/bench: running and timing shell commands,
dropping caches, reading daemon statistics from /proc, mount bookkeeping,
machine description.  Standard library only."""

import itertools
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
IS_ROOT = os.geteuid() == 0


def log(msg, *args):
    if args:
        msg = msg % args
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


def failure_lines(section) -> list:
    """A report section's lines when its run failed ("Failed: why"), else none
    (the section was not run)."""
    return ["Failed: %s" % section["error"][:300], ""] if (section or {}).get("error") else []


# ------------------------------------------------------------ commands

def sh(cmd, cwd=None, check=True, timeout=None, capture=True, env=None):
    """Run a shell command line with bash (pipefail); return CompletedProcess."""
    # its own process group, so that an interrupt or a timeout ends the whole
    # pipeline (cp, rsync's helpers, find's cats), not just bash
    proc = subprocess.Popen(["bash", "-c", "set -o pipefail; " + cmd], cwd=cwd,
                            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        raise
    p = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check and p.returncode != 0:
        raise BenchError("command failed (%d): %s\n%s" % (p.returncode, cmd, p.stderr[-2000:]))
    return p


def run(argv, check=True, timeout=None, env=None):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise BenchError("command failed (%d): %s\n%s%s" % (
            p.returncode, " ".join(shlex.quote(a) for a in argv), p.stdout[-1000:],
            p.stderr[-2000:]))
    return p


def timed(cmd, cwd=None, timeout=None):
    """Run a shell command line; return (seconds, stdout, returncode, stderr,
    client cpu seconds)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = sh(cmd, cwd=cwd, check=False, timeout=timeout)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return dt, p.stdout, p.returncode, p.stderr, cpu


def drop_caches():
    """Write back dirty data and drop the page, dentry and inode caches.
    Returns False when not allowed (not root)."""
    os.sync()
    if not IS_ROOT:
        return False
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


# ext4 without a journal (this machine's root) does not give out again an inode
# freed less than a minute ago (five more while its inode table block is dirty,
# which any file made in it makes it again: fs/ext4/ialloc.c, recently_deleted):
# it skips every such inode on each allocation, up to ~1 ms a file after the
# bench removed tens of thousands. So what the bench removes during a run is
# only renamed out of the way (a trash directory beside it, same filesystem),
# and removed for good at the run's end (empty_trash), after every timed step.
# A real removal before a timed step (rmtree now=True) is waited out by a
# section that times a command creating files against one that creates none
# (import-warc against cdxj-indexer): settle_deletions.
_last_deletion = [0.0]
RECENTLY_DELETED = 65.0
TRASH = ".bench-removed"
_trash = []                     # trash directories made by this run
_put_aside = itertools.count()  # a name of its own for each tree put aside


def rmtree(path, now=False):
    """Remove a tree: at the end of the run (renamed into a trash directory
    beside it now), or ``now``."""
    if not os.path.lexists(path):
        return
    if not now:
        trash = os.path.join(os.path.dirname(os.path.abspath(path)), TRASH)
        try:
            os.makedirs(trash, exist_ok=True)
            os.rename(path, os.path.join(trash, "%d-%s" % (next(_put_aside), os.path.basename(path))))
            if trash not in _trash:
                _trash.append(trash)
            return
        except OSError:
            pass                # (a mount point, another filesystem) removed now
    # faster than shutil.rmtree for big trees, and it does not follow mounts
    run(["rm", "-rf", "--one-file-system", "--", path])
    _last_deletion[0] = time.monotonic()


def empty_trash():
    """Remove for good what this run's rmtree put aside."""
    while _trash:
        rmtree(_trash.pop(), now=True)


def settle_deletions():
    """Write back, and wait until the bench's last removal is RECENTLY_DELETED
    seconds old; returns the seconds waited."""
    os.sync()
    wait = max(0.0, _last_deletion[0] + RECENTLY_DELETED - time.monotonic()) if _last_deletion[0] else 0.0
    time.sleep(wait)
    return wait


# ---------------------------------------------------------------- mounts

def mountinfo():
    """[(mountpoint, fstype, source)] from /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            mp = left.split()[4]
            fstype, source = right.split()[:2]
            out.append((unescape_mount(mp), fstype, unescape_mount(source)))
    return out


def unescape_mount(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def is_mounted(path):
    path = os.path.realpath(path)
    return any(mp == path for mp, _, _ in mountinfo())


def mounts_under(root):
    root = os.path.realpath(root).rstrip("/") + "/"
    return [mp for mp, _, _ in mountinfo() if mp.startswith(root)]


def wait_mounted(path, timeout=60.0, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if is_mounted(path):
            return True
        if proc is not None and proc.poll() is not None and proc.returncode != 0:
            return False
        time.sleep(0.05)
    return False


def wait_unmounted(path, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not is_mounted(path):
            return True
        time.sleep(0.05)
    return False


def fusermount_u(path, lazy=False):
    argv = ["fusermount3", "-u"] + (["-z"] if lazy else []) + [path]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0 and is_mounted(path):
        # not a FUSE mount, or fusermount3 missing: fall back to umount(8)
        subprocess.run(["umount"] + (["-l"] if lazy else []) + [path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return not is_mounted(path)


# --------------------------------------------------------------- daemons

def fuse_daemon_pids():
    """pids of processes holding /dev/fuse open."""
    pids = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        fd_dir = "/proc/%s/fd" % d
        try:
            for fd in os.listdir(fd_dir):
                try:
                    if os.readlink(os.path.join(fd_dir, fd)) == "/dev/fuse":
                        pids.add(int(d))
                        break
                except OSError:
                    pass
        except OSError:
            pass
    return pids


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def find_daemon(mountpoint, before=()):
    """The pid of the process serving the FUSE mount at mountpoint: one that
    holds /dev/fuse and names the mount point on its command line, else the
    one new /dev/fuse holder since `before`."""
    mp = os.path.realpath(mountpoint)
    holders = fuse_daemon_pids()
    named = [p for p in holders if any(os.path.realpath(a) == mp for a in cmdline(p)
                                       if a.startswith("/"))]
    if len(named) == 1:
        return named[0]
    new = sorted(holders - set(before))
    if len(new) == 1:
        return new[0]
    if named:
        return min(named)
    return None


def descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
            kids.setdefault(ppid, []).append(int(d))
        except (OSError, ValueError):
            pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, ()):
            out.append(c)
            todo.append(c)
    return out


def proc_cpu(pid, alone=False):
    """utime+stime (+ waited-for children) of pid and its live descendants, in
    seconds (alone: utime+stime of pid itself); None when the process is gone."""
    total = 0.0
    found = False
    for p in [pid] + ([] if alone else descendants(pid)):
        try:
            with open("/proc/%d/stat" % p) as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        # fields[0] is state (field 3); utime is field 14 -> index 11
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
        total += (utime + stime + (0 if alone else cutime + cstime)) / CLK_TCK
        found = True
    return total if found else None


def proc_status(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024        # kB -> bytes
    except (OSError, ValueError, IndexError):
        pass
    return None


def proc_mem(pid, alone=False):
    """(peak RSS, current RSS) in bytes, summed over pid and descendants (alone: pid's)."""
    hwm = rss = 0
    found = False
    for p in [pid] + ([] if alone else descendants(pid)):
        h, r = proc_status(p, "VmHWM"), proc_status(p, "VmRSS")
        if h is not None:
            hwm += h
            rss += r or 0
            found = True
    return (hwm, rss) if found else (None, None)


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
        return st[st.rindex(")") + 2] != "Z"
    except OSError:
        return False


def wait_pid_gone(pid, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def kill_pid(pid, timeout=5.0):
    """SIGTERM, then SIGKILL, one pid we started."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not pid_alive(pid):
            return
        try:
            os.kill(pid, sig)
        except OSError:
            return
        wait_pid_gone(pid, timeout)


# ---------------------------------------------------------------- space

def du_bytes(paths):
    """(allocated bytes, apparent bytes) of the given trees, via du(1)."""
    paths = [p for p in paths if os.path.exists(p)]
    if not paths:
        return 0, 0
    alloc = run(["du", "-s", "-c", "--block-size=1"] + paths).stdout.splitlines()[-1]
    appar = run(["du", "-s", "-c", "--apparent-size", "--block-size=1"] + paths).stdout.splitlines()[-1]
    return int(alloc.split()[0]), int(appar.split()[0])


def disk_breakdown(roots):
    """What webfs disk directories hold, by kind: {kind: {files, apparent,
    alloc}} for kind in blocks (blocks/), parity (parity/), meta (meta/:
    catalog, journal, MANIFEST), other (WEBFS-DISK, webfs.conf, ...).
    apparent = st_size, alloc = st_blocks * 512 (what du counts)."""
    out = {k: {"files": 0, "apparent": 0, "alloc": 0} for k in ("blocks", "parity", "meta", "other")}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            top = rel.split(os.sep, 1)[0]
            kind = top if top in ("blocks", "parity", "meta") else "other"
            for f in filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, f))
                except OSError:
                    continue
                c = out[kind]
                c["files"] += 1
                c["apparent"] += st.st_size
                c["alloc"] += st.st_blocks * 512
    return out


# -------------------------------------------------------------- machine

def machine_info(workdir):
    info = {"hostname": platform.node(), "nproc": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "root": IS_ROOT}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["mem_bytes"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    p = run(["findmnt", "-n", "-T", workdir, "-o", "SOURCE,FSTYPE,OPTIONS"], check=False)
    if p.returncode == 0 and p.stdout.strip():
        src, fstype, opts = (p.stdout.split() + ["", "", ""])[:3]
        info["workdir_fs"] = {"source": src, "fstype": fstype, "options": opts}
    versions = {}
    for name, argv in (("bindfs", ["bindfs", "--version"]), ("mergerfs", ["mergerfs", "--version"]),
                       ("fuse", ["fusermount3", "--version"]), ("rsync", ["rsync", "--version"]),
                       ("coreutils", ["cp", "--version"]), ("tar", ["tar", "--version"])):
        if shutil.which(argv[0]):
            p = run(argv, check=False)
            first = (p.stdout or p.stderr).strip().splitlines()
            versions[name] = first[0] if first else ""
    info["versions"] = versions
    info["loadavg_start"] = loadavg()
    return info


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except (OSError, ValueError):
        return None


def git_describe(repo):
    p = run(["git", "-C", repo, "describe", "--always", "--dirty"], check=False)
    return p.stdout.strip() if p.returncode == 0 else None


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=str)
        f.write("\n")
    os.replace(tmp, path)
