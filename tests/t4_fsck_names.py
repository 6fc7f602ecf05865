"""fsck's pass over the names (webfs.commands.names): a catalog whose tree is
broken the ways a bug or a damaged catalog can break it (a name of an inode
that is not there, directories that hold each other, an inode with links and
no name, wrong link counts) is found read-only, mended with --repair without
losing a stored page, and the MANIFEST written after says the same as the
catalog. The damage is made by editing the unmounted catalog with sqlite3."""
from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
import urllib.parse

import pytest

from conftest import Mounted, sh, webfs
from webfs.catalog import catalog_path


def _fsck(m: Mounted, *args: str) -> tuple[int, str]:
    proc = webfs("fsck", *args, str(m.disks[0]), check=False)
    out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    assert "Traceback" not in out, out
    return proc.returncode, out


def _edit(m: Mounted, *statements: tuple, postgres=None) -> None:
    """Run statements of integer arguments on the unmounted archive's catalog."""
    if postgres is not None:
        conf = (m.disks[0] / "webfs.conf").read_text()
        url = next(line.split("=", 1)[1].strip() for line in conf.splitlines() if line.startswith("catalog_url"))
        db = urllib.parse.urlsplit(url).path.strip("/")
        postgres.psql(db, "; ".join(sql.replace("?", "%d") % args for sql, args in statements))
        return
    db = sqlite3.connect(catalog_path(str(m.disks[0])))
    for sql, args in statements:
        db.execute(sql, args)
    db.commit()
    db.close()


@contextmanager
def _mounted_again(m: Mounted):
    m.mount()
    try:
        yield m.mnt
    finally:
        m.umount()


def _ino(path) -> int:
    return os.stat(path).st_ino


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_a_broken_tree_is_found_then_mended_with_every_page_kept(tmp_path, engine, request):
    postgres = request.getfixturevalue("postgres") if engine == "postgresql" else None
    m = Mounted(tmp_path, mkfs_args=("--catalog", postgres.url(postgres.new_database())) if postgres else ())
    (m.mnt / "d").mkdir()
    (m.mnt / "d" / "f").write_bytes(b"page f\n" * 300)
    (m.mnt / "g").write_bytes(b"page g\n" * 40)
    os.link(m.mnt / "g", m.mnt / "d" / "g2")
    (m.mnt / "e").mkdir()
    (m.mnt / "e" / "h").write_bytes(b"page h\n" * 20)
    (m.mnt / "c1" / "c2").mkdir(parents=True)
    (m.mnt / "c1" / "c2" / "k").write_bytes(b"page k\n" * 9)
    f, e, g = _ino(m.mnt / "d" / "f"), _ino(m.mnt / "e"), _ino(m.mnt / "g")
    c1, c2 = _ino(m.mnt / "c1"), _ino(m.mnt / "c1" / "c2")
    m.umount()
    _edit(m, ("DELETE FROM inodes WHERE id=?", (f,)),                  # d/f names nothing
          ("DELETE FROM dentries WHERE inode=?", (e,)),                # e: links and no name
          ("UPDATE inodes SET nlink=5 WHERE id=?", (g,)),              # g: 5 links, 2 names
          ("UPDATE dentries SET parent=? WHERE inode=?", (c2, c1)),    # c1 in c2 in c1
          postgres=postgres)

    code, out = _fsck(m)
    assert code == 4, out
    for said in (f"dangling-name: /d/f: names inode {f}", f"cycle: ", f"unattached: inode {e}: ",
                 "links: /g: link count 5, 2 by its 2 name(s)", "read-only check: nothing was written"):
        assert said in out, out
    # Taken at its word, g's count would have made 5 references of its block.
    code, out = _fsck(m, "--repair")
    assert code == 1 and " 0 left" in out, out
    code, out = _fsck(m)
    assert code == 0, out
    if postgres is None:                # (a rebuild from the records is SQLite's only)
        code, out = _fsck(m, "--rebuild-catalog")        # the MANIFEST says what the catalog says
        assert code == 0, out

    with _mounted_again(m):
        assert (m.mnt / "d" / "f").read_bytes() == b"page f\n" * 300
        assert (m.mnt / "lost+found" / f"#{e}" / "h").read_bytes() == b"page h\n" * 20
        assert (m.mnt / "lost+found" / f"#{c1}" / "c2" / "k").read_bytes() == b"page k\n" * 9
        assert os.stat(m.mnt / "g").st_nlink == 2 and os.stat(m.mnt / "lost+found").st_nlink == 4
        assert (os.stat(m.mnt / "lost+found").st_mode & 0o777) == 0o700
        found = sh(f"find {m.mnt} | sort").stdout.decode().split()
        assert len(found) == len(set(found)) == 11, found      # root, d, d/f, d/g2, g, lost+found and 5 in it
        sh(f"rm -r {m.mnt}/lost+found {m.mnt}/g")        # the mended tree is an ordinary one
        assert (m.mnt / "d" / "g2").read_bytes() == b"page g\n" * 40
    code, out = _fsck(m)
    assert code == 0, out


def test_a_name_of_an_inode_with_nothing_left_is_removed(tmp_path):
    m = Mounted(tmp_path)
    (m.mnt / "empty").write_bytes(b"")
    (m.mnt / "kept").write_bytes(b"kept\n")
    empty = _ino(m.mnt / "empty")
    m.umount()
    _edit(m, ("DELETE FROM inodes WHERE id=?", (empty,)))
    code, out = _fsck(m, "--repair")
    assert code == 1 and "the name is removed [repaired]" in out, out
    with _mounted_again(m):
        assert sorted(os.listdir(m.mnt)) == ["kept"]
        assert (m.mnt / "kept").read_bytes() == b"kept\n"


def test_a_file_in_the_way_of_lost_and_found_is_left_and_said(tmp_path):
    m = Mounted(tmp_path)
    (m.mnt / "lost+found").write_bytes(b"not a directory\n")
    (m.mnt / "e").mkdir()
    (m.mnt / "e" / "h").write_bytes(b"page h\n")
    e = _ino(m.mnt / "e")
    m.umount()
    _edit(m, ("DELETE FROM dentries WHERE inode=?", (e,)))
    code, out = _fsck(m, "--repair")
    assert code == 4 and "/lost+found is not a directory" in out, out
    with _mounted_again(m):
        assert (m.mnt / "lost+found").read_bytes() == b"not a directory\n"
        sh(f"mv {m.mnt}/lost+found {m.mnt}/was-in-the-way")
    code, out = _fsck(m, "--repair")
    assert code == 1, out
    with _mounted_again(m):
        assert (m.mnt / "lost+found" / f"#{e}" / "h").read_bytes() == b"page h\n"


def test_a_tree_made_by_the_usual_tools_has_nothing_to_say(tmp_path):
    m = Mounted(tmp_path)
    sh(f"mkdir -p {m.mnt}/a/b/c {m.mnt}/x && cp -r /etc/default {m.mnt}/a/b/c/")
    sh(f"ln {m.mnt}/a/b/c/default/$(ls /etc/default | head -1) {m.mnt}/x/hard && ln -s ../a {m.mnt}/x/soft")
    sh(f"mv {m.mnt}/a/b {m.mnt}/x/b && mkdir {m.mnt}/gone && rmdir {m.mnt}/gone")
    m.umount()
    code, out = _fsck(m)
    assert code == 0, out
