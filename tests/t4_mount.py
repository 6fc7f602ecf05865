"""A real webfs mount driven with the shell tools a user would use (a kill -9
during cp -r and a full disk: t5_mount_crashes)."""
from __future__ import annotations

import errno
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import Mounted, sh, unmount, wait_dead, webfs


def tree_listing(root: Path) -> list[tuple]:
    """What ls -l / stat would show, for every path below root (inode numbers aside)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            size = st.st_size if not p.is_dir() else 0
            out.append((rel, oct(st.st_mode), size, st.st_mtime_ns if not p.is_dir() else 0))
    return out


def test_cp_r_of_a_crawl_reads_back_identical(mounted, corpus):
    src = corpus / "crawl-001"
    sh(f"cp -a '{src}' '{mounted.mnt}/crawl-001'")
    sh(f"diff -r '{src}' '{mounted.mnt}/crawl-001'")
    count = lambda d: sh(f"find '{d}' | wc -l").stdout
    assert count(src) == count(mounted.mnt / "crawl-001")
    # Directory sizes differ between filesystems; the files' apparent sizes must not.
    du = lambda d: sh(f"cd '{d}' && find . -type f -print0 | du -c --apparent-size --block-size=1 "
                      "--files0-from=- | tail -n 1").stdout
    assert du(src) == du(mounted.mnt / "crawl-001")
    grep = lambda d: sorted(sh(f"cd '{d}' && grep -rl zyzzogeton .").stdout.split())
    assert grep(src) == grep(mounted.mnt / "crawl-001") and len(grep(src)) == 3
    assert tree_listing(src) == tree_listing(mounted.mnt / "crawl-001")
    # The same tree after a remount, and after the MANIFEST has been written.
    mounted.remount()
    sh(f"diff -r '{src}' '{mounted.mnt}/crawl-001'")
    assert tree_listing(src) == tree_listing(mounted.mnt / "crawl-001")


def test_rsync_and_tar_in_and_out(mounted, corpus):
    src = corpus / "crawl-001"
    sh(f"rsync -a '{src}/' '{mounted.mnt}/by-rsync/'")
    sh(f"diff -r '{src}' '{mounted.mnt}/by-rsync'")
    assert tree_listing(src) == tree_listing(mounted.mnt / "by-rsync")
    # A second rsync finds nothing to do.
    out = sh(f"rsync -ai '{src}/' '{mounted.mnt}/by-rsync/'").stdout
    assert out.strip() == b""
    sh(f"mkdir '{mounted.mnt}/by-tar' && tar -C '{src}' -cf - . | tar -C '{mounted.mnt}/by-tar' -xf -")
    sh(f"diff -r '{src}' '{mounted.mnt}/by-tar'")
    # tar out of the mount gives the same bytes as tar of the source.
    a = sh(f"tar -C '{src}' --sort=name -cf - . | md5sum").stdout
    b = sh(f"tar -C '{mounted.mnt}/by-tar' --sort=name -cf - . | md5sum").stdout
    assert a == b


def _block_refs(mnt: Path, path: Path) -> list[int]:
    return [int(x) for x in os.getxattr(path, "user.webfs.refs").split(b",")]


def test_two_copies_of_a_crawl_are_stored_once(mounted, corpus):
    src = corpus / "crawl-001"
    sh(f"cp -r '{src}' '{mounted.mnt}/one'")
    st1 = json.loads(webfs("status", "--json", mounted.mnt).stdout)
    sh(f"cp -r '{src}' '{mounted.mnt}/two'")
    st2 = json.loads(webfs("status", "--json", mounted.mnt).stdout)
    assert st2["blocks"] == st1["blocks"]                    # nothing new stored
    assert st2["logical_bytes"] == 2 * st1["logical_bytes"]
    assert st2["dedup_ratio"] >= 2 * st1["dedup_ratio"] * 0.99
    # Refs equal the number of paths that use the block.
    by_sig: dict[str, list[Path]] = {}
    for p in (mounted.mnt / "one").rglob("*"):
        if p.is_file():
            by_sig.setdefault(os.getxattr(p, "user.webfs.signature").decode(), []).append(p)
    for sig, paths in list(by_sig.items())[:200]:
        if sig:
            assert _block_refs(mounted.mnt, paths[0]) == [2 * len(paths)]
    sh(f"rm -r '{mounted.mnt}/one'")
    sh(f"diff -r '{src}' '{mounted.mnt}/two'")
    st3 = json.loads(webfs("status", "--json", mounted.mnt).stdout)
    assert st3["blocks"] == st1["blocks"]                    # nothing still used was freed
    mounted.umount()
    assert webfs("fsck", mounted.disks[0]).returncode == 0


def test_two_writers_of_the_same_new_page_make_one_block(mounted):
    page = b"<html>" + b"the same page, written twice at once " * 400 + b"</html>"
    barrier = threading.Barrier(2)

    def writer(name):
        barrier.wait()
        (mounted.mnt / name).write_bytes(page)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a.html", "b.html")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    sig_a = os.getxattr(mounted.mnt / "a.html", "user.webfs.signature")
    assert sig_a == os.getxattr(mounted.mnt / "b.html", "user.webfs.signature")
    assert _block_refs(mounted.mnt, mounted.mnt / "a.html") == [2]
    st = json.loads(webfs("status", "--json", mounted.mnt).stdout)
    assert st["blocks"] == 1


def test_large_file_is_split_into_pieces_and_reads_at_any_offset(mounted, tmp_path):
    data = os.urandom(50 * 1024 * 1024 + 12345)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    sh(f"cp '{src}' '{mounted.mnt}/big.bin'")
    sigs = os.getxattr(mounted.mnt / "big.bin", "user.webfs.signature").split(b",")
    assert len(sigs) == 13                                   # 4 MiB pieces
    disks = set(os.getxattr(mounted.mnt / "big.bin", "user.webfs.disk").split(b","))
    assert len(disks) > 1                                    # striped over the disks
    mounted.remount()
    sh(f"cmp '{src}' '{mounted.mnt}/big.bin'")
    rng = random.Random(5)
    piece = 4 * 1024 * 1024
    with open(mounted.mnt / "big.bin", "rb") as f:
        for _ in range(60):
            boundary = rng.randrange(1, 13) * piece
            off = max(0, boundary - rng.randrange(1, 300000))
            n = rng.randrange(1, 700000)
            f.seek(off)
            assert f.read(n) == data[off:off + n]
    # mmap reads
    import mmap
    with open(mounted.mnt / "big.bin", "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        assert m[piece - 10:piece + 10] == data[piece - 10:piece + 10]
        assert m[-100:] == data[-100:]


def test_overwrite_append_and_random_writes(mounted):
    p = mounted.mnt / "f.txt"
    p.write_bytes(b"hello world\n" * 1000)
    with open(p, "ab") as f:
        f.write(b"appended\n")
    with open(p, "r+b") as f:
        f.seek(5)
        f.write(b"XXXXX")
        f.seek(20000)
        f.write(b"past the end")
    expect = bytearray(b"hello world\n" * 1000 + b"appended\n")
    expect[5:10] = b"XXXXX"
    expect.extend(bytes(20000 - len(expect)))
    expect[20000:] = b"past the end"
    assert p.read_bytes() == bytes(expect)
    os.truncate(p, 100)
    assert p.read_bytes() == bytes(expect[:100])
    mounted.remount()
    assert p.read_bytes() == bytes(expect[:100])
    sh(f"truncate -s 0 '{p}'")
    assert p.read_bytes() == b""
    # A shorter rewrite through open(O_TRUNC) leaves nothing of the longer one.
    sh(f"printf 'first version, the longer\\n' > '{p}' && printf 'second\\n' > '{p}'")
    assert p.read_bytes() == b"second\n"
    mounted.remount()
    assert p.read_bytes() == b"second\n"


def test_posix_details(mounted):
    m = mounted.mnt
    (m / "a").write_text("A")
    (m / "b").write_text("B")
    sh(f"mv '{m}/a' '{m}/b'")
    assert (m / "b").read_text() == "A" and not (m / "a").exists()
    sh(f"ln '{m}/b' '{m}/hard' && ln -s b '{m}/soft'")
    assert (m / "hard").stat().st_nlink == 2 and (m / "hard").stat().st_ino == (m / "b").stat().st_ino
    assert os.readlink(m / "soft") == "b" and (m / "soft").read_text() == "A"
    sh(f"chmod 640 '{m}/b' && chown 123:456 '{m}/b' && touch -d '2001-02-03 04:05:06' '{m}/b'")
    st = (m / "b").stat()
    assert oct(st.st_mode & 0o777) == oct(0o640) and (st.st_uid, st.st_gid) == (123, 456)
    assert time.gmtime(st.st_mtime)[:3] == (2001, 2, 3)
    # rm of an open file: reads go on until close
    (m / "open.txt").write_bytes(b"still here" * 1000)
    with open(m / "open.txt", "rb") as f:
        os.unlink(m / "open.txt")
        assert not (m / "open.txt").exists()
        assert f.read() == b"still here" * 1000
    # O_EXCL
    fd = os.open(m / "excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.close(fd)
    with pytest.raises(FileExistsError):
        os.open(m / "excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    # ENOTEMPTY, ENAMETOOLONG
    (m / "d" / "e").mkdir(parents=True)
    with pytest.raises(OSError) as exc:
        os.rmdir(m / "d")
    assert exc.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as exc:
        (m / ("x" * 256)).write_text("too long")
    assert exc.value.errno == errno.ENAMETOOLONG
    (m / ("y" * 255)).write_text("just fits")
    # odd names: spaces, newlines, backslashes, non-UTF-8 bytes
    odd = [b"with space", b"new\nline", b"back\\slash", b"latin1-\xe9\xff", b"tab\there"]
    for name in odd:
        with open(os.path.join(os.fsencode(m), name), "wb") as f:
            f.write(name * 3)
    assert set(odd) <= set(os.listdir(os.fsencode(m)))
    # a directory listed in several of readdir's catalog batches (200), one
    # ending exactly at a batch's end
    for n in (200, 401):
        (m / f"many{n}").mkdir()
        for i in range(n):
            (m / f"many{n}" / f"f{i}").touch()
        assert sorted(os.listdir(m / f"many{n}")) == sorted(f"f{i}" for i in range(n))
    # rename of a directory across directories, over an empty directory
    (m / "src" / "sub").mkdir(parents=True)
    (m / "src" / "sub" / "f").write_text("moved")
    (m / "dst").mkdir()
    (m / "dst" / "empty").mkdir()
    os.rename(m / "src" / "sub", m / "dst" / "empty")
    assert (m / "dst" / "empty" / "f").read_text() == "moved"
    with pytest.raises(OSError) as exc:
        os.rename(m / "dst", m / "dst" / "empty" / "inside")
    assert exc.value.errno == errno.EINVAL
    # user xattrs
    sh(f"setfattr -n user.origin -v https://example.org/ '{m}/b'")
    assert sh(f"getfattr --only-values -n user.origin '{m}/b'").stdout == b"https://example.org/"
    assert b"user.origin" in sh(f"getfattr -d '{m}/b'").stdout
    with pytest.raises(OSError) as exc:
        os.setxattr(m / "b", "user.webfs.refs", b"99")
    assert exc.value.errno == errno.EPERM
    # a name in no namespace Linux knows is refused as ext4 refuses it (else
    # cp -a / rsync -X out of the mount fail on it); trusted.* is kept
    proc = sh(f"setfattr -n foo.bar -v x '{m}/b'", check=False)
    assert proc.returncode != 0 and b"Operation not supported" in proc.stderr
    with pytest.raises(OSError) as exc:
        os.setxattr(m / "b", "foo.bar", b"x")
    assert exc.value.errno == errno.EOPNOTSUPP
    sh(f"setfattr -n trusted.kept -v t '{m}/b'")
    assert os.getxattr(m, "user.webfs.pid") == str(mounted.pid()).encode()     # the root's control xattrs
    # renameat2: RENAME_WHITEOUT (4) is refused (EINVAL, as a filesystem
    # without whiteouts), not done as a plain rename; NOREPLACE and EXCHANGE work
    (m / "w1").write_text("1")
    (m / "w2").write_text("2")
    assert _renameat2(m / "w1", m / "w2", 4) == errno.EINVAL
    assert _renameat2(m / "w1", m / "w3", 4) == errno.EINVAL
    assert (m / "w1").read_text() == "1" and (m / "w2").read_text() == "2" and not (m / "w3").exists()
    assert _renameat2(m / "w1", m / "w2", 1) == errno.EEXIST
    assert _renameat2(m / "w1", m / "w2", 2) == 0
    assert (m / "w1").read_text() == "2" and (m / "w2").read_text() == "1"
    mounted.remount()
    listed = sh(f"getfattr -d -m - '{m}/b'").stdout
    assert b"trusted.kept" in listed and b"foo.bar" not in listed
    assert (m / "hard").read_text() == "A" and os.readlink(m / "soft") == "b"
    for name in odd:
        with open(os.path.join(os.fsencode(m), name), "rb") as f:
            assert f.read() == name * 3
    assert os.getxattr(m / "b", "user.origin") == b"https://example.org/"
    assert (m / "b").stat().st_uid == 123
    mounted.umount()
    assert webfs("fsck", mounted.disks[0]).returncode == 0


def _renameat2(old: Path, new: Path, flags: int) -> int:
    """renameat2(2) through libc: 0, or its errno."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd = -100
    if libc.renameat2(at_fdcwd, os.fsencode(old), at_fdcwd, os.fsencode(new), ctypes.c_uint(flags)) == 0:
        return 0
    return ctypes.get_errno()


def test_the_webfs_tree_shows_blocks_and_is_hidden(mounted):
    page = b"<html>visible as a block</html>" * 30
    (mounted.mnt / "p.html").write_bytes(page)
    sig = os.getxattr(mounted.mnt / "p.html", "user.webfs.signature").decode()
    assert ".webfs" not in os.listdir(mounted.mnt)
    block = mounted.mnt / ".webfs" / "blocks" / sig[:2] / sig[2:4] / sig[4:]
    assert block.read_bytes() == page
    assert sig[4:] in os.listdir(block.parent)
    assert sh(f"find '{mounted.mnt}/.webfs' -type f | wc -l").stdout.strip() == b"1"
    with pytest.raises(OSError):
        block.write_bytes(b"no")
    assert os.getxattr(mounted.mnt / "p.html", "user.webfs.codec") == b"gzip"
    assert int(os.getxattr(mounted.mnt / "p.html", "user.webfs.disk")) in range(4)
    du = sh(f"du -s --apparent-size --block-size=1 '{mounted.mnt}'").stdout.split()[0]
    assert int(du) < 2 * len(page) + 4096                   # du does not walk .webfs


def test_second_mount_is_refused_and_a_killed_daemon_leaves_no_stale_lock(mounted, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    proc = webfs("mount", mounted.disks[1], other, check=False)
    assert proc.returncode == 1 and b"in use" in proc.stderr
    proc = webfs("fsck", mounted.disks[2], check=False)
    assert proc.returncode == 8 and b"mount point" in proc.stderr      # not run
    # the commands that take DISK|MOUNTPOINT refuse a disk of a mounted archive and
    # name the mount, but for status and stream, which only read (webfs(1))
    for cmd in (["scrub"], ["rebalance"], ["heat"], ["sync"], ["search", "x"]):
        proc = webfs(*cmd, mounted.disks[0], check=False)
        assert proc.returncode == 1 and f"webfs mount on {mounted.mnt}".encode() in proc.stderr, (cmd, proc.stderr)
    (mounted.mnt / "c").mkdir()
    (mounted.mnt / "c" / "p.html").write_bytes(b"<html>committed</html>")
    webfs("sync", mounted.mnt)
    assert b"present" in webfs("status", mounted.disks[0]).stdout
    assert b"p.html" in webfs("stream", mounted.disks[0]).stdout
    # fsck of the mount point (or a path in it) says fsck wants an unmounted
    # archive's disk and names it, not "not a webfs disk"
    (mounted.mnt / "sub").mkdir()
    for target in (mounted.mnt, mounted.mnt / "sub"):
        proc = webfs("fsck", target, check=False)
        assert proc.returncode == 8 and b"not a webfs disk" not in proc.stderr
        assert b"in use" in proc.stderr and b"unmounted" in proc.stderr
        assert f"'webfs fsck {mounted.disks[0]}'".encode() in proc.stderr
    (mounted.mnt / "kept.txt").write_text("closed before the kill")
    pid = mounted.pid()
    os.kill(pid, signal.SIGKILL)
    wait_dead(pid)
    unmount(mounted.mnt)
    mounted.mount()
    assert (mounted.mnt / "kept.txt").read_text() == "closed before the kill"


def test_read_only_mount(mounted):
    (mounted.mnt / "x").write_text("x")
    mounted.remount("ro")
    assert (mounted.mnt / "x").read_text() == "x"
    with pytest.raises(OSError) as exc:
        (mounted.mnt / "y").write_text("y")
    assert exc.value.errno == errno.EROFS


@pytest.fixture
def mount_helpers():
    """mount.webfs and mount.fuse.webfs where mount(8) looks for them, as `make
    install` puts them, pointing at this run's webfs. /sbin is shared by every
    test run on the machine (several clones at once): the fixture holds a lock
    while its links are there, and puts back whatever links it replaced; an
    installed helper that is not a link is left as it is."""
    import fcntl
    with open("/run/lock/webfs-tests-mount-helpers", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ours = Path(sys.executable).parent / "mount.webfs"
        saved = {}
        for name in ("mount.webfs", "mount.fuse.webfs"):
            path = Path("/sbin") / name
            if path.is_symlink():
                saved[path] = os.readlink(path)
                path.unlink()
            elif path.exists():
                continue
            else:
                saved[path] = None
            path.symlink_to(ours)
        try:
            yield
        finally:
            for path, was in saved.items():
                path.unlink()
                if was is not None:
                    path.symlink_to(was)


@pytest.mark.parametrize("fstype", ["webfs", "fuse.webfs"])
def test_mount_t_and_fstab(tmp_path, mount_helpers, fstype):
    disks = [tmp_path / f"d{i}" for i in range(3)]
    webfs("mkfs", *disks)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    sh(f"mount -t {fstype} -o store_mode=regular '{disks[1]}' '{mnt}'")
    try:
        (mnt / "page.html").write_text("<html>mounted by mount(8)</html>")
    finally:
        unmount(mnt)
    fstab = tmp_path / "fstab"
    fstab.write_text(f"{disks[0]} {mnt} {fstype} defaults,noauto,ro 0 0\n")
    sh(f"mount -T '{fstab}' '{mnt}'")
    try:
        assert (mnt / "page.html").read_text() == "<html>mounted by mount(8)</html>"
        assert b"ro," in sh(f"grep ' {mnt} ' /proc/mounts").stdout
    finally:
        unmount(mnt)
    proc = sh(f"mount -t {fstype} -o nonsense=1 '{disks[0]}' '{mnt}'", check=False)
    assert proc.returncode != 0 and b"unknown mount option" in proc.stderr


def test_many_readers_at_once(mounted, corpus):
    src = corpus / "crawl-001"
    sh(f"cp -r '{src}' '{mounted.mnt}/c'")
    files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    mounted.remount()                                  # cold: nothing in the kernel's cache
    errors = []

    def reader(seed):
        rng = random.Random(seed)
        for rel in rng.sample(files, 150):
            with open(mounted.mnt / "c" / rel, "rb") as f:
                if f.read() != (src / rel).read_bytes():
                    errors.append(rel)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors


def test_allow_other(tmp_path):
    import tempfile
    m = Mounted(tmp_path, disks=2)
    m.umount()
    m.mnt = Path(tempfile.mkdtemp(prefix="webfs-allow-other-"))   # pytest's tmp is root-only
    os.chmod(m.mnt, 0o755)
    m.mount()
    try:
        (m.mnt / "page.html").write_text("for everyone")
        os.chmod(m.mnt / "page.html", 0o644)
        proc = sh(f"runuser -u nobody -- cat '{m.mnt}/page.html'", check=False)
        assert proc.returncode != 0                     # FUSE keeps other users out by default
        m.remount("allow_other")
        assert sh(f"runuser -u nobody -- cat '{m.mnt}/page.html'").stdout == b"for everyone"
        proc = sh(f"runuser -u nobody -- sh -c 'echo x > {m.mnt}/mine'", check=False)
        assert proc.returncode != 0                     # permissions still apply (default_permissions)
    finally:
        m.umount()
        m.mnt.rmdir()


def test_small_files_are_stored_on_the_loop_and_a_large_or_slow_one_in_a_worker(mounted, tmp_path):
    """cp -r and rsync -a of small files: their closes store them on the event
    loop (``stored-on-loop`` in user.webfs.requests), with no hand-off each
    (a close that finds the mount's periodic work in a worker still makes
    one); a file past 64 KiB, and any file on a disk with a delay (a stand-in
    for a slow disk), goes to a worker. Every file reads back identical after
    a remount."""
    src = tmp_path / "src"
    rng = random.Random(5)
    for d in range(4):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(50):
            (src / f"d{d}" / f"p{i}.html").write_bytes(rng.randbytes(rng.randrange(1, 8192)))
    (src / "big.bin").write_bytes(rng.randbytes(100_000))
    mnt = mounted.mnt
    counts = lambda what: json.loads(os.getxattr(mnt, f"user.webfs.{what}"))
    sh(f"cp -r '{src}' '{mnt}/c'")
    here, hops = counts("requests").get("stored-on-loop", 0), counts("handoffs").get("flush", 0)
    assert here + hops == 201 and here >= 100 and hops >= 1, (here, hops)    # periodic work away: a hop
    sh(f"rsync -a '{src}/' '{mnt}/r/'")
    assert counts("requests").get("stored-on-loop", 0) - here >= 100
    mounted.remount("disk_delay=0:0.001")
    before = counts("handoffs").get("flush", 0)
    sh(f"cp -r '{src}/d0' '{mnt}/slow'")
    assert counts("requests").get("stored-on-loop", 0) == 0
    assert counts("handoffs").get("flush", 0) - before == 50
    mounted.remount()
    for top in ("c", "r"):
        sh(f"diff -r '{src}' '{mnt}/{top}'")
    sh(f"diff -r '{src}/d0' '{mnt}/slow'")


def test_a_file_made_and_closed_in_one_commit_is_one_journal_line(tmp_path):
    """cp's create and close of a file fall in one commit: its JOURNAL holds
    the closed file's + line alone (the close's takes the create's place), and
    every reader of the disks after a kill -9 finds the file whole; a rename in
    between keeps both names' lines, in order."""
    m = Mounted(tmp_path)
    try:
        (m.mnt / "d").mkdir()
        src = tmp_path / "page.html"
        src.write_bytes(b"<p>one</p>" * 300)
        sh(f"cp '{src}' '{m.mnt}/d/f'")
        with open(m.mnt / "d" / "moved", "wb") as first:       # made as /d/moved, renamed, closed
            first.write(b"first " * 100)
            os.rename(m.mnt / "d" / "moved", m.mnt / "d" / "g")
            with open(m.mnt / "d" / "moved", "wb") as second:  # a new file under the old name
                second.write(b"second " * 100)
        journal = next((d / "meta" / "JOURNAL").read_bytes() for d in m.disks     # (on two disks)
                       if (d / "meta" / "JOURNAL").exists())
        plus = [line.split(b"\t") for line in journal.splitlines() if line.startswith(b"+\t")]
        f_lines = [fields for fields in plus if fields[-1] == b"/d/f"]
        assert len(f_lines) == 1 and f_lines[0][1] != b"-" and f_lines[0][2] == b"3000", f_lines
        assert [fields[-1] for fields in plus if fields[-1] in (b"/d/moved", b"/d/g")] == \
            [b"/d/moved", b"/d/moved", b"/d/g"], plus
        pid = m.pid()
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid)
        unmount(m.mnt)
        out = tmp_path / "out"
        sh(f"sh '{Path(__file__).parent.parent / 'tools' / 'webfs-recover'}' "
           f"{' '.join(map(str, m.disks))} '{out}'")
        m.mount()
        for root in (out, m.mnt):
            assert (root / "d" / "f").read_bytes() == src.read_bytes()
            assert (root / "d" / "g").read_bytes() == b"first " * 100
            assert (root / "d" / "moved").read_bytes() == b"second " * 100
    finally:
        m.umount()


def test_a_bad_option_is_refused_naming_it(tmp_path):
    """-o disk_delay of a disk the archive does not have is refused, in one
    line (it mounted without a word); a number out of range names its own
    option, not three."""
    disks = [tmp_path / f"d{i}" for i in range(4)]
    webfs("mkfs", *disks)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for opt, says in (("disk_delay=9:1", "disk_delay names disk 9, which the archive does not have"),
                      ("disk_delay=0:0.1,4:1", "disk_delay names disk 4"),
                      ("piece_cache=-1", "piece_cache must be 0 or more"),
                      ("read_ahead_kb=-5", "read_ahead_kb must be 0 or more"),
                      ("heat_k=1", "heat_k must be 2 or more")):
        proc = webfs("mount", "-o", opt, disks[0], mnt, check=False)
        err = proc.stderr.decode()
        if not proc.returncode:
            unmount(mnt)
        assert proc.returncode != 0 and says in err and len(err.strip().splitlines()) == 1, (opt, err)
        assert [o for o in ("heat_k", "piece_cache", "read_ahead_kb") if o in err] == [opt.split("=")[0]] \
            or opt.startswith("disk_delay"), (opt, err)
        assert not os.path.ismount(mnt)
    webfs("mount", "-o", "disk_delay=3:0.001", disks[0], mnt)
    unmount(mnt)
