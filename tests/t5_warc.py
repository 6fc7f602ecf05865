"""webfs import-warc killed with kill -9 mid-way, then run again."""
from __future__ import annotations

import os
import sqlite3

from conftest import BIN, eventually, make_archive, webfs
from t2_warc import imp, tree, write_warc
from t5_import import run_with_bar


def names_committed(disk) -> int:
    """The inodes in the archive's catalog now (read beside the running import)."""
    try:
        db = sqlite3.connect(f"file:{disk}/meta/catalog.db?mode=ro", uri=True, timeout=10)
        try:
            return db.execute("SELECT COUNT(*) FROM inodes").fetchone()[0]
        finally:
            db.close()
    except sqlite3.OperationalError:        # locked for a moment
        return 0


def test_kill_9_then_rerun_finishes_the_import(tmp_path):
    """kill -9 of an import-warc mid-way; the rerun resumes (captures already
    there are not made twice), the result exports byte-identical and fsck is clean."""
    import signal
    disks = make_archive(tmp_path, 3)
    pages = [(f"http://site.org/{i % 40}/p{i}.html", b"page %d " % i * (1 + i % 30)) for i in range(4000)]
    src = write_warc(tmp_path / "big.warc.gz", pages)
    proc, shown = run_with_bar([str(BIN / "webfs"), "import-warc", "--collection", "c", str(src), f"{disks[0]}:/"])
    eventually(lambda: shown() >= 1024 or proc.poll() is not None, "1024 records imported")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 1024 <= shown() < 4000, shown()          # killed mid-way
    _, fig = imp(disks[0], src, check=True)
    assert fig["captures"] + fig["already"] == 4000 and fig["already"] >= 500, fig   # (2 records a capture)
    assert fig["files"] - fig["captures"] in (0, 3)       # and the kept files of the source: .index, .heads, .cdxj
    out = tmp_path / "out.warc.gz"
    res = webfs("export-warc", f"{disks[0]}:/c", out)
    assert b"8001 records" in res.stdout and b"(100%) byte-identical" in res.stdout
    t = tree(disks[0], "/c")
    try:
        n = sum(len([x for x in t.listdir(b"http/site.org/" + str(d).encode())]) for d in range(40))
        assert n == 4000
    finally:
        t.close()
    assert webfs("fsck", disks[0], check=False).returncode == 0


def test_ctrl_c_stops_at_a_safe_point_quietly_then_rerun_finishes(tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group: the command and its
    reading process) stops the import at a safe point with its summary, no
    traceback, no process left behind; the rerun imports the rest."""
    import signal
    import subprocess
    import time
    disks = make_archive(tmp_path, 3)
    pages = [(f"http://site.org/{i % 40}/p{i}.html", b"page %d " % i * (1 + i % 30)) for i in range(8000)]
    src = write_warc(tmp_path / "big.warc.gz", pages)
    proc = subprocess.Popen([str(BIN / "webfs"), "import-warc", "--collection", "c", str(src), f"{disks[0]}:/"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)

    def readers() -> list[int]:
        found = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"_read_and_send" in f.read() and os.getpgid(int(pid)) == proc.pid:
                        found.append(int(pid))
            except (OSError, ValueError):
                pass
        return found
    deadline = time.monotonic() + 60
    while not readers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert readers(), "the reading process never started"
    eventually(lambda: names_committed(disks[0]) >= 500 or proc.poll() is not None, "500 names committed")
    os.killpg(proc.pid, signal.SIGINT)
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 4, out
    assert "stopped before the end" in out and "Traceback" not in out, out
    assert not readers()
    _, fig = imp(disks[0], src, check=True)
    assert fig["captures"] + fig["already"] == 8000, fig
    fsck = webfs("fsck", disks[0], check=False)
    assert fsck.returncode == 0, fsck.stdout.decode()


def _reading_process(pid: int):
    """The pid of import-warc's reading process among the children of ``pid``, or None."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            kids = open(f"/proc/{pid}/task/{task}/children").read().split()
        except OSError:
            continue
        for kid in kids:
            try:
                if b"_read_and_send" in open(f"/proc/{kid}/cmdline", "rb").read():
                    return int(kid)
            except OSError:
                continue
    return None


def _reading(pid: int, path) -> bool:
    """Whether a process has the file open (the reading process has, past its start)."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def _gone(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def test_kill_9_of_the_import_ends_its_reading_process(tmp_path):
    """The reading process stopped (SIGSTOP: busy, not writing to its pipe, as in
    a gzip bomb), then the import killed with kill -9: the reading process is
    killed with it (it was left behind, stopped, for ever)."""
    import signal
    import subprocess
    import time
    disks = make_archive(tmp_path, 3)
    src = write_warc(tmp_path / "a.warc.gz", [(f"http://site.org/p{i}.html", b"page %d" % i) for i in range(3000)])
    proc = subprocess.Popen([str(BIN / "webfs"), "import-warc", "--collection", "c", str(src), f"{disks[0]}:/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reader = None
    try:
        deadline = time.monotonic() + 60
        while reader is None and proc.poll() is None and time.monotonic() < deadline:
            reader = _reading_process(proc.pid)
        assert reader is not None, "no reading process seen"
        while not _reading(reader, src) and proc.poll() is None and time.monotonic() < deadline:
            pass
        assert _reading(reader, src), "the reading process never opened its file"
        os.kill(reader, signal.SIGSTOP)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while not _gone(reader) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(reader), "the reading process outlived the import"
    finally:
        if reader is not None and not _gone(reader):
            os.kill(reader, signal.SIGKILL)
        proc.kill()
