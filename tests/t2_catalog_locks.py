"""The mount's read-ahead of its catalog file keeps SQLite's locks on it: a
close of another descriptor of the file would drop every POSIX lock the
process holds there (SQLite's "How To Corrupt", 2.2)."""
import sqlite3
import subprocess
import sys

from webfs import catalogfile

# Asked from another process (locks are per process): is any lock held on
# SQLite's lock bytes of the file (from PENDING_BYTE, 0x40000000, 512 bytes)?
PROBE = r'''
import fcntl, struct, sys
with open(sys.argv[1], "rb+") as f:
    asked = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0x40000000, 512, 0)
    print(struct.unpack("hhqqi", fcntl.fcntl(f, fcntl.F_GETLK, asked))[0] != fcntl.F_UNLCK)
'''


def locked(path) -> bool:
    return subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"


def test_the_catalogs_read_ahead_leaves_sqlites_locks_held(tmp_path):
    path = tmp_path / "catalog.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.execute("SELECT * FROM t").fetchall()
    assert locked(path)
    catalogfile.prefetch(str(path))
    assert locked(path)
    db.close()
