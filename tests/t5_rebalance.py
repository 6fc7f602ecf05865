"""webfs rebalance killed with SIGKILL halfway, three times, then run again."""
from __future__ import annotations

import os
import signal
import subprocess
import time

from conftest import BIN, webfs
from t4_rebalance import _files, _json, assert_clean_and_identical, filled


def test_rebalance_killed_with_sigkill_then_run_again_loses_nothing(tmp_path, corpus):
    m = filled(tmp_path, corpus)
    new = tmp_path / "disk4"
    webfs("add-disk", new, m.disks[0])
    planned = _json("rebalance", "--dry-run", m.disks[0])["figures"]["groups_moved"]
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    # Kill it three times, a little later each time, then let it finish.
    for at in (planned // 10, planned // 3, planned // 2):
        proc = subprocess.Popen([str(BIN / "webfs"), "rebalance", str(m.disks[0])], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while len(_files(new)) < at and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
    f = _json("rebalance", m.disks[0])["figures"]
    assert 0 < f["groups_moved"] < planned
    assert _json("rebalance", "--dry-run", m.disks[0])["figures"]["groups_moved"] == 0
    assert_clean_and_identical(m, corpus)
