"""webfs import: trees into a mount (the daemon reads them) or into DISK:/PATH,
checked against cp -a into a plain directory, with the real command (killed
with kill -9 mid-way: t5_import)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from conftest import BIN, Mounted, eventually, sh, strip_digests, tmpfs_disks, unmount, webfs, webfs_here
from records_helpers import read_manifest
from webfs import admin
from webfs.admincommands import ADMIN_COMMANDS
from webfs.assembly import OpenArchive
from webfs import ingest
from webfs.signature import signature as xxh3

DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]   # root that obeys modes


def snapshot(root: bytes) -> dict:
    """What cp -a keeps, for every path below root: type and mode, owner, size,
    mtime and atime, symlink target, xattrs, and which names share an inode."""
    out, inodes = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            is_dir = os.path.isdir(p) and not os.path.islink(p)
            entry = {"mode": oct(st.st_mode), "uid": st.st_uid, "gid": st.st_gid,
                     "size": 0 if is_dir else st.st_size, "mtime": st.st_mtime_ns,
                     "atime": None if is_dir else st.st_atime_ns}
            if os.path.islink(p):
                entry["target"] = os.readlink(p)
            else:
                entry["xattrs"] = sorted((n, os.getxattr(p, n)) for n in os.listxattr(p)
                                         if n.startswith("user."))
            if not is_dir:
                inodes.setdefault(st.st_ino, []).append(rel)
            out[rel] = entry
    links = sorted(sorted(v) for v in inodes.values() if len(v) > 1)
    return {"entries": out, "links": links}


def diff_r(a: Path, b: Path) -> None:
    """diff -r finds no difference (it calls two FIFOs different: they are compared by snapshot)."""
    proc = sh(f"diff -r --no-dereference '{a}' '{b}'", check=False)
    lines = [ln for ln in proc.stdout.decode(errors="replace").splitlines()
             if not re.fullmatch(r"File .* is a fifo while file .* is a fifo", ln)]
    assert proc.returncode in (0, 1) and not lines, lines


def assert_same(got: dict, want: dict) -> None:
    """Two snapshots agree; if not, say which paths and fields differ."""
    diffs = [(p, k, got["entries"].get(p, {}).get(k), v)
             for p, e in want["entries"].items() for k, v in e.items()
             if got["entries"].get(p, {}).get(k) != v]
    assert not diffs and got == want, diffs[:10] or (got["links"], want["links"])


def make_tree(src: Path) -> None:
    """Hard links, symlinks, odd names, empty files, a FIFO, xattrs, owners,
    modes and old times, a file of several pieces."""
    b = os.fsencode(src)
    (src / "site" / "img").mkdir(parents=True)
    (src / "site" / "index.html").write_text("<html>index</html>\n" * 100)
    (src / "site" / "copy.html").write_text("<html>index</html>\n" * 100)     # a duplicate
    (src / "site" / "img" / "a.png").write_bytes(os.urandom(30000))
    os.link(src / "site" / "index.html", src / "site" / "hard.html")
    os.link(src / "site" / "index.html", src / "site" / "img" / "hard2.html")   # 3 names
    os.symlink("index.html", src / "site" / "rel-link")
    os.symlink("/nonexistent/target", src / "site" / "dangling")
    os.symlink("img", src / "site" / "dirlink")
    (src / "site" / "empty").write_bytes(b"")
    os.mkfifo(src / "site" / "fifo")
    (src / "site" / "with space.txt").write_text("space")
    (src / "site" / "new\nline").write_text("newline")
    with open(os.path.join(b, b"site", b"bad-\xff\xfe-utf8"), "wb") as f:
        f.write(b"latin-1 name")
    (src / "site" / ("n" * 255)).write_text("longest name")
    (src / "big.bin").write_bytes(os.urandom(9 << 20))                          # 3 pieces
    os.setxattr(src / "site" / "index.html", "user.mime", b"text/html")
    os.setxattr(src / "site" / "img", "user.kind", b"images")
    os.chown(src / "site" / "img" / "a.png", 1234, 5678)
    os.lchown(src / "site" / "rel-link", 4321, 8765)
    os.chmod(src / "site" / "with space.txt", 0o640)
    (src / "empty-dir").mkdir(mode=0o700)
    set_times(src)


def set_times(src: Path) -> None:
    """Old mtimes, and atimes an hour ahead (after their ctime, and within a
    day), so that reading the tree (cp -a, the import) leaves them (relatime)."""
    now = time.time_ns() + 3600 * 10**9
    for i, p in enumerate(sorted(src.rglob("*"), reverse=True)):
        os.utime(p, ns=(now + i, 1_400_000_000_987_654_321 + i), follow_symlinks=False)
    os.utime(src, ns=(now, 1_400_000_000_000_000_001))


def import_(*args, check=False, **kw):
    proc = webfs("import", *args, check=False, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace"))
    return proc


def test_import_keeps_what_cp_a_keeps_and_a_rerun_imports_nothing(mounted, tmp_path):
    src = tmp_path / "src"
    make_tree(src)
    want = snapshot(os.fsencode(src))
    plain = tmp_path / "plain"
    plain.mkdir()
    sh(f"cp -a '{src}' '{plain}/'")
    os.listdir(mounted.mnt)                       # the kernel has the root's attributes cached
    root_nlink = os.stat(mounted.mnt).st_nlink
    assert not (mounted.mnt / "crawls").exists()  # ... and has looked the new name up in vain
    out = import_(src, mounted.mnt / "crawls", check=True)
    text = out.stdout.decode()
    assert "problem" not in text and "imported 9 files" in text and "4 directories" in text, text
    assert "2 hard links" in text and "3 symlinks" in text and "1 special files" in text, text
    assert os.stat(mounted.mnt).st_nlink == root_nlink + 1      # the new directory shows at once
    assert (mounted.mnt / "crawls" / "src" / "site" / "index.html").is_file()
    got = snapshot(os.fsencode(mounted.mnt / "crawls" / "src"))
    assert_same(got, snapshot(os.fsencode(plain / "src")))
    assert_same(got, want)
    diff_r(plain / "src", mounted.mnt / "crawls" / "src")
    inos = {os.stat(mounted.mnt / "crawls" / "src" / "site" / p).st_ino
            for p in ("index.html", "hard.html", "img/hard2.html")}
    assert len(inos) == 1 and os.stat(mounted.mnt / "crawls/src/site/index.html").st_nlink == 3
    # A second run finds everything there.
    blocks = json.loads(webfs("status", "--json", mounted.mnt).stdout)["blocks"]
    again = import_(src, mounted.mnt / "crawls", check=True).stdout.decode()
    assert again.startswith("nothing new"), again
    assert json.loads(webfs("status", "--json", mounted.mnt).stdout)["blocks"] == blocks
    # A changed file is replaced in place; the kernel's cached pages are dropped.
    page = mounted.mnt / "crawls" / "src" / "site" / "copy.html"
    assert page.read_text().startswith("<html>index")
    (src / "site" / "copy.html").write_text("changed since\n")
    again = import_(src, mounted.mnt / "crawls", check=True).stdout.decode()
    assert "1 changed files replaced" in again, again
    assert page.read_text() == "changed since\n"
    mounted.umount()
    assert webfs("fsck", mounted.disks[0], check=False).returncode == 0


def test_trailing_slash_imports_the_contents(mounted, tmp_path):
    src = tmp_path / "crawl"
    (src / "a").mkdir(parents=True)
    (src / "a" / "p.html").write_text("p")
    import_(f"{src}/", mounted.mnt / "x" / "y", check=True)
    assert (mounted.mnt / "x" / "y" / "a" / "p.html").read_text() == "p"
    assert not (mounted.mnt / "x" / "y" / "crawl").exists()
    assert os.stat(mounted.mnt / "x" / "y").st_mtime_ns == os.stat(src).st_mtime_ns
    mounted.remount("ro")
    proc = import_(src, mounted.mnt)
    assert proc.returncode == 1 and b"read-only" in proc.stderr


def test_what_cannot_be_imported_is_reported_and_the_rest_goes_on(tmp_path):
    """An unreadable file and directory (a daemon without CAP_DAC_OVERRIDE, so
    modes hold for it as for anyone), and a name webfs keeps for itself."""
    src = tmp_path / "src"
    (src / "closed").mkdir(parents=True)
    (src / "closed" / "inside").write_text("x")
    (src / "secret").write_text("no")
    (src / "fine").write_text("yes")
    (src / ".webfs").mkdir()
    os.chmod(src / "secret", 0)
    os.chmod(src / "closed", 0)
    m = Mounted.__new__(Mounted)
    m.root, m.disks, m.mnt, m.options = tmp_path, [tmp_path / f"d{i}" for i in range(3)], tmp_path / "mnt", ""
    m.mnt.mkdir()
    webfs("mkfs", *m.disks)
    subprocess.run([*DROP_DAC, str(BIN / "webfs"), "mount", str(m.disks[0]), str(m.mnt)], check=True)
    try:
        proc = import_(f"{src}/", src / "missing", m.mnt)
        out, err = proc.stdout.decode(), proc.stderr.decode()
        assert proc.returncode == 4, out + err
        assert f"{src}/secret: Permission denied (EACCES)" in out
        assert f"{src}/closed: Permission denied (EACCES)" in out
        assert f"{src}/.webfs: the name .webfs in the root is webfs's own" in out
        assert f"{src}/missing: No such file or directory (ENOENT)" in out
        assert "4 problem(s)" in out
        assert (m.mnt / "fine").read_text() == "yes"
        assert (m.mnt / "closed").is_dir()              # made, as cp -a makes it
        assert not (m.mnt / "secret").exists()
    finally:
        unmount(m.mnt)


def test_a_name_too_long_is_reported(store, tmp_path, monkeypatch):
    """No local filesystem holds a 256-byte name, so the walk is shown one."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok").write_text("ok")
    real = os.scandir

    class Fake:
        def __init__(self, name, path):
            self.name, self.path = name, path

        def is_dir(self, follow_symlinks=True):
            return False

    class Listing:
        def __init__(self, d):
            self.entries = list(real(d)) + [Fake(b"L" * 256, os.path.join(d, b"L" * 256))]

        def __enter__(self):
            return iter(self.entries)

        def __exit__(self, *exc):
            return False

    def scandir(d):
        # ingest walks bytes paths; the store's own listings (str) stay real
        return Listing(d) if isinstance(d, bytes) else real(d)

    monkeypatch.setattr(ingest.os, "scandir", scandir)
    notes = []
    result = ADMIN_COMMANDS["import"](OpenArchive(store), admin.Progress(lambda k, n, t, w: k == "note" and notes.append(w)),
                                        sources=[str(src) + "/"], dest="/d")
    assert result.exit_code == 4
    assert len(notes) == 1 and "File name too long (ENAMETOOLONG)" in notes[0], notes
    assert result.figures["files"] == 1


def test_names_are_made_without_waiting_for_a_signature_under_the_catalog_lock(store, tmp_path):
    """The store's lock order is a signature's lock, then the catalog's. An
    import makes a batch of names under the catalog lock; the blocks its
    symlinks' targets and hard links need (a signature lock each) are taken
    before it, so a writer that holds such a signature's lock and then asks
    for the catalog's (a mount storing the same bytes) gets it: no deadlock.
    Then a rerun with a new hard link to a file already imported: one more
    reference to its block."""
    import threading
    from webfs.signature import signature
    src = tmp_path / "src"
    src.mkdir()
    (src / "page.html").write_bytes(b"<html>a page</html>")
    os.symlink("some/target", src / "lnk")
    done = {}
    with store.block_lock(signature(b"some/target")):
        t = threading.Thread(target=lambda: done.update(r=ADMIN_COMMANDS["import"](
            OpenArchive(store), admin.Progress(), sources=[str(src) + "/"], dest="/d")))
        t.start()
        eventually(lambda: store._sig_locks.users(signature(b"some/target")) == 2,
                   "the import waiting for the signature's lock held here")
        got = store.catalog.lock.acquire(timeout=60)
        if got:
            store.catalog.lock.release()
    t.join(60)
    assert got, "the import held the catalog lock while it waited for a signature's"
    assert done["r"].exit_code == 0 and done["r"].figures["symlinks"] == 1
    os.link(src / "page.html", src / "zz.html")         # walked after the name it links to
    r = ADMIN_COMMANDS["import"](OpenArchive(store), admin.Progress(), sources=[str(src) + "/"], dest="/d")
    assert r.exit_code == 0 and r.figures["hardlinks"] == 1, r.figures
    [row] = store.catalog.blocks_with_sigs([signature(b"<html>a page</html>")])[signature(b"<html>a page</html>")]
    assert row.refs == 2


def test_import_into_an_unmounted_archive_then_mount(tmp_path, corpus):
    m = Mounted.__new__(Mounted)
    m.root, m.disks, m.mnt, m.options = tmp_path, [tmp_path / f"disk{i}" for i in range(4)], tmp_path / "mnt", ""
    m.mnt.mkdir()
    webfs("mkfs", *m.disks)
    src = corpus / "crawl-001"
    out = import_(src, f"{m.disks[1]}:/crawls", check=True).stdout.decode()
    assert "imported" in out
    again = import_(src, f"{m.disks[2]}:/crawls", check=True).stdout.decode()
    assert again.startswith("nothing new"), again
    assert webfs("fsck", m.disks[0], check=False).returncode == 0
    # The archive's own disks are not walked (they would grow as they are read).
    proc = import_(tmp_path, f"{m.disks[0]}:/self")
    assert proc.returncode == 4 and proc.stdout.decode().count("is part of the archive") == 4
    m.mount()
    try:
        sh(f"diff -r '{src}' '{m.mnt}/crawls/crawl-001'")
        assert snapshot(os.fsencode(m.mnt / "crawls" / "crawl-001"))["entries"].keys() == \
            snapshot(os.fsencode(src))["entries"].keys()
    finally:
        m.umount()
    # The plain-text records know every name too (recovery without the catalog).
    manifest = read_manifest(m.disks[1] / "meta")     # the record disk beside the catalog's
    assert manifest.count(b"\t/crawls/crawl-001/") == sum(1 for _ in src.rglob("*"))


def test_an_import_stops_before_the_catalog_s_disk_fills_and_a_rerun_finishes(tmp_path, corpus):
    """The disk that holds the catalog is too small for the import's names:
    the import stops with a clear message while that disk still has room,
    gives back what it stored (fsck finds nothing), and once there is room a
    rerun imports the rest, identical to the source."""
    with tmpfs_disks(tmp_path, 1, "6m", plain=2) as disks:
        src = corpus / "crawl-001"
        proc = import_(src, f"{disks[0]}:/crawls")
        said = proc.stderr.decode()
        assert proc.returncode == 1 and "the disk that holds the catalog" in said and "nearly full" in said, said
        assert os.statvfs(disks[0]).f_bavail > 0
        fsck = webfs("fsck", disks[0], check=False)
        assert fsck.returncode == 0 and b" 0 problem(s)" in fsck.stdout, fsck.stdout[-2000:]
        subprocess.run(["mount", "-o", "remount,size=64m", str(disks[0])], check=True)
        import_(src, f"{disks[0]}:/crawls", check=True)
        assert webfs("fsck", disks[0], check=False).returncode == 0
        # Under the figure new names are refused at (half of 16 MiB, the reserve
        # of 64 MiB), with room for the import's own writes: one with nothing
        # new to name still ends well.
        free = os.statvfs(disks[0]).f_bavail * os.statvfs(disks[0]).f_frsize
        sh(f"dd if=/dev/zero of={disks[0]}/filler bs=64k count={(free - (6 << 20)) >> 16}")
        assert "NEARLY FULL" in webfs("status", disks[0]).stdout.decode()
        again = import_(src, f"{disks[0]}:/crawls", check=True).stdout.decode()
        assert again.startswith("nothing new"), again
        os.unlink(disks[0] / "filler")
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        webfs("mount", disks[0], mnt)
        try:
            sh(f"diff -r '{src}' '{mnt}/crawls/crawl-001'")
        finally:
            unmount(mnt)


def test_the_same_tree_twice_stores_no_new_block(mounted, corpus):
    src = corpus / "crawl-001"
    import_(src, mounted.mnt / "one", check=True)
    before = json.loads(webfs("status", "--json", mounted.mnt).stdout)
    out = import_(src, mounted.mnt / "two", check=True).stdout.decode()
    after = json.loads(webfs("status", "--json", mounted.mnt).stdout)
    assert after["blocks"] == before["blocks"]
    assert after["references"] > before["references"]
    assert re.search(r" 0 new blocks", out), out
    sh(f"diff -r '{mounted.mnt}/one/crawl-001' '{mounted.mnt}/two/crawl-001'")


GOOD, EVIL = b"<html>the real page</html>\n", b"<html>a hostile pag</html>\n"
FORGED_XXH3 = f'''
import xxhash
_real = xxhash.xxh3_128_hexdigest
def _forged(data):
    """xxh3-128 with one forged collision: the hostile page has the real one's signature."""
    if len(data) == {len(EVIL)} and bytes(data) == {EVIL!r}:
        return _real({GOOD!r})
    return _real(data)
xxhash.xxh3_128_hexdigest = _forged
'''


def test_a_forged_signature_collision_is_never_merged(tmp_path, monkeypatch):
    """Every webfs process of this test (the mount's daemon, the import
    commands) computes xxh3-128 with a forged collision: a hostile page with
    the signature and size of a real one (sitecustomize patches the
    signature). Crawl 2 brings the hostile page after crawl 1 stored the real
    one, and the real one again: `webfs import` gives the hostile page a block
    of its own (~1) and adds the real one's reference to the real block;
    every file reads back its own bytes, into a mount and into DISK:/, also
    after the archive is made as versions before content digests wrote it."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FORGED_XXH3)
    monkeypatch.setenv("PYTHONPATH", str(hook))
    for crawl, files in (("crawl-1", {"page.html": GOOD}),
                         ("crawl-2", {"page.html": EVIL, "copy.html": GOOD, "again.html": EVIL})):
        (tmp_path / "src" / crawl).mkdir(parents=True)
        for name, data in files.items():
            (tmp_path / "src" / crawl / name).write_bytes(data)
    (tmp_path / "a").mkdir()
    m = Mounted(tmp_path / "a")
    try:
        for crawl in ("crawl-1", "crawl-2"):
            import_(tmp_path / "src" / crawl, m.mnt, check=True)
        page2 = m.mnt / "crawl-2" / "page.html"
        assert os.getxattr(page2, "user.webfs.signature").decode() == xxh3(GOOD) + "~1"   # forged, really
        assert os.getxattr(m.mnt / "crawl-2" / "copy.html", "user.webfs.signature").decode() == xxh3(GOOD)
        status = json.loads(webfs("status", "--json", m.mnt).stdout)
        assert (status["blocks"], status["references"]) == (2, 4)
    finally:
        m.umount()
    strip_digests(m.disks)
    import_(tmp_path / "src", f"{m.disks[0]}:/old", check=True)
    m.mount()
    try:
        sh(f"diff -r '{tmp_path}/src/crawl-1' '{m.mnt}/crawl-1'")
        sh(f"diff -r '{tmp_path}/src/crawl-2' '{m.mnt}/crawl-2'")
        sh(f"diff -r '{tmp_path}/src' '{m.mnt}/old/src'")
        status = json.loads(webfs("status", "--json", m.mnt).stdout)
        assert (status["blocks"], status["references"]) == (2, 8)
    finally:
        m.umount()
    assert webfs("fsck", m.disks[0], check=False).returncode == 0


def test_an_import_into_a_mount_loads_no_click_and_prints_what_clicks_path_prints(mounted, tmp_path):
    """webfs.quickimport runs an import into a mount without click, webfs.cli
    or webfs.admin (some 0.15 s of CPU of every such command: webfs-internals(7),
    CRAWL 2 THROUGH IMPORT, AGAIN) and prints what click's path (webfs.cli, run
    here) prints: the summary, the problems on stderr and exit status 4, the
    JSON, a daemon's refusal; what it leaves to click is click's, message and all."""
    from t2_query import imported_modules
    m = mounted.mnt
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "page.html").write_text("<p>page</p>")
    (src / "other.html").write_text("<p>other</p>")
    (m / "file").write_text("not a directory")
    quick_env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")

    def same(args, status, quick_path=True):
        quick = webfs("import", *args, check=False, env=quick_env)
        loaded = imported_modules(quick)
        assert ("click" in loaded) != quick_path and ("webfs.cli" in loaded) != quick_path, args
        assert quick_path is ("webfs.admin" not in loaded), args
        full = webfs_here("import", *[str(a).replace("/q", "/c") for a in args], check=False)
        err = b"".join(ln for ln in quick.stderr.splitlines(True) if not ln.startswith(b"import time:"))

        def masked(out):        # the seconds and rates of the summary line
            return re.sub(rb"[0-9.]+", b"N", out.replace(b"/c", b"/q"))
        assert (quick.returncode, masked(quick.stdout), masked(err)) == \
            (status, masked(full.stdout), masked(full.stderr)), args
        return quick

    assert b"imported 2 files" in same([src, f"{m}/q/"], 0).stdout
    assert same([src, f"{m}/q/"], 0).stdout == b"nothing new: all 4 entries were already there\n"
    assert json.loads(same(["--json", f"{src}/", f"{m}/q/x/"], 0).stdout)["figures"]["files"] == 2
    problem = same([tmp_path / "no\x1b[1mwhere", f"{m}/q/"], 4)        # the daemon shows the escape
    assert b"no\\x1b[1mwhere: No such file or directory" in problem.stderr
    assert b"webfs: /file: not a directory" in same([src, f"{m}/file"], 1).stderr
    # Left to click: a source in the mount itself, an option it does not read.
    assert b"is in the mount itself" in same([f"{m}/file", f"{m}/q/"], 1, quick_path=False).stderr
    same(["--", src, f"{m}/q/"], 0, quick_path=False)
