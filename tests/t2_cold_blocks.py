"""Block files after a drop of the caches: the blocks of a trip fetched
ahead are opened and advised before they are read, and read by the
descriptors so opened (webfs-internals(7), COLD READS, AGAIN, and GREP OF
SMALL PAGES)."""
from __future__ import annotations

import os

import pytest

from webfs.backends.local import READ_ON, LocalBackend


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_files_read_ahead_are_read_by_the_descriptors_opened_first(tmp_path):
    """Inside the block each file is already open: its read opens nothing
    more and closes the descriptor it took; outside it, a read opens its own."""
    disk = LocalBackend(str(tmp_path))
    for name in "abc":
        (tmp_path / name).write_bytes(name.encode() * 9000)
    before = open_fds()
    with disk.reading_ahead([(name, 9000) for name in "abc"]):
        assert open_fds() == before + 3
        assert disk.read("a") == b"a" * 9000
        assert open_fds() == before + 2
        assert disk.read("b") == b"b" * 9000
        assert disk.read("a") == b"a" * 9000         # again: opened as any read
        assert open_fds() == before + 1
    assert open_fds() == before                       # c, never read, closed at the end
    assert disk.read("c") == b"c" * 9000


def test_a_file_not_there_says_nothing_ahead_and_its_read_says_why(tmp_path):
    """Opening ahead is a hint: a block file gone (a removal racing the trip)
    raises nothing there; its read raises as it would without it."""
    disk = LocalBackend(str(tmp_path))
    (tmp_path / "f").write_bytes(b"x" * 9000)
    with disk.reading_ahead([("gone", 100), ("f", 9000)]):
        with pytest.raises(FileNotFoundError):
            disk.read("gone")
        assert disk.read("f") == b"x" * 9000


def test_a_file_of_another_size_than_expected_is_read_whole(tmp_path):
    """The expected size only sizes the first pread: a file that is longer
    (more than READ_ON past it) is read to its end, a shorter one as it is;
    the checks of its header and signature see the file as the disk has it."""
    disk = LocalBackend(str(tmp_path))
    longer = os.urandom(100) * (3 * READ_ON // 100)
    (tmp_path / "long").write_bytes(longer)
    (tmp_path / "short").write_bytes(b"s" * 10)
    with disk.reading_ahead([("long", 100), ("short", 9000)]):
        assert disk.read("long") == longer
        assert disk.read("short") == b"s" * 10


def test_a_failed_read_inside_still_closes_every_descriptor(tmp_path):
    """A read that raises (here a file read ahead that is a directory: EISDIR
    at its pread) and the block left by the exception close what was opened."""
    disk = LocalBackend(str(tmp_path))
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_bytes(b"f")
    before = open_fds()
    with pytest.raises(IsADirectoryError):
        with disk.reading_ahead([("d", 10), ("f", 1)]):
            disk.read("d")
    assert open_fds() == before
