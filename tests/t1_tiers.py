"""The test suite keeps to its tiers (README, Tests): every test file is named
by its tier, the tiers that `make test-fast` runs mount nothing, and the
tests that WEBFS_LONG_TESTS makes longer are the ones `make test-long` runs."""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
HELPERS = {"conftest.py", "fault_helpers.py", "postgres.py", "records_helpers.py", "seaweed.py", "warmstart.py"}
SELF = Path(__file__).name
TIER = re.compile(r"t[1-5]_\w+\.py")


def _files(pattern: str = "*.py") -> list[Path]:
    """The test files (this one aside: it names what it looks for)."""
    return sorted(p for p in TESTS.glob(pattern) if p.name not in HELPERS | {SELF})


def test_every_test_file_is_named_by_its_tier():
    strays = [p.name for p in _files() if not TIER.fullmatch(p.name)]
    assert not strays, f"name these t1_..t5_ by tier (README, Tests): {strays}"


def test_the_fast_tiers_mount_nothing():
    """t1-t3 make no FUSE mount: no Mounted archive, no mounted fixture."""
    mounting = re.compile(r"\bMounted\b|\bSmallPieceMount\b|def test_\w+\([^)]*\bmounted\b")
    found = [f"{p.name}:{n}" for p in _files("t[1-3]_*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if mounting.search(line)]
    assert not found, f"a test that mounts belongs in t4 or t5: {found}"


def test_what_webfs_long_tests_lengthens_is_marked_soak():
    """A file that reads the switch (fault_helpers.LONG) marks those tests soak,
    so that `make test-long` (pytest -m soak) runs them; and there are some."""
    unmarked, marked = [], []
    for p in _files():
        text = p.read_text()
        reads = re.search(r"from fault_helpers import [^\n]*\bLONG\b|WEBFS_LONG_TESTS", text)
        if reads and "mark.soak" not in text:
            unmarked.append(p.name)
        if "mark.soak" in text:
            marked.append(p.name)
    assert not unmarked, f"these read WEBFS_LONG_TESTS but are not marked soak: {unmarked}"
    assert marked and all(name.startswith("t5_") for name in marked), marked


def _sleeps_outside_loops(path: Path) -> list[str]:
    """Calls of sleep() in a file that are not in the body of a loop (where
    they pace a poll with a deadline) and whose line does not say it is
    ``not a wait`` (simulated work)."""
    tree = ast.parse(path.read_text())
    lines = path.read_text().splitlines()
    found = []

    def visit(node, in_loop: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)
                continue
            if isinstance(child, ast.Call):
                name = child.func.attr if isinstance(child.func, ast.Attribute) else getattr(child.func, "id", "")
                if name == "sleep" and not in_loop and "not a wait" not in lines[child.lineno - 1]:
                    found.append(f"{path.name}:{child.lineno}")
            visit(child, in_loop or isinstance(child, (ast.While, ast.For, ast.AsyncFor)))
    visit(tree, False)
    return found


def test_no_fixed_sleep_stands_in_for_synchronisation():
    """A test waits for what it needs (conftest.eventually, wait_dead, an event,
    a kill point), with a deadline that only bounds a hang: a fixed sleep is
    too short on a loaded machine and too long on an idle one."""
    found = [where for p in _files() + [TESTS / "conftest.py"] for where in _sleeps_outside_loops(p)]
    assert not found, f"sleeps that wait for something instead of polling for it: {found}"


def test_hypothesis_has_no_deadline():
    """tests/conftest.py loads a profile without hypothesis's 200 ms per example,
    which a loaded machine exceeds."""
    from hypothesis import settings
    assert settings.default.deadline is None and settings(max_examples=5).deadline is None
