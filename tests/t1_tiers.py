"""The test suite keeps to its tiers (README, Tests): every test file is named
by its tier, the tiers that `make test-fast` runs mount nothing, and the
tests that WEBFS_LONG_TESTS makes longer are the ones `make test-long` runs."""
from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
HELPERS = {"conftest.py", "fault_helpers.py", "seaweed.py"}
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
