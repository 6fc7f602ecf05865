"""Recovery without webfs at scale: tools/webfs-recover rebuilds 2,000 files
in seconds (a sh loop over dd and gzip: a few thousand processes, so it
stays out of make test-fast; the rest of the recovery tests are in
t2_recover_tools)."""
from __future__ import annotations

import random
import resource

from t2_recover_tools import assert_same_tree, build_archive, recover
from t2_recover_tools import restricted_bin, tools  # noqa: F401  (the fixtures, by name)


def test_thousands_of_files_take_seconds(tmp_path_factory, tools, restricted_bin, tmp_path):
    rnd = random.Random(1)
    ops = [("mkdir", b"/c", 0o755)]
    for d in range(20):
        ops.append(("mkdir", b"/c/d%02d" % d, 0o755))
        for f in range(100):
            ops.append(("write", b"/c/d%02d/page-%03d.html" % (d, f),
                        b"<html>%d</html>\n" % rnd.randrange(10**9) * rnd.randrange(1, 200),
                        0o644))
    ops.append(("checkpoint",))
    b = build_archive(tmp_path_factory.mktemp("many"), ops)
    # The processor time it spends, not the wall time: that is what a loaded
    # machine (CI, tests beside it) stretches; the tool's own timeout bounds a hang.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    recover(tools, restricted_bin, tmp_path, *b.disks, tmp_path / "out")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    took = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert_same_tree(b.orig, tmp_path / "out")
    assert took < 60, f"2000 files took {took:.1f} s of processor time"
