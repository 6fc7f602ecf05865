"""make test's order of the test files over its xdist workers
(tests/scheduling.py), run for real: pytest -n on a copy of the suite's
conftest and scheduler with test files made here."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _run(root: Path, *args: str) -> list[str]:
    """The test ids in the order one xdist worker ran them (xdist the only
    plugin loaded: a second of CPU, not four)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "xdist", "-p", "no:cacheprovider", "-v",
                           "-n", "1", "-o", "python_files=t[1-5]_*.py", *args, str(root)],
                          cwd=root, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("[gw0] ") and "PASSED" in line]


def _suite(root: Path) -> Path:
    shutil.copy(TESTS / "scheduling.py", root)
    # the line of tests/conftest.py that makes it make test's scheduler
    hook = next(line for line in (TESTS / "conftest.py").read_text().splitlines()
                if line.startswith("from scheduling import"))
    (root / "conftest.py").write_text(hook + "\n")
    (root / "t1_many.py").write_text("".join(f"def test_{i}():\n    pass\n\n\n" for i in range(3)))
    (root / "t5_one.py").write_text("def test_alone():\n    pass\n")
    (root / "t4_two.py").write_text("def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    return root


def test_loadfile_runs_the_heaviest_tier_first(tmp_path):
    """A t5 file (crashes, remounts) goes before a t4 file and a t1 file (pure
    computing), whatever their numbers of tests: xdist alone would run the
    file with the most tests first, leaving the long ones for the end."""
    ran = _run(_suite(tmp_path), "--dist", "loadfile")
    files = [t.split("::")[0] for t in ran]
    assert files == ["t5_one.py"] + ["t4_two.py"] * 2 + ["t1_many.py"] * 3, ran


def test_other_dist_modes_keep_xdist_order(tmp_path):
    """make test-fast's worksteal is left as xdist makes it."""
    ran = _run(_suite(tmp_path), "--dist", "worksteal")
    assert sorted(ran) == sorted(["t1_many.py::test_0", "t1_many.py::test_1", "t1_many.py::test_2",
                                  "t4_two.py::test_a", "t4_two.py::test_b", "t5_one.py::test_alone"])
