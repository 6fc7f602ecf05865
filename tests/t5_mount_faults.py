"""Faults found by hostile testing (issue 11), each driven through a real
mount with real shell tools: stale cached pieces, requests that used to kill
the daemon, the .webfs tree and other users, a full disk at close, and the
daemon's memory on one large file. The same items checked on the handlers
themselves, without a kernel, are in t3_handlers."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import Mounted, sh, tmpfs_disks, unmount, webfs


@pytest.fixture
def m(tmp_path):
    mounted = Mounted(tmp_path)
    yield mounted
    mounted.umount()


def alive(m: Mounted) -> bool:
    """The daemon still answers (and the mount is still there)."""
    return os.path.ismount(m.mnt) and sh(f"ls {m.mnt}", check=False).returncode == 0


def peak_kb(m: Mounted) -> int:
    """The daemon's peak resident memory (VmHWM), in kB."""
    with open(f"/proc/{m.pid()}/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM")).split()[1])


DROP = "python3 -c \"import os,sys;fd=os.open(sys.argv[1],0);os.posix_fadvise(fd,0,0,4)\""


# -- item 1: a deleted file's bytes must never be read back as another file's ----

def test_stale_piece_after_delete_fadvise(m):
    """The issue's repro: page cache dropped with posix_fadvise(DONTNEED)."""
    M = m.mnt
    sh(f"python3 -c \"open('{M}/a','wb').write(b'OLD-SECRET-'*1000)\"")
    sh(f"{DROP} {M}/a; cat {M}/a >/dev/null")
    sh(f"rm {M}/a")
    sh(f"python3 -c \"open('{M}/b','wb').write(b'new-content-'*2000)\"")
    sh(f"{DROP} {M}/b")
    assert sh(f"head -c 24 {M}/b").stdout == b"new-content-new-content-"
    assert open(M / "b", "rb").read() == b"new-content-" * 2000
    assert alive(m)


def test_stale_piece_after_delete_drop_caches(m):
    """The same with every page cache dropped (echo 3 > drop_caches), a few rounds."""
    M = m.mnt
    for i in range(5):
        old, new = f"OLD-{i}-SECRET-".encode(), f"new-{i}-content-".encode()
        (M / "a").write_bytes(old * 1000)
        sh(f"echo 3 > /proc/sys/vm/drop_caches; cat {M}/a >/dev/null; rm {M}/a")
        (M / "b").write_bytes(new * 2000)
        sh("echo 3 > /proc/sys/vm/drop_caches")
        assert sh(f"cat {M}/b").stdout == new * 2000, f"round {i}"
        sh(f"rm {M}/b")


# -- item 2: no request kills the daemon; huge sizes are sparse -----------------

def test_huge_truncate_is_efbig_and_mount_lives(m):
    """pjdfstest truncate/12.t: beyond the largest file, EFBIG (as ext4 says)."""
    M = m.mnt
    sh(f"echo hello > {M}/f")
    proc = sh(f"truncate -s 999999999999999 {M}/f", check=False)
    assert proc.returncode != 0 and b"too large" in proc.stderr, proc.stderr
    proc = sh(f"python3 -c \"import os;fd=os.open('{M}/f',os.O_RDWR);os.ftruncate(fd,999999999999999)\"",
              check=False)
    assert b"File too large" in proc.stderr, proc.stderr
    assert alive(m)
    assert (M / "f").read_bytes() == b"hello\n"
    # a write there: the kernel takes it into its cache, so it is close that fails
    proc = sh(f"echo x | dd of={M}/s bs=1 seek=999999999999999 status=none", check=False)
    assert proc.returncode != 0
    assert os.stat(M / "s").st_size == 0 and (M / "s").read_bytes() == b""
    assert alive(m)


EFBIG_SCRIPT = """
import errno, mmap, os, sys
path, direct = sys.argv[1], sys.argv[2] == "direct"
page = mmap.mmap(-1, 4096)                      # O_DIRECT wants an aligned buffer
page.write(b"a" * 4096)
fd = os.open(path, os.O_RDWR | os.O_CREAT | (os.O_DIRECT if direct else 0))
os.pwrite(fd, page, 0)
try:
    os.pwrite(fd, page, 1 << 40)                # past the largest file (1 TiB)
    print("write ok")
except OSError as exc:
    print("write", errno.errorcode[exc.errno])
try:
    os.fsync(fd)
    print("fsync ok")
except OSError as exc:
    print("fsync", errno.errorcode[exc.errno])
os.close(fd)
"""


def test_a_write_past_the_largest_file_fails(m):
    """A write that bypasses the kernel's cache (O_DIRECT) fails itself with
    EFBIG and the file keeps every other write; a cached one the kernel has
    accepted before webfs sees it (FUSE has no way to tell it the largest
    size), so fsync fails with EFBIG and the file keeps what was stored last."""
    M = m.mnt
    out = sh(f"{sys.executable} -c '{EFBIG_SCRIPT}' {M}/direct direct").stdout.decode().split("\n")
    assert out[:2] == ["write EFBIG", "fsync ok"], out
    assert (M / "direct").read_bytes() == b"a" * 4096
    sh(f"echo hello > {M}/cached")
    out = sh(f"{sys.executable} -c '{EFBIG_SCRIPT}' {M}/cached cached").stdout.decode().split("\n")
    assert out[:2] == ["write ok", "fsync EFBIG"], out
    assert (M / "cached").read_bytes() == b"hello\n"
    assert alive(m)
    m.remount()
    assert (M / "direct").read_bytes() == b"a" * 4096
    assert (M / "cached").read_bytes() == b"hello\n"


def test_huge_sparse_truncate_and_seek(m):
    """Sizes up to the limit succeed and stay sparse: no giant buffer, reads of
    the holes are zeros, the data past them is there, the daemon stays small."""
    M = m.mnt
    size = 16 << 30                                     # 16 GiB of hole
    sh(f"echo hello > {M}/f; truncate -s {size} {M}/f")
    assert os.stat(M / "f").st_size == size
    sh(f"dd if=/dev/zero of={M}/g bs=1 count=0 seek={size} status=none")
    sh(f"printf tail | dd of={M}/h bs=1 seek={size} conv=notrunc status=none")
    assert os.stat(M / "h").st_size == size + 4
    with open(M / "f", "rb") as f:
        assert f.read(6) == b"hello\n"
        f.seek(size - 100)
        assert f.read(200) == bytes(100)
        f.seek(size + 4096)
        assert f.read(10) == b""
    assert sh(f"tail -c 4 {M}/h").stdout == b"tail"
    assert sh(f"dd if={M}/h bs=1M skip=10000 count=2 status=none | tr -d '\\0' | wc -c").stdout.strip() == b"0"
    assert peak_kb(m) < 200 * 1024, f"daemon peak RSS {peak_kb(m)} kB"
    # ... and the same after a remount (the holes were stored as one zeros block)
    m.remount()
    assert sh(f"tail -c 4 {M}/h").stdout == b"tail"
    assert sh(f"head -c 6 {M}/f").stdout == b"hello\n"
    # appending to the huge file copies it on write without filling the holes
    sh(f"echo more >> {M}/f")
    assert sh(f"tail -c 5 {M}/f").stdout == b"more\n"
    assert peak_kb(m) < 200 * 1024, f"daemon peak RSS {peak_kb(m)} kB"
    assert alive(m)


# -- item 3: .webfs/ is for the user who mounted (and root) -----------------------

NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups"


def test_webfs_tree_closed_to_other_users():
    import shutil
    import tempfile
    from pathlib import Path
    root = Path(tempfile.mkdtemp(prefix="webfs-allow-other-"))      # pytest's tmp is 0700
    os.chmod(root, 0o755)
    m = Mounted(root, options="allow_other")
    try:
        M = m.mnt
        sh(f"mkdir -m 0755 {M}/pub; echo public > {M}/pub/page; chmod 0644 {M}/pub/page")
        sh(f"mkdir -m 0700 {M}/private; echo 'the secret' > {M}/private/doc; chmod 0600 {M}/private/doc")
        sig = os.getxattr(M / "private" / "doc", "user.webfs.signature").decode()
        block = f"{M}/.webfs/blocks/{sig[:2]}/{sig[2:4]}/{sig[4:]}"
        # the owner (root mounted it) sees the tree
        assert sh(f"cat {block}").stdout == b"the secret\n"
        assert sig[4:].encode() in sh(f"ls {M}/.webfs/blocks/{sig[:2]}/{sig[2:4]}").stdout
        # another user reads what the modes allow, and nothing through .webfs
        assert sh(f"{NOBODY} cat {M}/pub/page").stdout == b"public\n"
        assert sh(f"{NOBODY} cat {M}/private/doc", check=False).returncode != 0
        for cmd in (f"ls {M}/.webfs", f"ls {M}/.webfs/blocks", f"ls {M}/.webfs/blocks/{sig[:2]}",
                    f"cat {block}", f"stat {block}", f"getfattr -d {block}",
                    f"find {M}/.webfs -type f"):
            proc = sh(f"{NOBODY} {cmd}", check=False)
            assert proc.returncode != 0 and b"the secret" not in proc.stdout, (cmd, proc.stdout)
        # ... also right after the owner's walk filled the kernel's caches
        sh(f"cat {block} >/dev/null; ls -R {M}/.webfs >/dev/null")
        proc = sh(f"{NOBODY} cat {block}", check=False)
        assert proc.returncode != 0 and b"the secret" not in proc.stdout
        assert alive(m)
    finally:
        m.umount()
        shutil.rmtree(root, ignore_errors=True)


# -- item 7: a close that fails with ENOSPC keeps the old content and says so ------

def test_enospc_at_close_keeps_old_content_and_umount_reports(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with tmpfs_disks(tmp_path, 2, "40m") as disks:
        webfs("mount", disks[0], mnt)
        try:
            (mnt / "old").write_bytes(b"v1\n")
            big = os.urandom(60 << 20)              # more than both disks hold
            for name in ("new", "old"):
                f = open(mnt / name, "wb")
                with pytest.raises(OSError) as exc:
                    try:
                        f.write(big)
                        f.flush()
                        os.fsync(f.fileno())
                    finally:
                        f.close()
                assert exc.value.errno == errno.ENOSPC, exc.value
            # the same without fsync: close itself says ENOSPC
            f = open(mnt / "closed", "wb")
            f.write(big)
            with pytest.raises(OSError) as exc:
                f.close()
            assert exc.value.errno == errno.ENOSPC, exc.value
            assert os.stat(mnt / "closed").st_size == 0
            # a child forked before the close closes the same descriptor first
            # (close_fds): that close fails, and the writer's own close still says so
            f = open(mnt / "forked", "wb")
            f.write(big)
            f.flush()
            subprocess.run(["true"], check=True)
            with pytest.raises(OSError) as exc:
                f.close()
            assert exc.value.errno == errno.ENOSPC, exc.value
            assert os.stat(mnt / "forked").st_size == 0
            # while mounted: what ls, stat and cat say is what is kept
            assert sh(f"stat -c %s {mnt}/new {mnt}/old").stdout.split() == [b"0", b"3"]
            assert (mnt / "new").read_bytes() == b""
            assert (mnt / "old").read_bytes() == b"v1\n"
            # a later small write still works, and stays
            (mnt / "later").write_bytes(b"fits\n")
        finally:
            proc = webfs("umount", mnt, check=False)
        assert proc.returncode != 0
        said = proc.stderr.decode()
        assert "/new" in said and "/old" in said and "/closed" in said and "ENOSPC" in said, said
        assert not os.path.ismount(mnt)
        webfs("mount", disks[0], mnt)
        try:
            assert sh(f"stat -c %s {mnt}/new {mnt}/old {mnt}/later").stdout.split() == [b"0", b"3", b"5"]
            assert (mnt / "old").read_bytes() == b"v1\n"
        finally:
            proc = webfs("umount", mnt, check=False)
        assert proc.returncode == 0, proc.stderr       # nothing failed in this mount


def test_a_nearly_full_catalog_disk_refuses_new_names_and_loses_none(tmp_path):
    """The disk that holds the catalog fills (here with another user's file)
    while names are made. A name is answered at once and committed within a
    second; a commit that found the disk full would be rolled back, undoing
    names already answered. So new names, xattrs and contents are refused
    with ENOSPC first, every name that was answered survives the remount,
    removals go on, and with room again names are made again."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with tmpfs_disks(tmp_path, 2, "8m") as disks:
        webfs("mount", disks[0], mnt)
        try:
            (mnt / "early.html").write_bytes(b"")
            free = os.statvfs(disks[0]).f_bavail * os.statvfs(disks[0]).f_frsize
            sh(f"dd if=/dev/zero of={disks[0]}/filler bs=64k count={(free - (2500 << 10)) >> 16}")
            made, refused = [], []
            for i in range(20000):          # names take 150 to 900 B each: far more than the 450 KiB left
                try:
                    os.mkdir(mnt / f"dir{i}")
                    made.append(f"dir{i}")
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    refused.append(i)
                    if len(refused) == 300:
                        break
            assert made and len(refused) == 300, (len(made), len(refused))
            # 1.5 MiB: under half the catalog disk's reserve (4 MiB on 8 MiB) with
            # nothing waiting to be committed, so every change that adds rows is
            # refused, and room for the commits of the removals below.
            free = os.statvfs(disks[0]).f_bavail * os.statvfs(disks[0]).f_frsize
            sh(f"dd if=/dev/zero of={disks[0]}/filler2 bs=64k count={(free - (3 << 19)) >> 16}")
            proc = sh(f"echo page > {mnt}/page.html", check=False)
            assert proc.returncode != 0 and b"No space left" in proc.stderr, proc
            said = webfs("status", mnt).stdout.decode()
            assert "NEARLY FULL: the catalog's disk has" in said and "refused (ENOSPC)" in said, said
            room = json.loads(webfs("status", "--json", mnt).stdout)["catalog_room"]
            assert room["free_bytes"] < room["refused_below"] == 2048 + (4 << 20) // 2, room
            proc = sh(f"setfattr -n user.crawl -v 1 {mnt}/{made[0]}", check=False)
            assert proc.returncode != 0 and b"No space left" in proc.stderr, proc
            (tmp_path / "page.html").write_bytes(b"page\n")
            proc = sh(f"cp {tmp_path}/page.html {mnt}/early.html", check=False)    # its content, at the close
            assert proc.returncode != 0 and b"No space left" in proc.stderr, proc
            sh(f"cd {mnt} && rmdir {' '.join(made[:50])}")       # removals go on
            kept = set(made[50:]) | {"early.html"}
            webfs("sync", mnt)
            assert set(os.listdir(mnt)) == kept
        finally:
            proc = webfs("umount", mnt, check=False)
        assert proc.returncode != 0 and b"early.html" in proc.stderr, proc      # the dropped content, said
        log = (disks[0] / "meta" / "webfs.log").read_text()
        assert "the disk that holds the catalog" in log and "nearly full" in log, log[-2000:]
        webfs("mount", disks[0], mnt)
        try:
            assert set(os.listdir(mnt)) == kept         # no name answered was undone
            os.unlink(disks[0] / "filler")
            os.unlink(disks[0] / "filler2")
            assert "NEARLY FULL" not in webfs("status", mnt).stdout.decode()
            sh(f"mkdir {mnt}/after && echo page > {mnt}/after/page.html && setfattr -n user.crawl -v 1 {mnt}/after")
        finally:
            webfs("umount", mnt)
        webfs("mount", disks[0], mnt)
        try:
            assert (mnt / "after" / "page.html").read_bytes() == b"page\n"
            assert (mnt / "early.html").read_bytes() == b""
            assert os.getxattr(mnt / "after", "user.crawl") == b"1"
            assert set(os.listdir(mnt)) == kept | {"after"}
        finally:
            webfs("umount", mnt)


def _mark_a_stripe_dirty(m) -> bytes:
    """One stripe of the mount's catalog marked out of date (as a parity write
    that failed marks it), behind the daemon's back; its id."""
    import sqlite3
    db = sqlite3.connect(m.disks[0] / "meta" / "catalog.db", timeout=30)
    with db:
        stripe = db.execute("SELECT id FROM stripes WHERE members > 0 LIMIT 1").fetchone()[0]
        assert db.execute("UPDATE stripes SET state='dirty' WHERE id=?", (stripe,)).rowcount == 1
    db.close()
    return stripe


def test_parity_out_of_date_is_said_and_written_at_the_next_sync(m):
    """A stripe whose parity could not be written (its disk full) leaves its
    blocks unprotected: status says how many, and a sync writes it (it stayed
    out of date until a scrub --repair, and a disk lost meanwhile took those
    blocks with it)."""
    for i in range(6):
        (m.mnt / f"f{i}").write_bytes(os.urandom(20000))
    webfs("sync", m.mnt)
    _mark_a_stripe_dirty(m)
    st = json.loads(webfs("status", "--json", m.mnt).stdout)["protection"]
    assert st["dirty_stripes"] == 1 and st["stale_blocks"] >= 1, st
    assert b"whose parity is out of date: not protected" in webfs("status", m.mnt).stdout
    webfs("sync", m.mnt)
    st = json.loads(webfs("status", "--json", m.mnt).stdout)["protection"]
    assert st["dirty_stripes"] == 0 and st["stale_blocks"] == 0, st
    assert b"out of date" not in webfs("status", m.mnt).stdout


def test_umount_reports_stale_parity(m):
    """Parity out of date that the unmount cannot write either (here a member
    block and the parity file are both gone) is not silently left behind."""
    import sqlite3
    for i in range(6):
        (m.mnt / f"f{i}").write_bytes(os.urandom(20000))
    webfs("sync", m.mnt)
    stripe = _mark_a_stripe_dirty(m)
    db = sqlite3.connect(m.disks[0] / "meta" / "catalog.db", timeout=30)
    sig, disk, parity_disk = db.execute(
        "SELECT b.sig, b.disk, s.parity_disk FROM blocks b JOIN stripes s ON b.stripe = s.id "
        "WHERE s.id=? LIMIT 1", (stripe,)).fetchone()
    db.close()
    for top, name in ((m.disks[disk] / "blocks", sig.hex()), (m.disks[parity_disk] / "parity", stripe.hex())):
        found = [p for p in top.rglob("*") if p.is_file() and "".join(p.relative_to(top).parts).startswith(name)]
        assert found, name
        for p in found:
            p.unlink()
    proc = webfs("umount", m.mnt, check=False)
    assert proc.returncode != 0 and b"parity stripe(s) out of date" in proc.stderr, proc.stderr
    assert not os.path.ismount(m.mnt)


# -- item 9: one large file does not blow up the daemon's memory -------------------

def test_a_big_file_daemon_memory_bounded(m, tmp_path):
    """Write 256 MiB of random bytes (does not compress or dedup: the worst case
    for buffers), read it back past the page cache, compare. The daemon's peak
    RSS stays under 200 MB: 64 MiB of write buffer, 128 MiB of piece cache at
    most, and the rest freed back to the system. 256 MiB is past what the
    buffers hold together (a buffer without bound would pass 200 MB), and
    without glibc's threshold set (mountstart) it peaks at 274 MB, as 1 GiB
    did (276 MB; 184 MB with it, either size): 1 GiB cost 46 s of the suite."""
    src = tmp_path / "src"
    sh(f"head -c 256M /dev/urandom > {src}")
    sh(f"dd if={src} of={m.mnt}/big bs=1M status=none")
    after_write = peak_kb(m)
    sh("echo 3 > /proc/sys/vm/drop_caches")
    sh(f"cmp {src} {m.mnt}/big")
    assert after_write < 200 * 1024 and peak_kb(m) < 200 * 1024, (after_write, peak_kb(m))


def test_a_command_on_a_mount_whose_daemon_died_says_so(tmp_path):
    """export-warc (and any command given the mount) says the mount is gone,
    not 'not a directory'; webfs umount lets go of it, and it mounts again."""
    from t2_warc import imp, write_warc
    m = Mounted(tmp_path, disks=3, mount=False)
    imp(m.disks[0], write_warc(tmp_path / "a.warc.gz", [("http://site.org/", b"<html>hi</html>")]), check=True)
    m.mount()
    pid = m.pid()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = f"the mount at {m.mnt} is gone (its daemon died); remount it"
    try:
        for cmd in (("export-warc", m.mnt / "c", tmp_path / "out.warc.gz"), ("status", m.mnt),
                    ("mount", m.disks[0], m.mnt), ("import", tmp_path / "a.warc.gz", m.mnt / "c"),
                    ("replay", m.mnt / "c", tmp_path / "pywb"), ("versions", "http://site.org/", m.mnt)):
            proc = webfs(*cmd, check=False)
            lines = proc.stderr.decode().strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1 and gone in lines[0], (cmd, proc.stderr)
        proc = webfs("umount", m.mnt, check=False)
        assert proc.returncode == 1 and b"whose daemon had died" in proc.stderr, proc.stderr
        assert os.path.isdir(m.mnt) and not os.path.ismount(m.mnt)
    finally:
        subprocess.run(["fusermount3", "-uz", str(m.mnt)], capture_output=True)
    m.mount()
    try:
        webfs("export-warc", m.mnt / "c", tmp_path / "out.warc.gz")
    finally:
        m.umount()


def test_umount_reports_each_dropped_file_once_as_it_is_now(tmp_path):
    """The unmount report after a full disk: each file whose changes were
    dropped once (a forked child's close and the writer's dropped it twice,
    and it was listed twice), with what it keeps now; a file removed since is
    said to be (it was listed as keeping 0 bytes)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with tmpfs_disks(tmp_path, 2, "40m") as disks:
        webfs("mount", disks[0], mnt)
        try:
            big = os.urandom(60 << 20)              # more than both disks hold
            for name in ("twice", "twice", "gone"):
                f = open(mnt / name, "wb")
                f.write(big)
                f.flush()
                subprocess.run(["true"], check=True)   # its close of the descriptor fails first
                with pytest.raises(OSError) as exc:
                    f.close()
                assert exc.value.errno == errno.ENOSPC, exc.value
            (mnt / "gone").unlink()
        finally:
            proc = webfs("umount", mnt, check=False)
        said = proc.stderr.decode()
        assert proc.returncode != 0 and not os.path.ismount(mnt), said
        lines = [line for line in said.splitlines() if "was dropped" in line]
        assert len([line for line in lines if "/twice:" in line and "it keeps 0 bytes" in line]) == 1, said
        assert [line for line in lines if "/gone:" in line and "removed since" in line
                and "keeps" not in line], said
        assert len(lines) == 2, said
