"""webfs import killed with kill -9 mid-way (the import itself, or the daemon
of the mount it writes into): every file it reported done reads back, and a
rerun finishes the job."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import termios
import threading
import time

import pytest

from conftest import BIN, Mounted, sh, unmount, webfs
from t4_import import import_


def run_with_bar(args: list[str], **popen):
    """Run a command with stderr on a terminal (so the progress bar is drawn);
    returns the process and a function giving the last count the bar showed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))   # tqdm needs a width
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", COLUMNS="120")
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=slave, env=env, **popen)
    os.close(slave)
    seen = bytearray()

    def reader():
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            seen.extend(chunk)
    t = threading.Thread(target=reader, daemon=True)
    t.start()

    def shown() -> int:     # "| 1500/6000 [" (files), or "1536rec [" (import-warc's records)
        counts = re.findall(rb"(?:\| *(\d+)/\d+|(\d+)rec) \[", bytes(seen))
        return int(counts[-1][0] or counts[-1][1]) if counts else 0
    return proc, shown


@pytest.mark.parametrize("victim", ["daemon", "import"])
def test_kill_9_loses_no_file_the_import_reported(tmp_path, victim):
    """Kill the daemon (DEST in a mount) or the import (DISK:/PATH) mid-way:
    every file the progress bar had counted reads back identical."""
    src = tmp_path / "many"
    src.mkdir()
    for i in range(6000):
        (src / f"f{i:05d}").write_bytes(f"page {i}\n".encode() * (1 + i % 50))
    m = Mounted(tmp_path, disks=3, mount=victim == "daemon")
    dest = str(m.mnt / "c") if victim == "daemon" else f"{m.disks[0]}:/c"
    try:
        proc, shown = run_with_bar([str(BIN / "webfs"), "import", f"{src}/", dest])
        deadline = time.time() + 120
        while shown() < 1500 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        reported = shown()
        os.kill(m.pid() if victim == "daemon" else proc.pid, signal.SIGKILL)
        proc.wait()
        assert 1500 <= reported < 6000, reported
        if victim == "daemon":
            unmount(m.mnt)
        m.mount()
        # Walk order: the names of a directory in byte order; the bar counts entries done.
        for name in sorted(os.listdir(src))[:reported]:
            assert (m.mnt / "c" / name).read_bytes() == (src / name).read_bytes(), name
        # ... and the rerun finishes the job.
        out = import_(f"{src}/", m.mnt / "c", check=True).stdout.decode()
        assert "already there" in out
        sh(f"diff -r '{src}' '{m.mnt}/c'")
    finally:
        m.umount()
    proc = webfs("fsck", m.disks[0], check=False)
    assert proc.returncode == 0, proc.stdout.decode()


def test_ctrl_c_stops_at_a_safe_point_and_leaks_no_reference(tmp_path):
    """Ctrl-C (SIGINT to the process group) mid-import of DISK:/PATH: the import
    stops at a safe point (exit 4), every block's reference count matches the
    names that were made (fsck is clean), and the rerun finishes the job."""
    src = tmp_path / "many"
    src.mkdir()
    for i in range(6000):
        (src / f"f{i:05d}").write_bytes(f"page {i}\n".encode() * (1 + i % 50))
    m = Mounted(tmp_path, disks=3, mount=False)
    disks = m.disks
    proc, shown = run_with_bar([str(BIN / "webfs"), "import", f"{src}/", f"{disks[0]}:/c"],
                               start_new_session=True)
    deadline = time.time() + 120
    while shown() < 1000 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) == 4
    fsck = webfs("fsck", disks[0], check=False)
    assert fsck.returncode == 0, fsck.stdout.decode()
    webfs("import", f"{src}/", f"{disks[0]}:/c")
    fsck = webfs("fsck", disks[0], check=False)
    assert fsck.returncode == 0, fsck.stdout.decode()
    m.mount()
    try:
        sh(f"diff -r '{src}' '{m.mnt}/c'")
    finally:
        m.umount()
