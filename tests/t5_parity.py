"""Declustered parity after kill -9: a process storing and releasing documents
is killed at random moments, and the next open leaves the parity consistent
(the parity file format and the simulated crashes are in t2_parity)."""
from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import time

from conftest import make_archive, webfs
from t2_parity import assert_parity_consistent, open_store


def test_a_killed_ingest_leaves_consistent_parity(tmp_path):
    """SIGKILL a process storing documents at a random moment, three times."""
    disks = make_archive(tmp_path / "a", disks=5, group_size=4)
    child = textwrap.dedent("""
        import os, random, sys
        from webfs.assembly import open_archive
        store = open_archive(sys.argv[1], holder="ingest")
        rnd = random.Random(int(sys.argv[2]))
        print("ready", flush=True)
        for i in range(100000):
            store.store(rnd.randbytes(rnd.randrange(100, 20000)), name=b"/x", pin=True)
            if rnd.random() < 0.3:
                store.commit()
            if rnd.random() < 0.1:
                rows = store.catalog.query("SELECT id FROM blocks ORDER BY RANDOM() LIMIT 1")
                if rows:
                    store.release(store.catalog.block_by_id(rows[0][0]), pin=True)
    """)
    for seed in range(3):
        proc = subprocess.Popen([sys.executable, "-c", child, str(disks[0]), str(seed)],
                                stdout=subprocess.PIPE)
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(random.Random(seed).uniform(0.3, 1.0))
        proc.kill()
        proc.wait()
        store = open_store(disks)           # reconciles what the kill left
        assert_parity_consistent(store)
        store.close()
    assert webfs("fsck", "--repair", disks[0], check=False).returncode in (0, 1)   # orphan blocks
    assert webfs("scrub", disks[0]).returncode == 0
