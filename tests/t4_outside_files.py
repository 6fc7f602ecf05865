"""Every file a command writes outside the archive's disks is created new
(webfs-format(5), FILES OUTSIDE THE ARCHIVE): a symlink planted at its name,
or at a predictable temporary name, to a victim file elsewhere never gets
the victim written. Each command either refuses in one line or writes a
regular file, on an unmounted archive and through a mount (where the daemon,
as root, does the writing): export-warc (OUT, OUT.part, --split names),
replay (config.yaml and the indexes in PYWBDIR/webfs-cdxj/), the unmount
report, and the tools webfs-warc-rebuild, webfs-recover and webfs-unparity."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BIN, REPO, Mounted, make_archive, webfs
from t2_warc import imp, records_of, write_warc
from webfs.control import control_socket_path, report_path

PAGES = [(f"http://site.org/p{i}.html", b"<html>page %d</html>" % i * (1 + i % 30)) for i in range(60)]
SECRET = b"the victim's own bytes\n"


def victim(tmp_path: Path) -> Path:
    v = tmp_path / "elsewhere" / "victim"
    v.parent.mkdir(exist_ok=True)
    v.write_bytes(SECRET)
    return v


def untouched(v: Path) -> None:
    assert v.read_bytes() == SECRET and stat.S_ISREG(os.lstat(v).st_mode)


def regular(p: Path) -> None:
    assert stat.S_ISREG(os.lstat(p).st_mode), f"{p} is not a regular file"


def refused(proc, *words: str) -> str:
    lines = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def archive(tmp_path):
    disks = make_archive(tmp_path, 3)
    src = write_warc(tmp_path / "a.warc.gz", PAGES)
    imp(disks[0], src, check=True)
    return disks, src


def _export_cases(tmp_path, src, collection):
    """export-warc COLLECTION OUT with a symlink at OUT.part, at OUT, at every
    --split name's .part: refused without --force; with it, regular files."""
    v = victim(tmp_path)
    out = tmp_path / "out" / "x.warc.gz"
    out.parent.mkdir()
    for planted in (Path(str(out) + ".part"), out):
        planted.symlink_to(v)
        refused(webfs("export-warc", collection, out, check=False), str(planted), "--force")
        untouched(v)
        assert planted.is_symlink()
        webfs("export-warc", "--force", collection, out)
        untouched(v)
        regular(out)
        assert records_of(out) == records_of(src)
        assert sorted(p.name for p in out.parent.iterdir()) == ["x.warc.gz"]
        out.unlink()
    # a dangling symlink is a name taken as well: nothing is made where it points
    gone = tmp_path / "elsewhere" / "made-by-webfs"
    Path(str(out) + ".part").symlink_to(gone)
    refused(webfs("export-warc", collection, out, check=False), "x.warc.gz.part")
    assert not os.path.lexists(gone)
    os.unlink(str(out) + ".part")
    # --split: every file's .part name is predictable
    for n in (1, 2, 3):
        (tmp_path / "out" / f"x-{n:05d}.warc.gz.part").symlink_to(v)
    refused(webfs("export-warc", "--split", "4K", collection, out, check=False), "x-00001.warc.gz.part")
    webfs("export-warc", "--force", "--split", "4K", collection, out)
    untouched(v)
    parts = sorted(out.parent.glob("x-*.warc.gz"))
    assert len(parts) > 3 and not list(out.parent.glob("*.part"))
    for p in parts:
        regular(p)


def test_export_warc_unmounted(tmp_path, archive):
    disks, src = archive
    _export_cases(tmp_path, src, f"{disks[0]}:/c")


def test_export_warc_by_the_daemon(tmp_path, archive):
    """In a mount the daemon (root) opens OUT: the same rules hold there."""
    disks, src = archive
    m = Mounted.__new__(Mounted)
    m.root, m.disks, m.mnt, m.options = tmp_path, disks, tmp_path / "mnt", ""
    m.mnt.mkdir()
    m.mount()
    try:
        _export_cases(tmp_path, src, str(m.mnt / "c"))
    finally:
        m.umount()


def _replay(collection: str, pywb: Path, port: int) -> str:
    """Run webfs replay until it serves (disks), or until it is done (a mount:
    pywb reads the mount's files, nothing is left to serve), then stop it; its
    output."""
    proc = subprocess.Popen([str(BIN / "webfs"), "replay", "--port", str(port), collection, str(pywb)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = b""
        deadline = time.monotonic() + 120
        while b"serving" not in out and time.monotonic() < deadline and proc.poll() is None:
            out += proc.stdout.readline()
        if proc.poll() is not None:
            out += proc.stdout.read()
            assert proc.returncode == 0 and b"wayback" in out, (out, proc.stderr.read())
        else:
            assert b"serving" in out, out
        return out.decode()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def _plant_replay(pywb: Path, v: Path) -> list[Path]:
    """Symlinks to the victim at every file replay writes in PYWBDIR: config.yaml,
    the collection's merged index and its per-source cache file."""
    cache = pywb / "webfs-cdxj"
    (cache / "c").mkdir(parents=True)
    planted = [pywb / "config.yaml", cache / "c.cdxj", cache / "c" / "a.warc.cdxj"]
    for path in planted:
        path.symlink_to(v)
    return planted


def test_replay_writes_regular_files_unmounted(tmp_path, archive):
    disks, _ = archive
    v = victim(tmp_path)
    pywb = tmp_path / "pywb"
    pywb.mkdir()
    planted = _plant_replay(pywb, v)
    _replay(f"{disks[0]}:/c", pywb, 18391)
    untouched(v)
    for path in planted:
        regular(path)
    assert b"collections:" in (pywb / "config.yaml").read_bytes()
    assert (pywb / "webfs-cdxj" / "c.cdxj").read_bytes().count(b"\n") >= len(PAGES)


def test_replay_refuses_a_planted_index_directory(tmp_path, archive):
    """A symlink in place of PYWBDIR/webfs-cdxj would send the indexes elsewhere:
    refused in one line, nothing written there."""
    disks, _ = archive
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pywb = tmp_path / "pywb"
    pywb.mkdir()
    (pywb / "webfs-cdxj").symlink_to(elsewhere)
    proc = webfs("replay", "--port", "18393", f"{disks[0]}:/c", str(pywb), check=False)
    assert proc.returncode != 0 and b"not a directory" in proc.stderr, proc.stderr
    assert list(elsewhere.iterdir()) == []


def test_replay_through_a_mount_and_the_unmount_report(tmp_path, archive):
    """replay of a mounted collection writes nothing into the mount and only
    regular files in PYWBDIR; the daemon's unmount report (its name and
    temporary name predictable) is never written through a symlink."""
    disks, _ = archive
    v = victim(tmp_path)
    m = Mounted.__new__(Mounted)
    m.root, m.disks, m.mnt, m.options = tmp_path, disks, tmp_path / "mnt", ""
    m.mnt.mkdir()
    m.mount()
    report = report_path(control_socket_path(os.getxattr(m.mnt, "user.webfs.archive").decode()))
    try:
        pywb = tmp_path / "pywb"
        pywb.mkdir()
        planted = _plant_replay(pywb, v)
        _replay(str(m.mnt / "c"), pywb, 18392)
        untouched(v)
        for path in planted:
            regular(path)
        assert not (m.mnt / "c" / "@warc" / "index.cdxj").exists()
        for name in (report, report + ".tmp"):
            os.symlink(v, name)
    finally:
        m.umount()
    try:
        untouched(v)
        assert not os.path.lexists(report)        # read and removed by webfs umount
    finally:
        for name in (report, report + ".tmp"):
            if os.path.islink(name):
                os.unlink(name)


def test_the_tools_refuse_or_write_regular_files(tmp_path, archive):
    """Without webfs: webfs-warc-rebuild's OUT, webfs-recover's --report and
    OUTDIR, webfs-unparity's --out."""
    disks, src = archive
    v = victim(tmp_path)
    rebuilt = tmp_path / "rebuilt"
    subprocess.run(["sh", str(REPO / "tools" / "webfs-recover"), *map(str, disks), str(rebuilt)],
                   check=True, capture_output=True)
    out = tmp_path / "w.warc.gz"
    out.symlink_to(v)
    rebuild = ["sh", str(REPO / "tools" / "webfs-warc-rebuild"), str(rebuilt / "c"), "a.warc.gz"]
    proc = subprocess.run([*rebuild, str(out)], capture_output=True)
    assert proc.returncode == 1 and b"exists" in proc.stderr, proc.stderr
    untouched(v)
    out.unlink()
    subprocess.run([*rebuild, str(out)], check=True, capture_output=True)
    regular(out)
    assert records_of(out) == records_of(src)
    assert sorted(p.name for p in tmp_path.glob("w.warc.gz*")) == ["w.warc.gz"]
    # webfs-recover: a report named by a symlink, an OUTDIR that is one
    report = tmp_path / "report"
    report.symlink_to(v)
    proc = subprocess.run(["sh", str(REPO / "tools" / "webfs-recover"), f"--report={report}",
                           *map(str, disks), str(tmp_path / "again")], capture_output=True)
    assert proc.returncode == 2 and b"--report file exists" in proc.stderr, proc.stderr
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "linkdir").symlink_to(tmp_path / "emptydir")
    proc = subprocess.run(["sh", str(REPO / "tools" / "webfs-recover"), *map(str, disks),
                           str(tmp_path / "linkdir")], capture_output=True)
    assert proc.returncode == 2 and b"symlink" in proc.stderr, proc.stderr
    assert list((tmp_path / "emptydir").iterdir()) == []
    # webfs-unparity: --out a symlink
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "webfs-unparity"), "--out",
                           str(tmp_path / "linkdir"), *map(str, disks)], capture_output=True)
    assert proc.returncode != 0 and b"symlink" in proc.stderr, proc.stderr
    untouched(v)
