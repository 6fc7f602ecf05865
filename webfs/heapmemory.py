"""What a webfs process's memory outside Python is, and giving it back.

Owns SQLite's count of what it holds (its page caches the most) and
glibc's malloc_trim, which hands the free pages of every malloc arena back
to the system. The daemon trims after a checkpoint and an index pass, the
indexing process after each of its passes: what a pass parsed and wrote
is freed then, and without a trim the process's RSS keeps the largest
pass's (webfs-internals(7), INGEST RATE AND RSS AT SCALE). The daemon's
malloc settings (two arenas) are mountstart's, made before its threads.
"""
from __future__ import annotations


def sqlite_bytes() -> int:
    """Bytes SQLite holds now, all connections of this process; -1 if unknown."""
    import ctypes                               # loaded where asked: commands start quickly
    try:
        used, peak = ctypes.c_int64(), ctypes.c_int64()
        ctypes.CDLL("libsqlite3.so.0").sqlite3_status64(0, ctypes.byref(used), ctypes.byref(peak), 0)
        return used.value
    except (OSError, AttributeError):
        return -1


def trim() -> None:
    """Give the free pages of every malloc arena back to the system."""
    import ctypes
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
