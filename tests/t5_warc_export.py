"""webfs export-warc in a mount with one side killed mid-export: the daemon
(WEBFS_TEST_KILL_AT=export-after-member) or the command. Neither leaves an
OUT that looks complete: the command removes the daemon's .part file, the
daemon removes its own when the command is gone."""
from __future__ import annotations

import os
import signal
import subprocess
import time

from webfs import testkill

from conftest import BIN, Mounted, unmount, webfs
from t2_warc import records_of, write_warc

PAGES = [(f"http://site.org/{i % 5}/p{i}.html", b"<html>page %d</html>" % i * (1 + i % 30)) for i in range(300)]


def test_daemon_killed_mid_export_leaves_no_out(tmp_path, monkeypatch):
    src = write_warc(tmp_path / "a.warc.gz", PAGES)
    m = Mounted(tmp_path, disks=3, mount=False)
    monkeypatch.setenv(testkill.ENV, "export-after-member:50")
    m.mount()
    monkeypatch.delenv(testkill.ENV)
    try:
        webfs("import-warc", "--collection", "c", src, m.mnt)
        out = tmp_path / "out.warc.gz"
        proc = webfs("export-warc", m.mnt / "c", out, check=False)
        lines = proc.stderr.decode().strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert "hung up without an answer" in lines[0] and "removed the incomplete" in lines[0]
        assert str(out) + ".part" in lines[0]
        assert not out.exists() and not list(tmp_path.glob("*.part"))
    finally:
        unmount(m.mnt)
    m.mount()
    try:
        webfs("export-warc", m.mnt / "c", out)
        assert records_of(out) == records_of(src)
    finally:
        m.umount()


def test_command_killed_mid_export_the_daemon_removes_its_part_file(tmp_path):
    """The disks answer one I/O at a time in 20 ms, so the export lasts a few
    seconds: the command is killed once the .part file is there; the daemon
    notices at its next progress report and removes it."""
    src = write_warc(tmp_path / "a.warc.gz", PAGES)
    m = Mounted(tmp_path, disks=3, options="disk_delay=0:0.02,1:0.02,2:0.02")
    try:
        webfs("import-warc", "--collection", "c", src, m.mnt)
        m.remount()
        out = tmp_path / "out.warc.gz"
        part = tmp_path / "out.warc.gz.part"
        proc = subprocess.Popen([str(BIN / "webfs"), "export-warc", str(m.mnt / "c"), str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not part.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, "the export ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 30
        while part.exists() and time.time() < deadline:
            time.sleep(0.05)
        assert not part.exists() and not out.exists()
        assert webfs("status", m.mnt).returncode == 0
    finally:
        m.umount()
