"""Directory streams through a mount while names are made and removed: what
readdir may and may not show, with a handle of its own for each opendir
(webfs-internals(7), READS OF DIRECTORIES AND ZIPF PAGES).

POSIX: a name made or removed after opendir or rewinddir may or may not be
seen by the stream; every name there throughout is seen exactly once; a
rewind, and a new opendir, see the directory as it is. The streams are
glibc's own (opendir, readdir, telldir, seekdir, rewinddir through ctypes),
as ls, find and grep -r use them.
"""
from __future__ import annotations

import ctypes
import json
import os

from conftest import sh

LIBC = ctypes.CDLL(None, use_errno=True)


class Dirent(ctypes.Structure):       # glibc's struct dirent on 64-bit Linux
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64), ("d_reclen", ctypes.c_ushort),
                ("d_type", ctypes.c_ubyte), ("d_name", ctypes.c_char * 256)]


LIBC.opendir.restype = ctypes.c_void_p
LIBC.opendir.argtypes = [ctypes.c_char_p]
LIBC.readdir.restype = ctypes.POINTER(Dirent)
LIBC.readdir.argtypes = [ctypes.c_void_p]
LIBC.telldir.restype = ctypes.c_long
LIBC.telldir.argtypes = [ctypes.c_void_p]
LIBC.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
LIBC.rewinddir.argtypes = [ctypes.c_void_p]
LIBC.closedir.argtypes = [ctypes.c_void_p]


class Stream:
    """One directory stream (DIR *), read a name at a time."""

    def __init__(self, path):
        self.dir = LIBC.opendir(os.fsencode(path))
        assert self.dir, os.strerror(ctypes.get_errno())

    def next(self):
        """The next name, or None at the end ("." and ".." skipped)."""
        while True:
            ctypes.set_errno(0)
            entry = LIBC.readdir(self.dir)
            if not entry:
                assert ctypes.get_errno() == 0, os.strerror(ctypes.get_errno())
                return None
            name = entry.contents.d_name.decode()
            if name not in (".", ".."):
                return name

    def rest(self) -> list[str]:
        out = []
        while (name := self.next()) is not None:
            out.append(name)
        return out

    def tell(self) -> int:
        return LIBC.telldir(self.dir)

    def seek(self, pos: int) -> None:
        LIBC.seekdir(self.dir, pos)

    def rewind(self) -> None:
        LIBC.rewinddir(self.dir)

    def close(self) -> None:
        LIBC.closedir(self.dir)


def requests(mnt) -> dict:
    return json.loads(os.getxattr(mnt, "user.webfs.requests"))


def many_names(d, count: int) -> set[str]:
    """Names long enough that a listing takes several of the kernel's readdirs."""
    names = [f"page-{i:04d}-" + "x" * 60 for i in range(count)]
    d.mkdir()
    sh("touch " + " ".join(names), cwd=d)
    return set(names)


def test_a_stream_at_its_end_answers_the_end_without_the_catalog(mounted):
    """The kernel's readdir at the offset a stream's listing ended is answered
    empty without a query: a name made after the stream reached its end is
    not shown by it (POSIX leaves that open), a rewind shows it, and so
    does ls (a new opendir)."""
    d = mounted.mnt / "d"
    d.mkdir()
    sh("touch a b c d e", cwd=d)
    stream = Stream(d)
    before = requests(mounted.mnt)
    assert sorted(stream.rest()) == ["a", "b", "c", "d", "e"]
    at_end = requests(mounted.mnt).get("readdir-at-end", 0) - before.get("readdir-at-end", 0)
    assert at_end == 1                  # the kernel's second readdir, answered without a query
    sh("touch late", cwd=d)
    assert stream.next() is None        # without its own end, the handle asked and found "late"
    stream.rewind()
    assert sorted(stream.rest()) == ["a", "b", "c", "d", "e", "late"]
    stream.close()
    assert sh("ls", cwd=d).stdout.split() == [b"a", b"b", b"c", b"d", b"e", b"late"]


def test_two_streams_of_one_directory_each_keep_their_own_end(mounted):
    """Two opens of a directory read interleaved each see every name once. One
    that reached its end does not make another one's readdir at that offset
    an end: a stream opened after a name was made, seeking to where the
    first ended (telldir, seekdir), finds the name there (a handle shared by
    both opens, the inode as before, would answer it empty)."""
    d = mounted.mnt / "big"
    names = many_names(d, 600)
    first, second = Stream(d), Stream(d)
    seen_first, seen_second = [], []
    for _ in range(len(names)):
        seen_first.append(first.next())
        seen_second.append(second.next())
    assert sorted(seen_first) == sorted(seen_second) == sorted(names)
    end = first.tell()
    assert first.next() is None and second.next() is None
    sh("touch late", cwd=d)
    third = Stream(d)
    assert third.next() in names
    third.seek(end)
    assert third.rest() == ["late"]
    assert first.next() is None
    for s in (first, second, third):
        s.close()


def test_names_made_and_removed_while_a_stream_reads_them(mounted):
    """A stream half way through a directory while names are made and removed
    (the rm and touch of a writer beside a grep -r): every name there
    throughout is seen once, a name made past its position is seen, no name
    twice; grep -r and find after it see the directory as it is."""
    d = mounted.mnt / "big"
    names = many_names(d, 600)
    stream = Stream(d)
    read = [stream.next() for _ in range(100)]
    not_read = sorted(names - set(read))
    gone = {read[10], not_read[-1]}
    for name in gone:
        (d / name).unlink()
    sh("echo zyzzogeton > late", cwd=d)
    rest = stream.rest()
    stream.close()
    seen = read + rest
    assert len(seen) == len(set(seen))
    assert set(seen) >= names - gone
    assert "late" in rest
    assert sh("grep -rl zyzzogeton .", cwd=d).stdout == b"./late\n"
    assert sorted(sh("find . -type f", cwd=d).stdout.split()) == sorted(
        b"./" + n.encode() for n in (names - gone) | {"late"})
