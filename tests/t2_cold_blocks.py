"""Block files after a drop of the caches: the signature tree's directories
listed at a mount's start (webfs/blockdirs.py), and the blocks of a trip
fetched ahead advised before they are read (webfs-internals(7), COLD READS,
AGAIN)."""
from __future__ import annotations

from webfs import blockdirs
from webfs.backends.local import LocalBackend
from webfs.assembly import open_archive

from conftest import make_archive


def tree(blocks, tops: int, leaves: int) -> None:
    """blocks/ab/cd/file: ``tops`` directories, ``leaves`` under each."""
    for a in range(tops):
        for c in range(leaves):
            leaf = blocks / f"{a:02x}" / f"{c:02x}"
            leaf.mkdir(parents=True)
            (leaf / "f").write_bytes(b"x")


def test_the_tree_is_listed_top_level_first_and_no_further_than_its_bound(tmp_path):
    """Every directory of a small tree is listed (1 + 3 + 12); under a bound,
    the top level comes first: 4 listings are the root and its three."""
    blocks = tmp_path / "blocks"
    tree(blocks, 3, 4)
    assert blockdirs.warm(str(blocks)) == 16
    assert blockdirs.warm(str(blocks), bound=4) == 4
    assert blockdirs.warm(str(blocks), bound=6) == 6


def test_a_directory_that_cannot_be_listed_is_passed_over(tmp_path):
    """A directory gone (a removal racing the listing) is skipped and
    nothing is raised: the mount goes on as without the listing."""
    assert blockdirs.warm(str(tmp_path / "gone")) == 1


def test_only_quick_local_disks_are_listed(tmp_path):
    """A disk with a simulated delay is not listed (its reads are the
    benchmark's to slow down); the others each get a thread."""
    disks = make_archive(tmp_path, disks=3)
    store = open_archive(str(disks[0]), holder="test", delays={1: 0.01})
    try:
        threads = blockdirs.warm_in_background(store.archive.volumes.values())
        for thread in threads:
            thread.join()
        assert sorted(t.name for t in threads) == ["block directories 0", "block directories 2"]
    finally:
        store.close()


def test_a_file_advised_reads_as_before_and_one_not_there_says_nothing(tmp_path):
    """An advice is a hint: a block file gone (a removal racing the trip)
    raises nothing there; its read says why, as before."""
    disk = LocalBackend(str(tmp_path))
    (tmp_path / "f").write_bytes(b"x" * 9000)
    disk.advise("f")
    assert disk.read("f") == b"x" * 9000
    disk.advise("gone")
