"""Block files after a drop of the caches: the blocks of a trip fetched
ahead are advised before they are read (webfs-internals(7), COLD READS,
AGAIN)."""
from __future__ import annotations

from webfs.backends.local import LocalBackend


def test_a_file_advised_reads_as_before_and_one_not_there_says_nothing(tmp_path):
    """An advice is a hint: a block file gone (a removal racing the trip)
    raises nothing there; its read says why, as before."""
    disk = LocalBackend(str(tmp_path))
    (tmp_path / "f").write_bytes(b"x" * 9000)
    disk.advise("f")
    assert disk.read("f") == b"x" * 9000
    disk.advise("gone")
